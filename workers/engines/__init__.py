"""Engine adapters: turn a TrialSpec into a running inference server, and end it.

``make_engine`` picks the adapter by the spec's ``engine`` (``adapter_for`` the class,
for what an engine knows before it runs); an unknown kind fails with the list of valid
ones. Adding an engine is one adapter module and one line in :data:`ENGINES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from workers.contracts import TrialSpec
from workers.engines._log_patterns import boot_phases
from workers.engines.base import (
    EngineAdapter,
    EngineFailure,
    EngineState,
    InvalidEngineArgs,
    classify_failure,
    flag_args,
    parse_startup_log,
)
from workers.engines.redact import redact_argv
from workers.engines.sim import SimEngine
from workers.engines.vllm import VllmEngine

ENGINES: dict[str, type[EngineAdapter]] = {"vllm": VllmEngine, "sim": SimEngine}

__all__ = [
    "ENGINES",
    "EngineAdapter",
    "EngineFailure",
    "EngineState",
    "InvalidEngineArgs",
    "SimEngine",
    "VllmEngine",
    "adapter_for",
    "boot_phases",
    "classify_failure",
    "flag_args",
    "make_engine",
    "parse_startup_log",
    "redact_argv",
]


def adapter_for(engine: str) -> type[EngineAdapter]:
    """The adapter class of an engine kind (what it knows without a running server)."""
    try:
        return ENGINES[engine]
    except KeyError:
        raise ValueError(
            f"unknown engine {engine!r}; valid: {', '.join(sorted(ENGINES))}") from None


def make_engine(spec: TrialSpec, workdir: Path, gpu_ids: Sequence[str] = ()) -> EngineAdapter:
    return adapter_for(spec.engine)(spec, workdir, gpu_ids)
