"""Each knob moves its wall the way it does in vLLM, on the virtual-time core.

Loads are realistic and seeded: Qwen2.5-7B on one RTX 4090 with the seed's 512-in /
128-out shape unless a knob needs another (long prompts, shared prefixes).
"""

from __future__ import annotations

import dataclasses
import json
import tracemalloc
from pathlib import Path

import pytest

from slotune.workers.sim import tokenizer
from slotune.workers.sim.config import build_config
from slotune.workers.sim.core import BlockPool, EngineCore, RequestRejected
from slotune.workers.sim.virtual_time import SimRequestSpec, simulate
from tests.support.sim_loads import itls, pct, poisson_load, throughput, tpots, ttfts

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"
INF = float("inf")


def test_all_requests_complete_with_their_requested_lengths() -> None:
    load = poisson_load(300, 10.0, 512, 128, seed=3)
    result = simulate(build_config(QWEN7B, sim_gpu="rtx4090", quantization="fp8"), load)
    assert len(result.requests) == 300
    for timing in result.requests:
        assert timing.output_tokens == 128
        assert timing.finish_reason == "length"
        assert len(timing.token_times) == 128
        assert timing.arrival_time <= timing.first_scheduled_time <= timing.first_token_time  # type: ignore[operator]
        assert list(timing.token_times) == sorted(timing.token_times)


def test_max_num_seqs_trades_tpot_for_throughput_until_kv_binds() -> None:
    load = poisson_load(600, INF, 512, 128, seed=1)
    results = {
        seqs: simulate(build_config(QWEN7B, sim_gpu="rtx4090", max_num_seqs=seqs), load)
        for seqs in (8, 32, 128, 256)
    }
    thr = [throughput(results[s]) for s in (8, 32, 128)]
    tpot = [pct(tpots(results[s]), 50) for s in (8, 32, 128)]
    assert thr[0] < thr[1] < thr[2]
    assert tpot[0] < tpot[1] < tpot[2]
    # Below the KV wall there is no preemption; past it (256 seqs × 640 tokens > ~99k KV
    # tokens) the cache binds and preemptions show up in the counters and the gauge hits 1.
    assert results[128].stats.num_preemptions == 0
    assert results[256].stats.num_preemptions > 0
    assert max(results[256].series.kv_cache_usage_perc) > 0.97
    assert any(t.num_preemptions for t in results[256].requests)


def test_smaller_batch_budget_lowers_itl_tail_but_raises_ttft_under_long_prompts() -> None:
    load = poisson_load(120, 3.0, 4096, 256, seed=2)
    model = "meta-llama/Llama-3.1-8B-Instruct"
    small = simulate(build_config(model, sim_gpu="h100-sxm", max_num_batched_tokens=512,
                                      max_num_seqs=256), load)
    large = simulate(build_config(model, sim_gpu="h100-sxm", max_num_batched_tokens=8192,
                                      max_num_seqs=256), load)
    assert pct(itls(small), 99) < 0.7 * pct(itls(large), 99)
    assert pct(ttfts(small), 50) > pct(ttfts(large), 50)


def test_prefix_caching_cuts_ttft_on_a_shared_prefix_and_counts_hits() -> None:
    shared = list(range(1000, 1000 + 1536))
    load = poisson_load(200, 4.0, 1536 + 128, 64, seed=4, prefix=shared)
    on = simulate(build_config(QWEN7B, sim_gpu="rtx4090"), load)
    off = simulate(build_config(QWEN7B, sim_gpu="rtx4090", enable_prefix_caching=False), load)
    assert pct(ttfts(on), 50) < 0.5 * pct(ttfts(off), 50)
    assert on.stats.prefix_cache_hits > 0.8 * 199 * 1536
    assert on.stats.prefix_cache_queries >= on.stats.prefix_cache_hits
    assert off.stats.prefix_cache_hits == 0 and off.stats.prefix_cache_queries == 0
    assert min(t.num_cached_tokens for t in on.requests[1:]) >= 1536


def test_unique_prompts_get_no_prefix_hits() -> None:
    result = simulate(build_config(QWEN7B, sim_gpu="rtx4090"), poisson_load(50, 2.0, 512, 16))
    assert result.stats.prefix_cache_hits == 0
    assert result.stats.prefix_cache_queries > 0


