"""Where the benchmark scripts find the reference step times."""

from __future__ import annotations

import os
from pathlib import Path

from slotune.workers.sim.reference import (
    MOE_REFERENCE_CSV,
    REFERENCE_CSV,
    ReferenceRow,
    read_reference,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
IN_REPO_COPY = REPO_ROOT / "benchmarks" / "data" / REFERENCE_CSV


def reference_csv() -> Path:
    """``$SLOTUNE_REFERENCE_DIR/vllm-step-times.csv``, else the in-repo copy.

    The directory defaults to ``../shared/reference`` from the repository root.
    """
    default = REPO_ROOT.parent / "shared" / "reference"
    shared = Path(os.environ.get("SLOTUNE_REFERENCE_DIR", default)) / REFERENCE_CSV
    return shared if shared.is_file() else IN_REPO_COPY


def load_rows() -> list[ReferenceRow]:
    return read_reference(reference_csv())


MOE_CSV = REPO_ROOT / "benchmarks" / "data" / MOE_REFERENCE_CSV
"""The mixture-of-experts rows (in the repository only: derived, see its maker)."""


def load_moe_rows() -> list[ReferenceRow]:
    return read_reference(MOE_CSV)
