"""Conversations (``multi_turn``): sampled as sessions, sent turn after turn, accounted.

The sampler's sessions; then the simulated engine as a real server, driven by ``slotune
bench --dataset-name multi_turn``: every turn re-sends the conversation (the server's
own prompt counts say so), waits for the previous answer and the think time, and the
in-session cache hits are confirmed by the server's counters — and vanish with prefix
caching off, where later turns' TTFT grows; then the same sessions in virtual time.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest
from test_sim_e2e import MODEL, sim

from slotune.workers.contracts import SLO, MultiTurnDataset, TrialResult, TrialSpec, Workload
from slotune.workers.loadgen.cli import main as bench_main
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.generate.datasets import DatasetError, sample_requests
from slotune.workers.loadgen.generate.sessions import Conversation, group_sessions
from slotune.workers.trial.virtual import run_virtual_trial

CONVERSATIONS = MultiTurnDataset(min_turns=3, max_turns=5, system_prompt_len=48,
                                 input_len=64, output_len=24, think_time_s=0.4,
                                 think_time="constant")


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


def _bench(url: str, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "result.json"
    code = bench_main([
        "--base-url", url, "--model", MODEL, "--dataset-name", "multi_turn",
        "--multi-turn-min-turns", "3", "--multi-turn-max-turns", "5",
        "--multi-turn-system-prompt-len", "48", "--multi-turn-input-len", "64",
        "--multi-turn-output-len", "24", "--multi-turn-think-time", "0.4",
        "--num-prompts", "40", "--request-rate", "3", "--num-warmups", "0",
        "--save-result", "--save-detailed", "--result-dir", str(tmp_path),
        "--result-filename", out.name, "--disable-tqdm", *extra])
    assert code == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_each_turn_resends_the_conversation_and_hits_the_cache_in_session(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with sim(tmp_path, "--enable-prefix-caching") as url:
        doc = _bench(url, tmp_path)
    printed = capsys.readouterr().out
    sessions = doc["slotune"]["sessions"]
    assert doc["completed"] == 40 and sessions["completed_sessions"] == sessions["sessions"]
    starts, inputs, outputs = doc["start_times"], doc["input_lens"], doc["output_lens"]
    ttfts = doc["ttfts"]
    specs = sample_requests(MultiTurnDataset.model_validate(doc["slotune"]["workload"]
                                                           ["dataset"]), 40, seed=0)
    for group in group_sessions(specs):
        for before, after in pairwise(group):
            # the server counted the whole conversation: the last prompt, its answer, the
            # new message — token for token
            assert inputs[after] == inputs[before] + outputs[before] + specs[after].prompt_len
            # sent once the answer came back (start + latency) and the user thought
            answered = starts[before] + doc["latencies"][before]
            assert starts[after] >= answered + specs[after].think_time_s * 0.95
    assert ttfts and sessions["per_turn"][0]["turn"] == 1
    # The server's own counter: the re-sent context was served from its cache (whole
    # 16-token blocks of it), and the system prompt's hits are counted apart.
    counters = doc["slotune"]["metrics_scrape"]["counters"]
    assert counters["vllm:prefix_cache_hits_total"] == sessions["prefix_cache_hit_tokens"]
    assert sessions["context_tokens"] > 0
    assert sessions["in_session_hit_rate"] >= 0.9
    assert sessions["other_hit_tokens"] > 0  # the shared 48-token system prompt
    assert "Sessions:" in printed and "re-sent context tokens hit in session" in printed


@pytest.mark.slow
def test_without_prefix_caching_later_turns_pay_for_the_whole_conversation(
        tmp_path: Path) -> None:
    with sim(tmp_path, "--no-enable-prefix-caching") as url:
        # long messages, so that prefilling a whole conversation shows above the noise
        doc = _bench(url, tmp_path, "--multi-turn-input-len", "1000")
    sessions = doc["slotune"]["sessions"]
    assert sessions["prefix_cache_hit_tokens"] == 0 and sessions["in_session_hit_rate"] == 0
    first, third = sessions["per_turn"][0], sessions["per_turn"][2]
    assert third["mean_prompt_tokens"] > 2.5 * first["mean_prompt_tokens"]
    assert third["median_ttft_ms"] > 1.5 * first["median_ttft_ms"]


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


def _sharegpt(folder: Path) -> Path:
    """Six conversations of 1–4 exchanges (ShareGPT's format), words the simulator counts."""
    convs = []
    for c in range(6):
        turns = []
        for t in range(1 + c % 4):
            turns += [{"from": "human", "value": " ".join(f"q{c}x{t}w{i}" for i in range(30))},
                      {"from": "gpt", "value": " ".join(["a"] * (10 + t))}]
        convs.append({"id": f"c{c}", "conversations": turns})
    path = folder / "talks.json"
    path.write_text(json.dumps(convs))
    return path


def test_real_conversations_are_sessions_of_their_human_turns(tmp_path: Path) -> None:
    dataset = MultiTurnDataset(path=str(_sharegpt(tmp_path)), min_turns=2, max_turns=3)
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


@pytest.mark.slow
def test_real_conversations_go_to_the_server_as_text_that_grows_turn_by_turn(
        tmp_path: Path) -> None:
    talks = _sharegpt(tmp_path)
    with sim(tmp_path, "--enable-prefix-caching") as url:
        doc = _bench(url, tmp_path, "--dataset-path", str(talks), "--num-prompts", "9",
                     "--multi-turn-system-prompt-len", "0")
    specs = sample_requests(MultiTurnDataset.model_validate(
        doc["slotune"]["workload"]["dataset"]), 9, seed=0)
    inputs, outputs = doc["input_lens"], doc["output_lens"]
    for group in group_sessions(specs):
        for before, after in pairwise(group):
            assert inputs[after] == inputs[before] + outputs[before] + specs[after].prompt_len
    assert doc["slotune"]["sessions"]["in_session_hit_rate"] >= 0.8


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