def test_tensor_parallelism_speeds_up_decode() -> None:
    load = poisson_load(20, 0.5, 512, 128, seed=5)
    model = "Qwen/Qwen2.5-32B-Instruct"
    # 65 GB of weights leave one H100 too little KV for 32k tokens: cap the length.
    tp1 = simulate(build_config(model, sim_gpu="h100-sxm", max_model_len=8192), load)
    tp2 = simulate(build_config(model, sim_gpu="h100-sxm", max_model_len=8192,
                                tensor_parallel_size=2), load)
    assert pct(tpots(tp2), 50) < 0.8 * pct(tpots(tp1), 50)


@pytest.mark.parametrize("quantization", ["fp8", "awq"])
def test_weight_quantization_speeds_up_decode(quantization: str) -> None:
    load = poisson_load(20, 0.5, 512, 128, seed=6)
    base = simulate(build_config(QWEN7B, sim_gpu="rtx4090"), load)
    quant = simulate(build_config(QWEN7B, sim_gpu="rtx4090", quantization=quantization), load)
    assert pct(tpots(quant), 50) < 0.8 * pct(tpots(base), 50)


def test_speculative_decoding_yields_more_tokens_per_step() -> None:
    load = poisson_load(20, 0.5, 512, 128, seed=7)
    base = simulate(build_config(QWEN7B, sim_gpu="h100-sxm"), load)
    spec = simulate(build_config(
        QWEN7B, sim_gpu="h100-sxm", sim_acceptance_rate=0.8,
        speculative_config='{"method": "ngram", "num_speculative_tokens": 4}'), load)
    assert pct(tpots(spec), 50) < 0.7 * pct(tpots(base), 50)
    assert spec.num_steps < base.num_steps
    assert all(t.output_tokens == 128 for t in spec.requests)
    # With nothing accepted, speculation only adds verification work.
    useless = simulate(build_config(
        QWEN7B, sim_gpu="h100-sxm", sim_acceptance_rate=0.0,
        speculative_config='{"method": "ngram", "num_speculative_tokens": 4}'), load)
    assert pct(tpots(useless), 50) >= pct(tpots(base), 50)


def test_fp8_kv_cache_relieves_a_kv_bound_load() -> None:
    load = poisson_load(400, INF, 512, 512, seed=8)
    base = simulate(build_config(QWEN7B, sim_gpu="rtx4090"), load)
    fp8 = simulate(build_config(QWEN7B, sim_gpu="rtx4090", kv_cache_dtype="fp8"), load)
    assert base.stats.num_preemptions > 0
    assert fp8.stats.num_preemptions < base.stats.num_preemptions


def test_eager_mode_is_slower_than_cuda_graphs() -> None:
    load = poisson_load(20, 0.5, 512, 128, seed=9)
    graphs = simulate(build_config(QWEN7B, sim_gpu="h100-sxm"), load)
    eager = simulate(build_config(QWEN7B, sim_gpu="h100-sxm", enforce_eager=True), load)
    assert pct(tpots(eager), 50) > pct(tpots(graphs), 50)


def test_zero_noise_same_seed_gives_identical_timings() -> None:
    load = poisson_load(200, 15.0, 512, 128, seed=10)
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", quantization="fp8")
    first, second = simulate(cfg, load), simulate(cfg, load)
    assert [r.token_times for r in first.requests] == [r.token_times for r in second.requests]


def test_noise_is_seeded() -> None:
    load = poisson_load(100, 10.0, 512, 64, seed=11)
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", quantization="fp8", sim_noise=0.05)
    again = simulate(cfg, load)
    assert [r.token_times for r in simulate(cfg, load).requests] == \
        [r.token_times for r in again.requests]
    other = simulate(dataclasses.replace(cfg, seed=1), load)
    assert [r.token_times for r in other.requests] != [r.token_times for r in again.requests]
    quiet = simulate(dataclasses.replace(cfg, noise=0.0), load)
    ratio = pct(tpots(again), 50) / pct(tpots(quiet), 50)
    assert 0.9 < ratio < 1.1


