"""``slotune sim step-time`` as a user runs it: a subprocess, its output and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slotune.workers.sim.reference import read_reference
from tests.support.paths import REPO

SLOTUNE = Path(sys.executable).parent / "slotune"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SLOTUNE), "sim", "step-time", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def run_json(*args: str) -> dict[str, Any]:
    result = run_cli(*args, "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def reference_ms(**match: object) -> float:
    rows = [r for r in read_reference(REPO / "benchmarks" / "data" / "vllm-step-times.csv")
            if all(getattr(r, k) == v for k, v in match.items())]
    assert len(rows) == 1, rows
    return rows[0].latency_ms


def test_decode_step_is_within_20_percent_of_the_reference_row() -> None:
    out = run_json(LLAMA, "--sim-gpu", "h100-sxm", "--prefill-tokens", "0",
                   "--decode-seqs", "64", "--context-len", "2112")
    ref = reference_ms(gpu="h100_sxm", weights="bf16", kv_cache="bf16", kind="decode",
                       decode_seqs=64, isl=2048, osl=128, model="meta-llama/Meta-Llama-3.1-8B")
    assert abs(out["total_ms"] / ref - 1.0) < 0.20
    assert out["shape"] == {"prefill_tokens": 0, "decode_seqs": 64, "context_len": 2112,
                            "num_tokens": 64}
    assert set(out["breakdown_ms"]) == {"compute", "memory", "overhead", "communication"}
    assert out["breakdown_ms"]["communication"] == 0.0


def test_prefill_step_is_within_20_percent_of_the_reference_row() -> None:
    out = run_json("Qwen/Qwen3-8B", "--sim-gpu", "h200_sxm", "--prefill-tokens", "2048")
    ref = reference_ms(gpu="h200_sxm", model="Qwen/Qwen3-8B", kind="prefill",
                       prefill_tokens=2048)
    assert abs(out["total_ms"] / ref - 1.0) < 0.20


def test_human_table_shows_the_breakdown() -> None:
    result = run_cli(LLAMA, "--sim-gpu", "l40s", "--prefill-tokens", "512",
                     "--decode-seqs", "16", "--context-len", "1024")
    assert result.returncode == 0, result.stderr
    for label in ("step time", "compute", "memory", "overhead", "communication"):
        assert label in result.stdout


def test_flags_move_the_step_time_the_right_way() -> None:
    base = [LLAMA, "--sim-gpu", "h100", "--decode-seqs", "8", "--context-len", "4096"]
    plain = run_json(*base)["total_ms"]
    assert run_json(*base, "--quantization", "fp8")["total_ms"] < plain
    assert run_json(*base, "--kv-cache-dtype", "fp8")["total_ms"] < plain
    eager = run_json(*base, "--enforce-eager")
    assert eager["total_ms"] > plain and eager["enforce_eager"] is True
    tp2 = run_json(*base, "--tensor-parallel-size", "2")
    assert tp2["breakdown_ms"]["communication"] > 0.0


def test_a_moe_layout_is_priced_per_rank_and_reported() -> None:
    shape = ["--decode-seqs", "64", "--context-len", "1000"]
    one = run_json("Qwen/Qwen3-30B-A3B", "--sim-gpu", "h100", *shape)
    ep = run_json("Qwen/Qwen3-30B-A3B", "--sim-gpu", "h100", "-dp", "4",
                  "--enable-expert-parallel", *shape)
    assert (ep["data_parallel_size"], ep["enable_expert_parallel"]) == (4, True)
    # each rank reads a quarter of the experts; the ranks exchange hidden states
    assert ep["breakdown_ms"]["memory"] < one["breakdown_ms"]["memory"] / 2
    assert ep["breakdown_ms"]["communication"] > 0 == one["breakdown_ms"]["communication"]


def test_fp8_on_a100_runs_weight_only_with_a_note() -> None:
    base = [LLAMA, "--sim-gpu", "a100", "--decode-seqs", "8", "--context-len", "512"]
    fp8 = run_json(*base, "--quantization", "fp8")
    assert "Marlin" in " ".join(fp8["notes"])
    # Half the weight bytes at the same BF16 compute rate: faster memory-bound decode.
    assert fp8["total_ms"] < run_json(*base)["total_ms"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no/such-model", "--sim-gpu", "h100"], "unknown model"),
        ([LLAMA, "--sim-gpu", "tpu-v9"], "unknown GPU"),
        ([LLAMA, "--sim-gpu", "h100", "--decode-seqs", "-4"], "--decode-seqs must be >= 0"),
        ([LLAMA, "--sim-gpu", "h100", "--prefill-tokens", "-1"], "--prefill-tokens must be"),
        ([LLAMA, "--sim-gpu", "h100", "--quantization", "int3"], "unknown quantization"),
        ([LLAMA, "--sim-gpu", "h100", "--kv-cache-dtype", "fp4"], "unknown --kv-cache-dtype"),
        ([LLAMA, "--sim-gpu", "h100", "--tensor-parallel-size", "3"], "must be divisible"),
        ([LLAMA, "--sim-gpu", "h100", "--sim-cost-model", "magic"], "unknown cost model"),
        ([LLAMA, "--sim-gpu", "h100", "-dp", "2", "--enable-expert-parallel"], "has no experts"),
        (["Qwen/Qwen3-30B-A3B", "--sim-gpu", "h100", "-dp", "5"], "intermediate size (768)"),
        ([LLAMA, "--sim-gpu", "rtx4090", "--decode-seqs", "1", "--context-len", "8",
          "--sim-cost-model", "aiconfigurator"], "aiconfigurator"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("gpu", "flags"), [
    ("h100-sxm", []),
    ("rtx4090", ["--quantization", "fp8", "--kv-cache-dtype", "fp8"]),
])
def test_the_command_and_the_scheduler_agree_on_the_same_shape(gpu: str,
                                                                flags: list[str]) -> None:
    """A lone 1024-token prefill, then the first decode step of 8 equal requests."""
    from slotune.workers.sim.config import build_config
    from slotune.workers.sim.virtual_time import SimRequestSpec, simulate

    options = dict(zip(flags[::2], flags[1::2], strict=True))
    config = build_config(LLAMA, sim_gpu=gpu, quantization=options.get("--quantization"),
                          kv_cache_dtype=options.get("--kv-cache-dtype", "auto"))
    lone = simulate(config, [SimRequestSpec(0.0, list(range(1024)), 4)])
    prefill = run_json(LLAMA, "--sim-gpu", gpu, "--prefill-tokens", "1024", "--decode-seqs",
                       "0", "--context-len", "0", *flags)
    assert lone.requests[0].ttft == pytest.approx(prefill["total_ms"] / 1e3, rel=1e-9)

    prompt_len = 200
    batch = [SimRequestSpec(0.0, [i * 1000 + t for t in range(prompt_len)], 4)
             for i in range(8)]
    result = simulate(config, batch)
    # Step 1 prefills all 8 prompts (1,600 tokens fit any default budget); step 2 decodes
    # each with prompt_len + 1 tokens of context (its prompt and its first token).
    first_gap = {r.token_times[1] - r.token_times[0] for r in result.requests}
    assert len(first_gap) == 1
    decode = run_json(LLAMA, "--sim-gpu", gpu, "--prefill-tokens", "0", "--decode-seqs", "8",
                      "--context-len", str(prompt_len + 1), *flags)
    assert first_gap.pop() == pytest.approx(decode["total_ms"] / 1e3, rel=1e-9)
