"""A mixture-of-experts model on a real `vllm serve`: the CPU build, a tiny local Qwen3-MoE.

The model (4 experts, 2 per token, random weights) comes from
``scripts/setup_vllm_cpu.sh`` (``tests/support/realvllm.py``). The space searches data and
expert parallelism. The CPU build serves the model on one rank; two data-parallel ranks
with expert parallelism start (one endpoint, two engine cores) and die at the first
request, in the CPU communicator's unimplemented ``all_gatherv`` — what the trial
records as ``invalid_config`` in vLLM's words, not as a crash. (Tensor parallelism on
the CPU build needs a NUMA node per rank, which these machines lack:
``tests/fixtures/vllm/refused_cpu_tensor_parallel_numa.log``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import realvllm
from tests.support.procscan import engine_pids

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
PROMPTS, INPUT_LEN, OUTPUT_LEN = 12, 64, 16


def moe_space(folder: Path) -> Path:
    space: dict[str, Any] = {
        "name": "tiny-moe-cpu",
        "engine": "vllm",
        "model": realvllm.tiny_moe_model(),
        "gpu": "cpu",
        "fixed": dict(realvllm.SERVE_ARGS),
        "allowed_extra_args": list(realvllm.EXTRA_ARGS),
        "knobs": {
            "data_parallel_size": {"type": "values", "values": [1, 2], "default": 1},
            "enable_expert_parallel": {"type": "bool", "default": False},
        },
        "workload": {
            "name": "tiny-moe-chat",
            "dataset": {"kind": "random", "input_len": INPUT_LEN, "output_len": OUTPUT_LEN},
            "arrivals": {"request_rate": 2},
            "num_prompts": PROMPTS,
            "warmup_requests": 2,
        },
        "slo": "ttft:5000,tpot:500",  # generous: the layout is under test, not speed
        "mode": "goodput",
    }
    path = folder / "tiny-moe-cpu.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def trial(space: Path, *sets: str, timeout: float) -> tuple[int, dict[str, Any], str]:
    run_id = f"real-moe-{uuid.uuid4().hex[:6]}"
    args = [a for s in sets for a in ("--set", s)]
    proc = subprocess.run(
        [SLOTUNE, "trial", "run", "--space", str(space), *args, "--run-id", run_id,
         "--json"], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, "SLOTUNE_VLLM_BIN": realvllm.vllm_binary()})
    assert engine_pids(run_id) == []
    return proc.returncode, json.loads(proc.stdout or "{}"), proc.stderr


@pytest.mark.timeout(1200)  # two boots; DP 2 starts two engine cores (minutes on 2 cores)
def test_a_tiny_moe_model_serves_and_a_layout_the_cpu_build_lacks_is_invalid_config(
        tmp_path: Path) -> None:
    space = moe_space(tmp_path)
    code, result, stderr = trial(space, timeout=600)  # the space's defaults: one rank
    assert code == 0, (result.get("failure_message"), (result.get("log_tail") or "")[-3000:],
                       stderr[-2000:])
    assert result["status"] == "ok" and result["objective"] > 0
    assert result["engine"]["engine_version"].startswith("0.32")
    assert result["metrics"]["completed"] == PROMPTS
    # Two data-parallel ranks with expert parallelism: one replica of two devices,
    # healthy at start, then the CPU build's expert dispatch is not implemented.
    code, refused, stderr = trial(space, "data_parallel_size=2", "enable_expert_parallel=true",
                                  timeout=900)
    assert code == 3, stderr[-3000:]
    assert refused["status"] == "failed" and refused["failure"] == "invalid_config", refused[
        "failure_message"]
    assert "NotImplementedError in all_gatherv" in refused["failure_message"]
    assert refused["engine"]["resolved_config"]["data_parallel_size"] == 2
    assert refused["engine"]["kv_cache_tokens"] > 0  # it did boot: vLLM's own refusal
    assert refused["constraints"]["fits"] > 0  # teaches the sampler the layout is out