def test_max_model_len_is_enforced() -> None:
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", max_model_len=1024)
    with pytest.raises(RequestRejected, match="maximum context length is 1024 tokens"):
        simulate(cfg, [SimRequestSpec(0.0, list(range(1000)), 100)])
    with pytest.raises(RequestRejected, match="your request has 2000 input tokens"):
        EngineCore(cfg).add_request("r", list(range(2000)), 10, 0.0)
    ok = simulate(cfg, [SimRequestSpec(0.0, list(range(1000)), 24)])
    assert ok.requests[0].output_tokens == 24


def test_without_ignore_eos_the_model_stops_on_its_own_within_limits() -> None:
    specs = [SimRequestSpec(0.1 * i, list(range(i, i + 64)), 400, ignore_eos=False,
                            min_tokens=8) for i in range(60)]
    result = simulate(build_config(QWEN7B, sim_gpu="h100-sxm"), specs)
    lengths = [r.output_tokens for r in result.requests]
    assert all(8 <= n <= 400 for n in lengths)
    assert len(set(lengths)) > 10
    assert {r.finish_reason for r in result.requests} <= {"stop", "length"}
    assert "stop" in {r.finish_reason for r in result.requests}


def test_chunked_prefill_off_runs_whole_prompts_in_one_step() -> None:
    load = poisson_load(30, 2.0, 3000, 32, seed=12)
    cfg = build_config("meta-llama/Llama-3.1-8B-Instruct", sim_gpu="h100-sxm",
                       enable_chunked_prefill=False, max_model_len=8192)
    result = simulate(cfg, load)
    assert max(result.series.batch_tokens) >= 3000
    assert all(r.output_tokens == 32 for r in result.requests)


def test_utilization_too_close_to_one_crashes_under_the_first_large_batch() -> None:
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", gpu_memory_utilization=0.97,
                       max_num_batched_tokens=8192)
    crashed = simulate(cfg, poisson_load(50, INF, 2048, 16, seed=13))
    assert crashed.crashed is not None and "CUDA out of memory" in crashed.crashed
    # Small batches stay under the limit, so the same engine serves a light load.
    fine = simulate(cfg, poisson_load(5, 0.5, 256, 16, seed=13))
    assert fine.crashed is None and len(fine.requests) == 5


def test_queue_grows_past_the_knee() -> None:
    below = simulate(build_config(QWEN7B, sim_gpu="rtx4090", quantization="fp8"),
                     poisson_load(400, 5.0, 512, 128, seed=14))
    above = simulate(build_config(QWEN7B, sim_gpu="rtx4090", quantization="fp8"),
                     poisson_load(400, 60.0, 512, 128, seed=14))
    assert max(below.series.num_requests_waiting) < 10
    assert max(above.series.num_requests_waiting) > 100
    assert pct(ttfts(above), 99) > 10 * pct(ttfts(below), 99)


@pytest.mark.parametrize(("label", "kwargs", "load"), [
    ("seed lab, KV-bound", {}, poisson_load(500, 25.0, 512, 128, seed=20)),
    ("preemption storm", {"max_num_seqs": 256}, poisson_load(300, INF, 512, 512, seed=21)),
    ("shared prefix", {"quantization": "fp8"},
     poisson_load(200, 8.0, 1024, 64, seed=22, prefix=list(range(768)))),
    ("long prompts, small budget", {"max_num_batched_tokens": 512, "max_num_seqs": 128},
     poisson_load(60, 2.0, 3000, 200, seed=23)),
    ("chunked prefill off", {"enable_chunked_prefill": False, "max_model_len": 4096},
     poisson_load(100, 6.0, 2000, 100, seed=24)),
    ("noisy", {"sim_noise": 0.1, "quantization": "fp8"}, poisson_load(200, 15.0, 512, 96)),
])
def test_lazy_decode_bookkeeping_matches_the_eager_mode_exactly(
        label: str, kwargs: dict[str, object], load: list[SimRequestSpec]) -> None:
    cfg = build_config(QWEN7B, sim_gpu="rtx4090", **kwargs)  # type: ignore[arg-type]
    lazy = simulate(cfg, load, lazy_decode=True)
    eager = simulate(cfg, load, lazy_decode=False)
    assert lazy.requests == eager.requests, label
    assert lazy.series == eager.series
    assert lazy.num_steps == eager.num_steps
    for field in ("num_preemptions", "prompt_tokens", "generation_tokens",
                  "prefix_cache_queries", "prefix_cache_hits", "requests_finished"):
        assert getattr(lazy.stats, field) == getattr(eager.stats, field), field
    assert lazy.stats.inter_token_latency.counts == eager.stats.inter_token_latency.counts
    assert lazy.stats.inter_token_latency.total == pytest.approx(
        eager.stats.inter_token_latency.total)


