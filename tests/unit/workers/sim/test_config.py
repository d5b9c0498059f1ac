"""Configuration: vLLM's defaults, its refusals (in its words) and the KV memory model."""

from __future__ import annotations

import re

import pytest

from slotune.workers.sim.catalog import UnknownCatalogEntry
from slotune.workers.sim.config import (
    EngineConfigError,
    build_config,
    plan_memory,
    runtime_oom_tokens,
    startup_log_lines,
)

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"


def test_defaults_follow_gpu_memory_like_vllm() -> None:
    small = build_config(QWEN7B, sim_gpu="rtx4090")
    assert (small.max_num_batched_tokens, small.max_num_seqs) == (2048, 256)
    big = build_config(QWEN7B, sim_gpu="h100-sxm")
    assert (big.max_num_batched_tokens, big.max_num_seqs) == (8192, 1024)
    # The A100 is excluded from the large defaults even with 80 GiB.
    a100 = build_config(QWEN7B, sim_gpu="a100-80g")
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert small.max_model_len == 32768
    assert small.enable_prefix_caching and small.enable_chunked_prefill


def test_refuses_batched_tokens_below_max_num_seqs_with_vllms_sentence() -> None:
    with pytest.raises(EngineConfigError) as info:
        build_config(QWEN7B, max_num_batched_tokens=32, max_num_seqs=64)
    assert str(info.value) == (
        "max_num_batched_tokens (32) must be greater than or equal to max_num_seqs (64)."
    )


def test_refuses_short_budget_without_chunked_prefill() -> None:
    with pytest.raises(EngineConfigError) as info:
        build_config(QWEN7B, enable_chunked_prefill=False, max_num_batched_tokens=4096,
                     max_model_len=8192)
    assert str(info.value).startswith(
        "max_num_batched_tokens (4096) is smaller than max_model_len (8192). This effectively "
        "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
        "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
    )


def test_chunked_prefill_off_raises_default_budget_to_max_model_len() -> None:
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", enable_chunked_prefill=False,
                       max_model_len=8192)
    assert cfg.max_num_batched_tokens == 8192


def test_refuses_kv_cache_smaller_than_one_max_len_sequence() -> None:
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", gpu_memory_utilization=0.72)
    with pytest.raises(EngineConfigError) as info:
        plan_memory(cfg)
    message = str(info.value)
    # vLLM 0.32's words (older releases wrote "models's").
    assert message.startswith("To serve at least one request with the model's max seq len "
                              "(32768)")
    estimated = int(re.search(r"estimated maximum model length is (\d+)", message).group(1))  # type: ignore[union-attr]
    # The estimate is honest: that length does start.
    assert plan_memory(build_config(QWEN7B, sim_gpu="rtx4090", gpu_memory_utilization=0.72,
                                    max_model_len=estimated)).kv_tokens >= estimated


def test_refuses_when_no_memory_is_left_for_kv_blocks() -> None:
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", gpu_memory_utilization=0.5)
    with pytest.raises(EngineConfigError, match="No available memory for the cache blocks"):
        plan_memory(cfg)


def test_weights_larger_than_the_gpu_are_an_oom() -> None:
    cfg = build_config("meta-llama/Llama-3.1-70B-Instruct", sim_gpu="h100-sxm")
    with pytest.raises(EngineConfigError, match="CUDA out of memory"):
        plan_memory(cfg)
    # Four-way tensor parallelism fits.
    tp4 = build_config("meta-llama/Llama-3.1-70B-Instruct", sim_gpu="h100-sxm",
                       tensor_parallel_size=4)
    assert plan_memory(tp4).kv_tokens > 100_000


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"gpu_memory_utilization": 1.2},
     "gpu_memory_utilization: Input should be less than or equal to 1"),
    ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization: Input should be greater than 0"),
    ({"tensor_parallel_size": 3}, "must be divisible by tensor parallel size (3)"),
    ({"max_model_len": 10**6}, "is greater than the derived max_model_len"),
    ({"block_size": 20}, "Invalid block size 20"),
    ({"speculative_config": "{not json"}, "--speculative-config must be JSON"),
    ({"kv_cache_dtype": "int3"}, "Unknown kv cache dtype"),
])
def test_invalid_arguments_are_refused_with_a_reason(kwargs: dict[str, object],
                                                     fragment: str) -> None:
    with pytest.raises(EngineConfigError) as info:
        build_config(QWEN7B, **kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_unknown_gpu_and_model_list_the_valid_names() -> None:
    with pytest.raises(UnknownCatalogEntry, match="rtx4090"):
        build_config(QWEN7B, sim_gpu="tpu-v5")
    with pytest.raises(UnknownCatalogEntry, match=r"Qwen/Qwen2\.5-7B-Instruct"):
        build_config("gpt-2")


def test_more_memory_utilization_gives_more_kv_tokens() -> None:
    sizes = [plan_memory(build_config(QWEN7B, sim_gpu="rtx4090", gpu_memory_utilization=u))
             .kv_tokens for u in (0.80, 0.85, 0.90, 0.95)]
    assert sizes == sorted(sizes) and len(set(sizes)) == 4


def test_fp8_kv_cache_holds_about_twice_the_tokens() -> None:
    base = plan_memory(build_config(QWEN7B, sim_gpu="h100-sxm")).kv_tokens
    fp8 = plan_memory(build_config(QWEN7B, sim_gpu="h100-sxm", kv_cache_dtype="fp8")).kv_tokens
    assert 1.95 < fp8 / base < 2.05


def test_weight_quantization_frees_memory_for_kv() -> None:
    base = plan_memory(build_config(QWEN7B, sim_gpu="rtx4090")).kv_tokens
    fp8 = plan_memory(build_config(QWEN7B, sim_gpu="rtx4090", quantization="fp8")).kv_tokens
    awq = plan_memory(build_config(QWEN7B, sim_gpu="rtx4090", quantization="awq")).kv_tokens
    assert base < fp8 < awq


def test_larger_batch_budget_reserves_more_activation_memory() -> None:
    small = plan_memory(build_config(QWEN7B, sim_gpu="h100-sxm", max_num_batched_tokens=2048))
    large = plan_memory(build_config(QWEN7B, sim_gpu="h100-sxm", max_num_batched_tokens=16384))
    assert large.activation_peak > small.activation_peak
    assert large.kv_tokens < small.kv_tokens


def test_utilization_near_one_leaves_no_room_for_a_large_batch() -> None:
    assert runtime_oom_tokens(build_config(QWEN7B, sim_gpu="rtx4090")) is None
    risky = build_config(QWEN7B, sim_gpu="rtx4090", gpu_memory_utilization=0.97,
                         max_num_batched_tokens=8192)
    limit = runtime_oom_tokens(risky)
    assert limit is not None and 0 < limit < 8192


def test_startup_log_carries_vllms_kv_lines() -> None:
    cfg = build_config(QWEN7B, sim_gpu="rtx4090")
    plan = plan_memory(cfg)
    lines = "\n".join(startup_log_lines(cfg, plan))
    kv = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", lines).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert kv == plan.kv_tokens and 10_000 <= kv < 100_000
    concurrency = float(re.search(  # type: ignore[union-attr]
        r"Maximum concurrency for 32,768 tokens per request: ([\d.]+)x", lines).group(1))
    assert concurrency == pytest.approx(kv / 32768, abs=0.01)
