"""The reference rows: reading them and turning each into the step the simulator costs.

Shared by ``benchmarks/fit_calibration.py``, ``benchmarks/sim_fidelity.py`` and the
tests, so that all three judge the model on exactly the same shapes. (Kept apart from
:mod:`slotune.workers.sim.calibration`, which the cost model imports at run time: these helpers
need the cost model, and the runtime must not need them.)
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass

from slotune.workers.sim.catalog import get_gpu, get_model
from slotune.workers.sim.cost_model import HardwareSetup, StepShape

__all__ = ["MOE_REFERENCE_CSV", "REFERENCE_CSV", "ReferenceRow", "read_reference",
           "reference_setup", "reference_shape"]

REFERENCE_CSV = "vllm-step-times.csv"
MOE_REFERENCE_CSV = "vllm-moe-step-times.csv"
"""Mixture-of-experts rows, derived by ``benchmarks/make_moe_reference.py`` (its docstring
says how); the same columns plus ``dp`` and ``ep``."""


@dataclass(frozen=True, slots=True)
class ReferenceRow:
    """One row of the reference file (see its README for the columns)."""

    model: str
    gpu: str
    tp: int
    weights: str
    kv_cache: str
    kind: str
    prefill_tokens: int
    decode_seqs: int
    isl: int
    osl: int
    latency_ms: float
    dp: int = 1
    """Data-parallel ranks (the MoE rows' column; 1 where the file has none)."""
    ep: bool = False
    """Expert parallelism (the MoE rows' column)."""


def read_reference(path: str | os.PathLike[str]) -> list[ReferenceRow]:
    """Parse the reference CSV (``model,gpu,tp,weights,kv_cache,kind,...,latency_ms``)."""
    with open(path, newline="") as f:
        return [
            ReferenceRow(
                model=r["model"], gpu=r["gpu"], tp=int(r["tp"]), weights=r["weights"],
                kv_cache=r["kv_cache"], kind=r["kind"], prefill_tokens=int(r["prefill_tokens"]),
                decode_seqs=int(r["decode_seqs"]), isl=int(r["isl"]), osl=int(r["osl"]),
                latency_ms=float(r["latency_ms"]), dp=int(r.get("dp") or 1),
                ep=(r.get("ep") or "0") not in ("0", "false", "False"),
            )
            for r in csv.DictReader(f)
        ]


def reference_setup(row: ReferenceRow) -> HardwareSetup:
    """The simulator's hardware setup for a reference row (its names go through the catalogue)."""
    return HardwareSetup(
        model=get_model(row.model), gpu=get_gpu(row.gpu), tensor_parallel_size=row.tp,
        weight_format="fp8" if row.weights == "fp8" else "bf16",
        kv_cache_dtype="fp8" if row.kv_cache == "fp8" else "auto",
        data_parallel_size=row.dp, enable_expert_parallel=row.ep,
    )


def reference_shape(row: ReferenceRow) -> StepShape:
    """The step a reference row describes.

    * ``prefill``: one fresh prompt of ``prefill_tokens``;
    * ``decode``: ``decode_seqs`` sequences of ``isl + osl // 2`` tokens of context;
    * ``mixed``: the decoding sequences as in ``decode``, beside a prefill chunk of
      ``prefill_tokens``. In these rows ``isl`` is also the prompt length of the requests
      being prefilled (AIConfigurator costs the chunk's attention as the whole ``isl``
      prompt's divided by ``ceil(isl / chunk)``), so a chunk shorter than ``isl`` is a
      slice of a longer prompt, attending to ``isl / 2`` earlier tokens on average, and a
      chunk longer than ``isl`` holds ``chunk / isl`` whole prompts. Either way the chunk
      has ``chunk × isl / 2`` query-key pairs, not ``chunk² / 2`` as a fresh prompt would.
    """
    context = row.isl + row.osl // 2
    if row.kind == "prefill":
        return StepShape.uniform(row.prefill_tokens, 0, 0)
    if row.kind == "decode":
        return StepShape.uniform(0, row.decode_seqs, context)
    if row.kind != "mixed":
        raise ValueError(f"unknown reference row kind {row.kind!r}")
    chunk = row.prefill_tokens
    prompts = max(1, -(-chunk // row.isl))
    pairs = chunk * row.isl / 2
    return StepShape(
        prefill_tokens=chunk, prefill_seqs=prompts, prefill_attention_pairs=pairs,
        prefill_context=chunk if chunk >= row.isl else chunk + row.isl // 2,
        decode_seqs=row.decode_seqs, decode_context=row.decode_seqs * context,
    )
