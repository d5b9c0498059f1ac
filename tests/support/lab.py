"""The seed's lab space as the sweep tests drive it: its trial specs at 4 req/s in goodput
mode, two of its configurations a run apart, and a space of tensor-parallel sizes."""

from __future__ import annotations

from typing import Any

from slotune.tuner.sweep.request import resolve_space
from slotune.workers.contracts import TrialSpec, Workload
from tests.support.sweep_data import LAB_4RPS

__all__ = ["AT_4_RPS", "FAST", "SLOW", "SPACE", "TP_SPACE", "spec"]

SPACE = resolve_space("lab")
FAST = {**SPACE.defaults(), "max_num_seqs": 128}
SLOW = {**SPACE.defaults(), "max_num_seqs": 32, "max_num_batched_tokens": 512}
AT_4_RPS = Workload.model_validate(LAB_4RPS)
"""The lab traffic at 4 req/s in goodput mode: one short run a trial, configurations apart."""


def spec(params: dict[str, Any], run_id: str) -> TrialSpec:
    return SPACE.to_trial_spec(params, run_id, workload=AT_4_RPS, mode="goodput")


TP_SPACE: dict[str, Any] = {
    "name": "tp-248", "engine": "sim", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "rtx4090",
    "fixed": {"quantization": "fp8", "max_model_len": 4096},
    "knobs": {"tensor_parallel_size": {"type": "values", "values": [2, 4, 8], "default": 2},
              "max_num_seqs": {"type": "values", "values": [64, 128], "default": 64}},
    "workload": {"name": "tp-4rps", "dataset": {"kind": "random", "input_len": 256,
                                                "output_len": 64},
                 "arrivals": {"request_rate": 4}, "num_prompts": 40, "warmup_requests": 2},
    "slo": "ttft:300,tpot:50", "sim": {"time_scale": 3},
}
"""A space of tensor-parallel sizes 2, 4 and 8, of which the virtual executor's two GPUs
hold only 2."""
