"""The roofline's fitted numbers, in one place.

``calibration.json`` beside this module holds, per GPU, the efficiency factors and
overheads fitted against ``shared/reference/vllm-step-times.csv`` by
``benchmarks/fit_calibration.py``. A new GPU or vLLM release means re-running that
script; GPUs without reference rows (the RTX 4090) take the ``default`` entry, which
carries the fitted factors over by datasheet figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources


@dataclass(frozen=True, slots=True)
class RooflineCalibration:
    gemm_efficiency: float = 0.65
    attention_efficiency: float = 0.35
    memory_efficiency: float = 0.80
    step_overhead_s: float = 1.2e-3
    eager_overhead_per_layer_s: float = 60e-6
    per_seq_overhead_s: float = 4e-6


@cache
def _table() -> dict[str, dict[str, float]]:
    text = resources.files("workers.sim").joinpath("calibration.json").read_text()
    data: dict[str, dict[str, float]] = json.loads(text)["gpus"]
    return data


def load_calibration(gpu_name: str) -> RooflineCalibration:
    """The fitted calibration for a GPU, or the default entry for a GPU without reference rows."""
    table = _table()
    entry = table.get(gpu_name, table.get("default", {}))
    known = {f.name for f in fields(RooflineCalibration)}
    return RooflineCalibration(**{k: float(v) for k, v in entry.items() if k in known})
