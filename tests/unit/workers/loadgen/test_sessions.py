"""Conversations (``multi_turn``): sampled as sessions, sent turn after turn, accounted.

The sampler's sessions, then the same sessions in virtual time. (Against the simulated
engine as a real server: ``tests/e2e/workers/loadgen/test_sessions_on_sim.py``.)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from slotune.workers.contracts import SLO, MultiTurnDataset, TrialResult, TrialSpec, Workload
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.generate.datasets import DatasetError, sample_requests
from slotune.workers.loadgen.generate.sessions import Conversation, group_sessions
from slotune.workers.trial.virtual import run_virtual_trial
from tests.support.conversations import CONVERSATIONS, sharegpt_file
from tests.support.loadgen_procs import MODEL


def test_sessions_are_sampled_whole_with_a_shared_system_prompt() -> None:
    specs = sample_requests(CONVERSATIONS, 50, seed=7)
    assert len(specs) == 50 and specs == sample_requests(CONVERSATIONS, 50, seed=7)
    groups = group_sessions(specs)
    assert [specs[g[0]].session for g in groups] == list(range(len(groups)))
    for group in groups[:-1]:  # the last session is cut to make 50 requests
        assert 3 <= len(group) <= 5
    for group in groups:
        assert [specs[i].turn for i in group] == list(range(1, len(group) + 1))
        first, *later = (specs[i] for i in group)
        assert first.word_ids[:48] == specs[0].word_ids[:48]  # the system prompt, shared
        assert first.prompt_len == 48 + 64 and first.think_time_s == 0.0
        assert all(t.prompt_len == 64 and t.think_time_s == 0.4 for t in later)
    assert len({specs[g[0]].word_ids[48:] for g in groups}) == len(groups)  # own messages
    warmup = sample_requests(CONVERSATIONS, 4, seed=7, warmup=True)
    assert all(w.session is None for w in warmup)  # warm-up requests stand alone


def test_turn_counts_follow_the_bounds() -> None:
    wide = CONVERSATIONS.model_copy(update={"min_turns": 1, "max_turns": 8})
    lengths = Counter(len(g) for g in group_sessions(sample_requests(wide, 4000, seed=1))[:-1])
    assert set(lengths) == set(range(1, 9))  # uniform over 1..8, each seen
    assert max(lengths.values()) < 2 * min(lengths.values())


def test_bad_turn_bounds_are_refused_with_both_values() -> None:
    with pytest.raises(ValueError, match=r"min_turns \(6\) must be <= max_turns \(2\)"):
        MultiTurnDataset(min_turns=6, max_turns=2)


def _virtual(caching: bool, dataset: MultiTurnDataset = CONVERSATIONS,
             max_model_len: int = 4096) -> TrialResult:
    workload = Workload(name="chat", dataset=dataset, num_prompts=120,
                        arrivals={"request_rate": 6})
    spec = TrialSpec.model_validate({
        "run_id": "mt", "engine": "sim", "model": MODEL, "gpu": "rtx4090",
        "knobs": {"enable_prefix_caching": caching},
        "engine_args": {"max_model_len": max_model_len}, "workload": workload,
        "slo": SLO.parse("ttft:300,tpot:50")})
    return run_virtual_trial(spec)


def test_in_virtual_time_the_cache_decides_what_later_turns_cost() -> None:
    cached, uncached = (_virtual(caching).metrics["slotune"]["sessions"]
                        for caching in (True, False))
    assert cached["in_session_hit_rate"] >= 0.9 and uncached["in_session_hit_rate"] == 0
    assert [t["requests"] for t in cached["per_turn"]] == \
        [t["requests"] for t in uncached["per_turn"]]  # the same sessions
    last = len(cached["per_turn"]) - 1
    assert uncached["per_turn"][last]["mean_ttft_ms"] > cached["per_turn"][last]["mean_ttft_ms"]
    assert uncached["per_turn"][last]["mean_prompt_tokens"] == \
        cached["per_turn"][last]["mean_prompt_tokens"]


def test_a_conversation_that_outgrows_the_context_ends_with_a_400() -> None:
    # The third turn re-sends 48 + 3·300 + 2·100 = 1,148 tokens: past a 1,024 context.
    long = CONVERSATIONS.model_copy(update={"input_len": 300, "output_len": 100,
                                            "min_turns": 5, "max_turns": 5})
    result = _virtual(True, long, max_model_len=1024)
    assert (result.status, result.failure) == ("failed", "benchmark_errors")
    assert "HTTP 400: This model's maximum context length is 1024 tokens. However, your " \
           "request has 1148 input tokens" in (result.failure_message or "")


def test_a_capacity_probe_of_conversations_outlasts_its_sessions() -> None:
    # Closed loop: a probe of a few sessions at a high rate would be mostly first turns.
    # The probe keeps sessions arriving for several lifetimes, so the server spends most
    # of the run in the steady state of the rate it is credited with.
    workload = Workload(name="chat", dataset=CONVERSATIONS, num_prompts=30,
                        arrivals={"request_rate": 8})
    spec = TrialSpec.model_validate({
        "run_id": "mt", "engine": "sim", "model": MODEL, "gpu": "rtx4090",
        "engine_args": {"max_model_len": 4096}, "workload": workload, "mode": "capacity",
        "capacity": {"prompts_per_probe": 30, "max_probes": 2, "min_rate": 4,
                     "max_rate": 8},
        "slo": SLO.parse("ttft:300,tpot:50")})
    result = run_virtual_trial(spec)
    assert result.status == "ok" and result.capacity_probes
    sessions = result.metrics["slotune"]["sessions"]
    assert result.metrics["duration"] >= 3 * sessions["mean_session_latency_s"]
    assert result.metrics["completed"] > 30  # more than the probe's own prompt count
    assert all(p.in_session_hit_tokens for p in result.capacity_probes)


def test_real_conversations_are_sessions_of_their_human_turns(tmp_path: Path) -> None:
    dataset = MultiTurnDataset(path=str(sharegpt_file(tmp_path)), min_turns=2, max_turns=3)
    specs = sample_requests(dataset, 12, seed=3)
    groups = group_sessions(specs)
    for group in groups[:-1]:
        assert 2 <= len(group) <= 3  # one-exchange conversations skipped, four cut to three
        conv = specs[group[0]].prompt.split()[0].split("x")[0]
        assert all(specs[i].prompt.startswith(f"{conv}x{t}w0") for t, i in enumerate(group))
        assert [specs[i].output_len for i in group] == [10 + t for t in range(len(group))]
    warm = sample_requests(dataset, 2, seed=3, warmup=True)
    assert {w.prompt for w in warm}.isdisjoint(specs[g[0]].prompt for g in groups[:2])
    with pytest.raises(DatasetError, match="no conversation with at least 5 human turns"):
        sample_requests(dataset.model_copy(update={"min_turns": 5, "max_turns": 5}), 4, 0)


def _answer(text: str, ids: tuple[int, ...] | None, prompt_len: int) -> RequestRecord:
    return RequestRecord(0, prompt_len, 2, RequestTimings(0, 0, 0, (0.1,), 0.2),
                         output_tokens=2, text=text, output_ids=ids)


def test_a_conversation_goes_on_as_text_when_the_server_stops_returning_ids() -> None:
    talk = Conversation()
    first = talk.prompt([1, 2, 3], chat=False)
    talk.answered(first, "hello there friend", _answer(" hi you", (7, 8), 3))
    assert talk.prompt([4, 5], chat=False) == [1, 2, 3, 7, 8, 4, 5]  # the answer's own ids
    assert talk.context_tokens == 5
    talk.answered([1, 2, 3, 7, 8, 4, 5], "and then", _answer(" so", None, 7))
    # no ids came back: the whole conversation, as text, from here on
    assert talk.prompt("what next", chat=False) == \
        "hello there friend hi you and then so what next"
    assert [m["role"] for m in talk.messages] == ["user", "assistant"] * 2
