"""Conversations (``multi_turn``) against the simulated engine as a real server, driven by
``slotune bench --dataset-name multi_turn``: every turn re-sends the conversation (the
server's own prompt counts say so), waits for the previous answer and the think time, and
the in-session cache hits are confirmed by the server's counters — and vanish with prefix
caching off, where later turns' TTFT grows. (The sampler and virtual time:
``tests/unit/workers/loadgen/test_sessions.py``.)
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from slotune.workers.contracts import MultiTurnDataset
from slotune.workers.loadgen.cli import main as bench_main
from slotune.workers.loadgen.generate.datasets import sample_requests
from slotune.workers.loadgen.generate.sessions import group_sessions
from tests.support.conversations import sharegpt_file
from tests.support.loadgen_procs import MODEL, sim


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


@pytest.mark.slow
def test_real_conversations_go_to_the_server_as_text_that_grows_turn_by_turn(
        tmp_path: Path) -> None:
    talks = sharegpt_file(tmp_path)
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
