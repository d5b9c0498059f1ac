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

import json
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Any


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
