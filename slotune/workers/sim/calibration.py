"""The roofline's fitted numbers, in one place.

``calibration.json`` beside this module holds, per GPU, the efficiency factors and
overheads of :class:`slotune.workers.sim.cost_model.RooflineCostModel`, fitted against the
reference step times (``benchmarks/data/vllm-step-times.csv``, vLLM 0.24 as estimated
by NVIDIA AIConfigurator) by ``benchmarks/fit_calibration.py``. A new GPU or vLLM
release means re-running that script.

GPUs without reference rows (the RTX 4090) take the ``default`` entry. Efficiencies
are dimensionless fractions of a datasheet peak, so they carry over to another GPU by
its own datasheet figures (the catalogue's peak FLOP/s and bandwidth); the fit script
copies the factors of the reference GPU of the same architecture (the L40S: the same
AD102 die as the RTX 4090) into ``default``, and says so in the JSON's ``_default_from``.

Two readers, kept apart on purpose:

* the **simulated engine** (process and virtual time) takes :func:`load_calibration`:
  the file named by ``SLOTUNE_SIM_CALIBRATION`` when it is set (the same format as
  ``calibration.json``), else the shipped one. That file is the "real engine" of a
  virtual sweep: a truth the search does not know.
* the **twin** (``slotune/tuner/strategies/twin``) takes :func:`shipped_calibration` as its prior
  and learns the rest from measurements; it never reads the environment's file.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

CALIBRATION_ENV = "SLOTUNE_SIM_CALIBRATION"
"""Names a calibration file the simulated engine takes instead of the shipped one."""


class CalibrationFileError(ValueError):
    """A calibration file that cannot be read; the message names the file and the field."""


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
def _shipped_document() -> dict[str, Any]:
    text = resources.files("slotune.workers.sim").joinpath("calibration.json").read_text()
    return _checked(json.loads(text), "the shipped calibration.json")


@cache
def _file_document(path: str, mtime_ns: int) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise CalibrationFileError(
            f"{CALIBRATION_ENV}={path}: cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise CalibrationFileError(
            f"{CALIBRATION_ENV}={path}: not JSON ({exc.msg} at line {exc.lineno}); it takes "
            "the format of slotune/workers/sim/calibration.json") from None
    return _checked(data, f"{CALIBRATION_ENV}={path}")


_FACTORS = frozenset(f.name for f in fields(RooflineCalibration))


def _checked(data: Any, where: str) -> dict[str, Any]:
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(gpus, dict) or not gpus:
        raise CalibrationFileError(
            f"{where}: needs a 'gpus' object mapping a GPU name (or 'default') to its "
            "factors, as in slotune/workers/sim/calibration.json")
    for gpu, entry in gpus.items():
        if not isinstance(entry, dict):
            raise CalibrationFileError(f"{where}: gpus.{gpu} must be an object of factors")
        for name, value in entry.items():
            if name not in _FACTORS:
                raise CalibrationFileError(
                    f"{where}: gpus.{gpu}.{name} is not a roofline factor; valid: "
                    f"{', '.join(sorted(_FACTORS))}")
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value) or value < 0):
                raise CalibrationFileError(
                    f"{where}: gpus.{gpu}.{name} must be a number >= 0, got {value!r}")
    checked: dict[str, Any] = data
    return checked


CPU_OVERHEAD_FACTOR = 20.0
"""vLLM's CPU build pays per step, layer and sequence in Python and oneDNN dispatch what a
GPU pays in kernel launches: about 20× the default entry's overheads (an unbounded fit
to a grid of real capacity trials of the tiny model on two AVX2 cores gave ×19). The
prior of ``gpu: cpu`` when a file has no ``cpu`` entry of its own."""
COMPUTE_FACTORS = ("gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency")
"""The factors that scale with the tensor cores' achieved throughput."""
MEMORY_FACTORS = ("memory_efficiency", "kv_efficiency", "fp8_kv_efficiency")
"""The factors that scale with the achieved memory bandwidth."""
OVERHEAD_FACTORS = ("step_overhead_s", "layer_overhead_s", "attention_overhead_per_layer_s",
                    "eager_overhead_per_layer_s", "per_seq_overhead_s")
"""The fixed costs (seconds) per step, layer, attention pass and sequence."""


def _entry(document: dict[str, Any], gpu_name: str) -> RooflineCalibration:
    table: dict[str, dict[str, float]] = document["gpus"]
    entry = dict(table.get(gpu_name, table.get("default", {})))
    if gpu_name == "cpu" and "cpu" not in table:
        defaults = RooflineCalibration()
        for name in OVERHEAD_FACTORS:
            entry[name] = float(entry.get(name, getattr(defaults, name))) * CPU_OVERHEAD_FACTOR
    return RooflineCalibration(**{k: float(v) for k, v in entry.items() if k in _FACTORS})


def calibrated_gpus() -> list[str]:
    """The GPUs with a fitted entry of their own in the shipped file (not the default)."""
    return sorted(name for name in _shipped_document()["gpus"] if name != "default")


def shipped_calibration(gpu_name: str) -> RooflineCalibration:
    """The shipped fit for a GPU (the default entry for one without reference rows).

    The twin's prior: it never looks at ``SLOTUNE_SIM_CALIBRATION``."""
    return _entry(_shipped_document(), gpu_name)


def load_calibration(gpu_name: str) -> RooflineCalibration:
    """The calibration the simulated engine runs with: the ``SLOTUNE_SIM_CALIBRATION``
    file's entry when the variable is set, else the shipped fit."""
    path = os.environ.get(CALIBRATION_ENV, "").strip()
    if not path:
        return shipped_calibration(gpu_name)
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError as exc:
        raise CalibrationFileError(
            f"{CALIBRATION_ENV}={path}: cannot read it ({exc.strerror})") from None
    return _entry(_file_document(path, mtime), gpu_name)
