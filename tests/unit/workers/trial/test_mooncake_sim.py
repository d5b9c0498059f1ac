"""A Mooncake trace on the simulated engine: its shared blocks are prefix-cache hits, and
capacity probes replay it at their own rates with fresh blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slotune.workers.contracts import SLO, CapacitySearch, MooncakeTraceDataset, TrialSpec, Workload
from slotune.workers.loadgen.generate.arrivals import arrival_offsets
from slotune.workers.loadgen.generate.datasets import sample_requests
from slotune.workers.loadgen.generate.workload_files import load_workload
from slotune.workers.trial.capacity import probe_workload
from slotune.workers.trial.virtual import engine_config, measure, run_virtual_trial

MODEL = "Qwen/Qwen2.5-7B-Instruct"
HITS = "vllm:prefix_cache_hits_total"


def _sample(n: int, rate: float, path: str | None = None) -> Workload:
    workload, _ = load_workload("mooncake-sample")
    data = workload.model_dump()
    data["arrivals"]["request_rate"] = rate
    data.update(num_prompts=n, warmup_requests=0)
    if path is not None:
        data["dataset"]["path"] = path
    return Workload.model_validate(data)


def _spec(workload: Workload, **kw: Any) -> TrialSpec:
    return TrialSpec.model_validate(dict(
        run_id="mc", engine="sim", model=MODEL, knobs={}, workload=workload,
        engine_args={"max_model_len": 4096}, slo=SLO(ttft=2000, tpot=100), gpu="h100", **kw))


def _rows(workload: Workload) -> list[dict[str, Any]]:
    assert isinstance(workload.dataset, MooncakeTraceDataset)
    lines = Path(workload.dataset.path).read_text().splitlines()
    return [json.loads(line) for line in lines[:workload.num_prompts]]


def _reusable_tokens(rows: list[dict[str, Any]], block: int) -> int:
    """Tokens a block-aligned prefix cache that forgets nothing serves: per request, its
    longest run of leading blocks that an earlier request computed in full (a block
    hashes its whole prefix, so the run must be a prefix of the earlier one's)."""
    computed: set[tuple[int, ...]] = set()
    total = 0
    for row in rows:
        ids = row["hash_ids"]
        run = max((k for k in range(len(ids)) if tuple(ids[:k]) in computed), default=0)
        total += run * block
        full = row["input_length"] // block
        computed.update(tuple(ids[:k]) for k in range(1, full + 1))
    return total


def test_the_engine_hits_its_prefix_cache_where_the_trace_shares_blocks(
        tmp_path: Path) -> None:
    workload = _sample(60, rate=1.0)  # slow enough that each request is computed in time
    rows = _rows(workload)
    expected = _reusable_tokens(rows, 512)
    assert expected >= 5_000  # the sample reuses a lot: a test worth running
    spec = _spec(workload)
    run = measure(spec, engine_config(spec), workload)
    hits = run.run.scrape.counters[HITS]
    assert hits >= expected  # the sim's 16-token blocks divide Mooncake's 512
    assert hits <= sum(r["input_length"] for r in rows)
    # the same lengths with no id shared: nothing to hit, so the hits above are the trace's
    unique = tmp_path / "unique.jsonl"
    unique.write_text("".join(json.dumps({**r, "hash_ids": [1000 * i + j for j in range(
        len(r["hash_ids"]))]}) + "\n" for i, r in enumerate(rows)))
    alone = _sample(60, rate=1.0, path=str(unique))
    assert measure(spec, engine_config(spec), alone).run.scrape.counters[HITS] == 0


def test_each_capacity_probe_replays_the_trace_at_its_rate_with_fresh_blocks() -> None:
    spec = _spec(_sample(40, rate=2.0), mode="capacity",
                 capacity=CapacitySearch(min_rate=1.0, max_rate=16.0, prompts_per_probe=40,
                                         extensions=0))
    probes = [probe_workload(spec, rate, i) for i, rate in enumerate((2.0, 8.0))]
    firsts = []
    for probe in probes:
        reqs = sample_requests(probe.dataset, probe.num_prompts, probe.seed,
                               token_seed=probe.token_seed)
        offsets = arrival_offsets(len(reqs), probe.arrivals, probe.seed,
                                  [r.arrival_offset_s for r in reqs])
        assert (len(offsets) - 1) / offsets[-1] == pytest.approx(probe.arrivals.request_rate)
        firsts.append(reqs[0].word_ids[:512])
    # the same trace requests at every rate, each probe with tokens of its own: no probe
    # is served from an earlier probe's blocks
    assert probes[0].seed == probes[1].seed and firsts[0] != firsts[1]
    result = run_virtual_trial(spec)
    assert result.status == "ok" and result.capacity and result.capacity > 2.0
    rates = [p.request_rate for p in result.capacity_probes]
    assert len(set(rates)) == len(rates) >= 2
    # every probe sees the trace's own reuse (its requests sent at its rate; an earlier
    # probe's tokens were other ones, above)
    for p in result.capacity_probes:
        sent = spec.workload.model_copy(update={"num_prompts": p.num_requests})
        rows = _rows(sent)
        assert _reusable_tokens(rows, 512) <= (p.prefix_cache_hit_tokens or 0) \
            < sum(r["input_length"] for r in rows)