@pytest.mark.parametrize("lazy", [True, False])
def test_a_prompt_that_quotes_an_answer_reuses_the_answers_blocks(lazy: bool) -> None:
    """Multi-turn chat: generated blocks are cached under the ids of the words produced."""
    cfg = build_config(QWEN7B, sim_gpu="h100-sxm")
    first_prompt = list(range(5000, 5000 + 200))
    key = tokenizer.request_key(first_prompt)
    answer = " ".join(tokenizer.output_word(key, i) for i in range(96))
    second_prompt = first_prompt + tokenizer.encode(answer, cfg.model.vocab_size) + [7, 8, 9]
    result = simulate(cfg, [SimRequestSpec(0.0, first_prompt, 96),
                            SimRequestSpec(30.0, second_prompt, 8)], lazy_decode=lazy)
    second = next(r for r in result.requests if r.prompt_tokens == len(second_prompt))
    # Every full block of prompt + answer, i.e. (200 + 96) // 16 blocks, is a hit.
    assert second.num_cached_tokens == (200 + 96) // 16 * 16


def test_the_block_pool_hands_out_unused_blocks_first_then_the_least_recently_freed() -> None:
    # vLLM's free queue: every block in order, a freed block joins the tail (a request's
    # tail block first), and handing a freed block out again evicts its prefix hash.
    pool = BlockPool(5)
    assert (pool.num_free, pool.usage) == (5, 0.0)
    first = pool.take(3)
    assert first == [0, 1, 2] and pool.num_free == 2
    pool.register(0, 111)
    pool.register(1, 222)
    pool.release(first)
    assert pool.num_free == 5 and pool.usage == 0.0
    assert pool.take(2) == [3, 4]  # never used: ahead of every freed block
    pool.touch([1])  # a prefix hit takes a cached block off the free queue
    assert pool.cached == {111: 0, 222: 1}
    assert pool.take(2) == [2, 0]  # freed tail first: 2, (1 is in use), then 0
    assert pool.cached == {222: 1}  # block 0 went out again: its hash is gone
    assert pool.num_free == 0 and not pool.reset()  # in use: the cache stays
    pool.release([1, 2, 0, 3, 4])
    assert pool.reset() and pool.cached == {}


TINY_MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "intermediate_size": 16, "vocab_size": 512, "max_position_embeddings": 2048}
"""The tiny model of issue 38: 512 bytes of KV a block, 250 million blocks on an H200."""


def test_the_block_pool_takes_memory_for_the_blocks_it_used_not_the_blocks_it_has() -> None:
    """Issue 38: the pool kept two Python lists as long as its block count (4 GB for the
    tiny model on an H200). Its allocation follows the blocks handed out, whatever the
    pool's size, and the blocks come out in vLLM's order still."""
    tracemalloc.start()
    try:
        pool = BlockPool(5_000_000)
        first = pool.take(1000)
        for i, block in enumerate(first[:500]):
            pool.register(block, 10_000 + i)
        pool.release(first)
        pool.touch([first[10]])  # a prefix hit on a freed, cached block
        again = pool.take(2000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == list(range(1000))
    assert again == list(range(1000, 3000))  # the never used come first
    assert pool.num_free == 5_000_000 - 2001 and pool.cached[10_010] == 10
    assert peak < 1 << 20, f"{peak / 2**20:.0f} MiB for 3000 blocks handed out"


def test_an_engine_of_a_tiny_model_on_an_h200_allocates_no_memory_per_kv_block(
        tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_MODEL))
    config = build_config(str(tmp_path), sim_gpu="h200")
    tracemalloc.start()
    try:
        core = EngineCore(config)
        result = simulate(config, poisson_load(50, 10.0, 256, 32, seed=1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert core.plan.num_blocks > 200_000_000
    assert len(result.requests) == 50
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB"
