"""Perturbed truths for the twin's tests: the simulated engine's calibration, moved."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from tuner.spaces import SearchSpace, parse_space
from workers.sim.calibration import shipped_calibration

COMPUTE = ("gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency")
MEMORY = ("memory_efficiency", "kv_efficiency", "fp8_kv_efficiency")
OVERHEAD = ("step_overhead_s", "layer_overhead_s", "attention_overhead_per_layer_s",
            "eager_overhead_per_layer_s", "per_seq_overhead_s")


def write_truth(path: Path, gpu: str, *, compute: float = 1.0, memory: float = 1.0,
                overhead: float = 1.0) -> Path:
    """A SLOTUNE_SIM_CALIBRATION file: the shipped factors of ``gpu``, scaled."""
    factors = asdict(shipped_calibration(gpu))
    for names, scale in ((COMPUTE, compute), (MEMORY, memory), (OVERHEAD, overhead)):
        for name in names:
            factors[name] *= scale
    path.write_text(json.dumps({"gpus": {gpu: factors}}))
    return path


SMALL = {
    "name": "twin-small",
    "model": "Qwen/Qwen2.5-7B-Instruct",
    "gpu": "l40s",
    "fixed": {"max_model_len": 2048},
    "knobs": {
        "max_num_seqs": {"type": "values", "values": [8, 32, 128], "default": 128},
        "max_num_batched_tokens": {"type": "values", "values": [512, 2048, 8192],
                                   "default": 2048},
        "enable_chunked_prefill": {"type": "bool", "default": True},
    },
    "workload": {"name": "twin-w", "dataset": {"kind": "random", "input_len": 1024,
                                               "output_len": 128},
                 "arrivals": {"request_rate": 4}, "num_prompts": 60},
    "slo": "ttft:500,tpot:40",
    "mode": "capacity",
    "capacity": {"min_rate": 0.25, "max_rate": 64, "relative_tolerance": 0.05,
                 "max_probes": 8},
}


def small_space() -> SearchSpace:
    """18 configurations (3 refused: no chunking below max_model_len) where the batch
    limit, the chunk size and chunking all matter."""
    return parse_space(SMALL)
