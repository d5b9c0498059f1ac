"""The roofline's fitted numbers, in one place.

``calibration.json`` beside this module holds, per GPU, the efficiency factors and
overheads of :class:`workers.sim.cost_model.RooflineCostModel`, fitted against the
reference step times (``benchmarks/data/vllm-step-times.csv``, vLLM 0.24 as estimated
by NVIDIA AIConfigurator) by ``benchmarks/fit_calibration.py``. A new GPU or vLLM
release means re-running that script.

GPUs without reference rows (the RTX 4090) take the ``default`` entry. Efficiencies
are dimensionless fractions of a datasheet peak, so they carry over to another GPU by
its own datasheet figures (the catalogue's peak FLOP/s and bandwidth); the fit script
copies the factors of the reference GPU of the same architecture (the L40S: the same
AD102 die as the RTX 4090) into ``default``, and says so in the JSON's ``_default_from``.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.sim.cost_model import HardwareSetup, StepShape


@dataclass(frozen=True, slots=True)
class RooflineCalibration:
    """Efficiency factors (fractions of a datasheet peak) and overheads (seconds) of one GPU."""

    gemm_efficiency: float = 0.70
    """Achieved fraction of the BF16 tensor peak in linear layers (also W8A16/W4A16 kernels)."""
    fp8_gemm_efficiency: float = 0.50
    """Achieved fraction of the FP8 tensor peak in FP8 linear layers.

    Includes the dynamic quantisation of activations, so it is lower than the BF16 one."""
    memory_efficiency: float = 0.80
    """Achieved fraction of the memory bandwidth streaming weights and activations."""
    kv_efficiency: float = 0.85
    """Achieved fraction of the memory bandwidth reading a BF16 KV cache in decode attention."""
    fp8_kv_efficiency: float = 0.75
    """The same for an FP8 KV cache (dequantised inside the attention kernel)."""
    attention_efficiency: float = 0.40
    """Achieved fraction of the BF16 tensor peak in prefill (flash) attention."""
    overlap_exponent: float = 3.0
    """k of the smooth maximum (c**k + m**k)**(1/k) of compute and memory time; inf = hard max."""
    step_overhead_s: float = 0.3e-3
    """Fixed cost of one step (scheduling, input preparation, sampling launch)."""
    layer_overhead_s: float = 15e-6
    """Kernel launch and small-kernel cost per layer per step, with CUDA graphs."""
    attention_overhead_per_layer_s: float = 10e-6
    """Fixed cost per layer of each attention pass present (prefill and decode)."""
    eager_overhead_per_layer_s: float = 60e-6
    """Extra per-layer cost of launching kernels one by one (``--enforce-eager``).

    Not in the reference data (it models CUDA-graph execution); a prior from vLLM's own
    advice that CUDA graphs save several milliseconds per step on 30-80 layer models."""
    per_seq_overhead_s: float = 4e-6
    """CPU cost per scheduled sequence (input preparation, sampling, detokenisation)."""


@cache
def _document() -> dict[str, Any]:
    text = resources.files("workers.sim").joinpath("calibration.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def calibrated_gpus() -> list[str]:
    """The GPUs with a fitted entry of their own (not the default)."""
    return sorted(name for name in _document()["gpus"] if name != "default")


def load_calibration(gpu_name: str) -> RooflineCalibration:
    """The fitted calibration for a GPU, or the default entry for a GPU without reference rows."""
    table: dict[str, dict[str, float]] = _document()["gpus"]
    entry = table.get(gpu_name, table.get("default", {}))
    known = {f.name for f in fields(RooflineCalibration)}
    return RooflineCalibration(**{k: float(v) for k, v in entry.items() if k in known})


# --- The reference rows: reading them and turning each into the step the simulator costs.
# Shared by benchmarks/fit_calibration.py, benchmarks/sim_fidelity.py and the tests, so
# that all three judge the model on exactly the same shapes.

REFERENCE_CSV = "vllm-step-times.csv"


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


def read_reference(path: str | os.PathLike[str]) -> list[ReferenceRow]:
    """Parse the reference CSV (``model,gpu,tp,weights,kv_cache,kind,...,latency_ms``)."""
    with open(path, newline="") as f:
        return [
            ReferenceRow(
                model=r["model"], gpu=r["gpu"], tp=int(r["tp"]), weights=r["weights"],
                kv_cache=r["kv_cache"], kind=r["kind"], prefill_tokens=int(r["prefill_tokens"]),
                decode_seqs=int(r["decode_seqs"]), isl=int(r["isl"]), osl=int(r["osl"]),
                latency_ms=float(r["latency_ms"]),
            )
            for r in csv.DictReader(f)
        ]


def reference_setup(row: ReferenceRow) -> HardwareSetup:
    """The simulator's hardware setup for a reference row (its names go through the catalogue)."""
    from workers.sim.catalog import get_gpu, get_model
    from workers.sim.cost_model import HardwareSetup

    return HardwareSetup(
        model=get_model(row.model), gpu=get_gpu(row.gpu), tensor_parallel_size=row.tp,
        weight_format="fp8" if row.weights == "fp8" else "bf16",
        kv_cache_dtype="fp8" if row.kv_cache == "fp8" else "auto",
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
    from workers.sim.cost_model import StepShape

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
