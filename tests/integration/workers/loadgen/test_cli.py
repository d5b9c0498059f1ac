"""``slotune bench`` end to end against the known-timing stub: vLLM's result JSON, its presence
rules and file names, the request bodies, refused options, and the user-mistake paths."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from slotune.tuner.cli.main import main as slotune
from slotune.workers.loadgen.cli import main
from tests.support.loadgen_procs import free_port

# What vllm bench serve 0.32 writes for a generation run, always (the per-request arrays
# that need --save-detailed are DETAILED); test_bench_vs_vllm.py checks it against the tool.
VLLM_ALWAYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
}
DETAILED = {"input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts",
            "errors"}
DATE = r"\d{8}-\d{6}"


def _bench(argv: list[str]) -> int:
    return main(["--disable-tqdm", *argv])


def _only_file(folder: Path) -> tuple[Path, dict[str, Any]]:
    files = list(folder.iterdir())
    assert len(files) == 1, files
    return files[0], json.loads(files[0].read_text())


def _sent(stub_url: str, prefix: str) -> list[dict[str, Any]]:
    """The requests the stub received from one run (its x-request-id prefix)."""
    seen = httpx.get(stub_url + "/stub/requests").json()
    return [r for r in seen if (r["request_id"] or "").startswith(prefix)]


def test_default_result_follows_vllms_presence_rules_and_file_name(
        stub_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # no --model: the first of /v1/models ("stub"), as vLLM does
    code = _bench(["--base-url", stub_url, "--random-input-len", "16", "--random-output-len",
                   "8", "--num-prompts", "12", "--request-rate", "40", "--seed", "3",
                   "--save-result", "--result-dir", str(tmp_path)])
    assert code == 0
    path, doc = _only_file(tmp_path)
    assert re.fullmatch(rf"openai-40\.0qps-stub-{DATE}\.json", path.name), path.name
    assert path.name.endswith(f"-{doc['date']}.json")
    assert set(doc) >= VLLM_ALWAYS and not DETAILED & set(doc)
    assert doc["request_goodput"] is None  # no --goodput
    assert doc["label"] is None and doc["backend"] == doc["endpoint_type"] == "openai"
    assert doc["model_id"] == doc["tokenizer_id"] == "stub"
    assert len(doc["latencies"]) == len(doc["queue_times"]) == 12
    # the stub streams 8 chunks 100 ms + 7 × 20 ms after the request
    assert all(0.2 < lat < 0.5 for lat in doc["latencies"])
    for metric in ("ttft", "tpot", "itl"):  # vLLM's default --percentile-metrics
        assert {f"mean_{metric}_ms", f"median_{metric}_ms", f"std_{metric}_ms",
                f"p99_{metric}_ms"} <= set(doc)
    assert "mean_e2el_ms" not in doc and "p99_client_queue_time_ms" not in doc
    assert doc["slotune"]["gate"] is True and doc["slotune"]["client_bound"] is False
    assert doc["max_concurrent_requests"] >= 1 and doc["max_output_tokens_per_s"] >= 8
    out = capsys.readouterr().out
    assert "=========== Serving Benchmark Result ============" in out
    assert re.search(r"^Successful requests:\s{20,}12\s*$", out, re.M)
    assert re.search(r"^Request rate configured \(RPS\):\s+40\.00", out, re.M)
    assert "Request goodput" not in out  # vLLM prints it only with --goodput
    assert "SLO gate (no SLO targets): PASS" in out


def test_detailed_goodput_label_and_metadata(stub_url: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:  # through the slotune command
        slotune(["bench", "--base-url", stub_url, "--model", "m", "--dataset-name", "random",
                 "--random-input-len", "16", "--random-output-len", "8", "--num-prompts", "12",
                 "--request-rate", "20", "--max-concurrency", "4", "--seed", "3",
                 "--goodput", "ttft:300", "tpot:50", "--metric-percentiles", "50,99",
                 "--percentile-metrics", "ttft,tpot,itl,e2el,client_queue_time,"
                 "e2el_including_client_queue", "--label", "nightly",
                 "--metadata", "team=serving", "build=42", "--save-result", "--save-detailed",
                 "--result-dir", str(tmp_path), "--quiet"])
    assert exit_info.value.code == 0
    path, doc = _only_file(tmp_path)
    assert re.fullmatch(rf"nightly-20\.0qps-concurrency4-m-{DATE}\.json", path.name), path.name
    assert set(doc) >= VLLM_ALWAYS | DETAILED
    assert doc["label"] == "nightly" and doc["team"] == "serving" and doc["build"] == "42"
    keys = list(doc)  # metadata sits right after num_prompts, as vLLM writes it
    assert keys.index("team") == keys.index("num_prompts") + 1
    assert doc["request_goodput"] is not None and doc["request_goodput"] > 0
    assert doc["slotune"]["objective"] == doc["request_goodput"]
    assert set(doc["slotune"]["constraints"]) == {"ttft", "tpot"}
    assert doc["output_lens"] == [8] * 12 and doc["input_lens"] == [16] * 12
    assert doc["generated_texts"] == [" tok" * 8] * 12 and doc["errors"] == [""] * 12
    assert all(len(itl) == 7 for itl in doc["itls"])
    starts = doc["start_times"]
    assert starts == sorted(starts) and starts[0] >= 0.0
    for metric in ("e2el", "client_queue_time", "e2el_including_client_queue"):
        assert isinstance(doc[f"p50_{metric}_ms"], float)
    assert doc["p99_e2el_including_client_queue_ms"] >= doc["p99_e2el_ms"]
    out = capsys.readouterr().out
    assert re.search(r"^Request goodput \(req/s\):\s+\d", out, re.M)
    assert re.search(r"^Maximum request concurrency:\s+4\s*$", out, re.M)
    assert "-------------Client-side Queueing--------------" in out
    assert re.search(r"^P50 E2EL incl\. Client Queue \(ms\):\s+\d", out, re.M)


def test_request_bodies_are_vllms(stub_url: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-logged")
    prefix = f"t-{uuid.uuid4().hex[:6]}-"
    code = _bench(["--base-url", stub_url, "--model", "m", "--dataset-name", "prefix_repetition",
                   "--prefix-repetition-prefix-len", "4", "--prefix-repetition-suffix-len", "4",
                   "--output-len", "3", "--num-prompts", "3", "--temperature", "0",
                   "--top-k", "5", "--extra-body", '{"min_tokens": 2}', "--served-model-name",
                   "served", "--request-id-prefix", prefix, "--header", "X-Team=serving"])
    assert code == 0
    sent = _sent(stub_url, prefix)
    assert sorted(r["request_id"] for r in sent) == [f"{prefix}{i}" for i in range(3)]
    body = sent[0]["body"]
    assert body["model"] == "served" and body["max_tokens"] == 3
    assert body["temperature"] == 0 and body["top_k"] == 5 and body["min_tokens"] == 2
    assert body["repetition_penalty"] == 1.0 and body["stream_options"] == {"include_usage": True}
    assert "ignore_eos" not in body  # vLLM forces it for random only
    assert sent[0]["authorized"] is True and sent[0]["team"] == "serving"

    prefix = f"c-{uuid.uuid4().hex[:6]}-"
    code = _bench(["--base-url", stub_url, "--model", "m", "--backend", "openai-chat",
                   "--endpoint", "/v1/chat/completions", "--random-input-len", "4",
                   "--random-output-len", "2", "--num-prompts", "2", "--request-id-prefix",
                   prefix, "--save-result", "--result-dir", str(tmp_path)])
    assert code == 0
    chat = _sent(stub_url, prefix)[0]
    assert chat["path"] == "/v1/chat/completions"
    assert chat["body"]["max_completion_tokens"] == 2 and chat["body"]["ignore_eos"] is True
    assert "temperature" not in chat["body"] and "max_tokens" not in chat["body"]
    path, _ = _only_file(tmp_path)
    assert re.fullmatch(rf"openai-chat-infqps-m-{DATE}\.json", path.name), path.name
    assert "sk-test-not-logged" not in path.read_text()


# vLLM refuses only a finite --request-rate beside a ramp-up: "inf", its default, runs.
@pytest.mark.parametrize("rate", [[], ["--request-rate", "inf"]], ids=["no-rate", "rate-inf"])
def test_ramp_up_climbs_and_is_recorded(rate: list[str], stub_url: str, tmp_path: Path) -> None:
    code = _bench(["--base-url", stub_url, "--model", "m", "--random-input-len", "4",
                   "--random-output-len", "2", "--num-prompts", "40", "--ramp-up-strategy",
                   "linear", "--ramp-up-start-rps", "5", "--ramp-up-end-rps", "60", *rate,
                   "--save-result", "--save-detailed", "--result-dir", str(tmp_path)])
    assert code == 0
    path, doc = _only_file(tmp_path)
    assert re.fullmatch(rf"openai-ramp-up-linear-5qps-60qps-m-{DATE}\.json", path.name)
    assert doc["ramp_up_strategy"] == "linear" and doc["request_rate"] == "inf"
    assert (doc["ramp_up_start_rps"], doc["ramp_up_end_rps"]) == (5, 60)
    events = doc["rps_change_events"]
    assert [e["rps"] for e in events] == list(range(5, 61))
    gaps = [b - a for a, b in zip(doc["start_times"], doc["start_times"][1:], strict=False)]
    assert sum(gaps[:8]) / 8 > 3 * sum(gaps[-8:]) / 8  # 5 req/s at the start, 60 at the end


def test_append_result_adds_one_line_per_run(stub_url: str, tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    for label in ("a", "b"):
        assert _bench(["--base-url", stub_url, "--model", "m", "--random-input-len", "4",
                       "--random-output-len", "2", "--num-prompts", "2", "--label", label,
                       "--append-result", "--result-dir", str(tmp_path),
                       "--result-filename", out.name]) == 0
    lines = out.read_text().splitlines()
    assert [json.loads(line)["label"] for line in lines] == ["a", "b"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--profile"], "--profile is not supported: it drives vLLM's torch profiler"),
    (["--lora-modules", "a", "b"], "--lora-modules is not supported"),
    (["--plot-timeline"], "--plot-timeline is not supported"),
    (["--probe-request-rate", "2"], "--probe-request-rate is not supported"),
    (["--self-timed"], "--self-timed: --dataset-name random has no timestamps to keep"),
    (["--dataset-name", "timed_trace"], "--dataset-name timed_trace needs --dataset-path"),
    (["--timed-trace-chunk-hash-size", "16"], "use --dataset-name timed_trace"),
    (["--prefix-repetition-zipf-s", "1.2"], "use --dataset-name prefix_repetition"),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-zipf-s", "0"],
     "zipf_s: Input should be greater than 0"),
    (["--hf-split", "train"], "--hf-split is not supported"),
    (["--backend", "openai-audio"], "--backend openai-audio is not supported"),
    (["--dataset-name", "hf"], "--dataset-name hf is not supported"),
    (["--dataset-name", "sonnet"], "vLLM 0.32 dropped it"),
    (["--dataset-name", "sharegpt"], "needs --dataset-path FILE"),
    (["--dataset-path", "x.json"], "--dataset-path is not used by --dataset-name random"),
    (["--metadata", "completed=3"], "--metadata completed: the result already has a field"),
    (["--metadata", "slotune=1"], "--metadata slotune"),
    (["--metadata", "novalue"], "expected KEY=VALUE"),
    (["--header", "novalue"], "--header 'novalue': expected KEY=VALUE"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"],
     "both --ramp-up-start-rps and --ramp-up-end-rps must be specified"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "5",
      "--request-rate", "3"], "do not specify --request-rate"),
    (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "9",
      "--ramp-up-end-rps", "5"], "start_rps (9) must be <= end_rps (5)"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "5"],
     "start_rps must be >= 1"),
    (["--ramp-up-end-rps", "5"], "need --ramp-up-strategy"),
    (["--random-range-ratio", '{"input": 0.1, "output": 0.5}'], "separate input and output"),
    (["--extra-body", "[1]"], "expected a JSON object"),
    (["--endpoint", "/v1/chat/completions"], "does not fit --backend openai"),
    (["--slo", "latency:3"], "unknown SLO metric 'latency'"),
    (["--workload", "nope"], "unknown workload 'nope'"),
    (["--random-range-ratio", "2"], "range_ratio"),
    (["--prefix-repetition-prefix-len", "5"], "use --dataset-name prefix_repetition"),
    (["--sharegpt-output-len", "5"], "use --dataset-name sharegpt"),
    (["--percentile-metrics", "ttft,foo"], "unknown foo"),
    (["--time-scale", "0"], "--time-scale must be a positive number"),
    (["--request-rate", "fast"], "not a number or 'inf'"),
    (["--num-prompts", "0"], "num_prompts"),
])
def test_user_mistakes_and_refused_options_exit_2_without_traceback(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--base-url", "http://127.0.0.1:1", "--model", "m", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and "Traceback" not in err


def test_tokenizer_options_are_accepted_with_a_note(stub_url: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = _bench(["--base-url", stub_url, "--model", "m", "--tokenizer", "org/tok",
                   "--trust-remote-code", "--probe-request-rate", "0", "--num-prompts", "1",
                   "--random-input-len", "2", "--random-output-len", "1"])
    err = capsys.readouterr().err
    assert code == 0
    assert "--tokenizer org/tok is recorded as tokenizer_id" in err
    assert "--trust-remote-code has no effect" in err


def test_bench_with_builtin_workload_and_overrides(stub_url: str, tmp_path: Path) -> None:
    out = tmp_path / "lab.json"
    code = _bench(["--base-url", stub_url, "--model", "m", "--workload", "lab",
                   "--num-prompts", "5", "--num-warmups", "0", "--random-output-len", "4",
                   "--request-rate", "inf", "--slo", "ttft:50", "--early-abort",
                   "--backend", "openai-chat", "--time-scale", "2", "--save-result",
                   "--result-dir", str(tmp_path), "--result-filename", out.name])
    assert code == 0
    doc = json.loads(out.read_text())
    ours = doc["slotune"]
    assert ours["workload"]["name"] == "lab" and doc["request_rate"] == "inf"
    assert doc["backend"] == "openai-chat" and ours["time_scale"] == 2.0
    assert ours["objective"] == 0.0 and ours["gate"] is False


def test_bad_workload_file_names_file_and_field(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_text("arrivals:\n  burstiness: -1\n")
    assert main(["--model", "m", "--workload", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "w.yaml: arrivals.burstiness" in err


def test_server_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    code = _bench(["--base-url", f"http://127.0.0.1:{free_port()}", "--model", "m"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot reach the server" in err and "Traceback" not in err
    code = _bench(["--base-url", f"http://127.0.0.1:{free_port()}"])  # no --model to ask for
    assert code == 1 and "cannot reach the server" in capsys.readouterr().err


def test_ready_check_waits_for_a_first_success_then_gives_up(
        stub_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _bench(["--base-url", stub_url, "--model", "broken", "--num-prompts", "2",
                   "--ready-check-timeout-sec", "2"])
    err = capsys.readouterr().err
    assert code == 1 and "was not ready within 2 s" in err and "HTTP 500" in err


def test_every_request_failed_exits_1(stub_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _bench(["--base-url", stub_url, "--model", "broken", "--num-prompts", "2"])
    assert code == 1 and "every request failed" in capsys.readouterr().err


TIMED_ROWS = [  # 16-token blocks (vLLM's default chunk), timestamps in seconds
    {"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [1, 2]},
    {"timestamp": 0.3, "input_length": 18, "output_length": 2, "hash_ids": [1, 3]},
    {"timestamp": 0.6, "input_length": 16, "output_length": 2, "hash_ids": [1]},
]


def _timed_trace(folder: Path) -> Path:
    path = folder / "timed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in TIMED_ROWS))
    return path


def test_timed_trace_is_read_as_vllm_reads_it(stub_url: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"tt-{uuid.uuid4().hex[:6]}-"
    out = tmp_path / "r.json"
    code = _bench(["--base-url", stub_url, "--model", "m", "--dataset-name", "timed_trace",
                   "--dataset-path", str(_timed_trace(tmp_path)), "--request-rate", "100",
                   "--request-id-prefix", prefix, "--save-result", "--save-detailed",
                   "--result-dir", str(tmp_path), "--result-filename", out.name])
    assert code == 0
    assert "--request-rate 100 is ignored under --self-timed" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["slotune"]["workload"]["dataset"]["block_size"] == 16
    starts = sorted(doc["start_times"])
    assert list(np.diff(starts)) == pytest.approx(
        [0.3, 0.3], abs=0.08)  # the trace's own seconds, not 100 req/s
    sent = sorted(_sent(stub_url, prefix), key=lambda r: r["request_id"])
    words = [r["body"]["prompt"].split() for r in sent]
    assert [len(w) for w in words] == [20, 18, 16]
    assert words[0][:16] == words[1][:16] == words[2]  # hash id 1: one block, shared
    assert words[0][16:18] != words[1][16:]  # ids 2 and 3: blocks of their own
    assert all(r["body"]["ignore_eos"] is True for r in sent)  # the trace's output lengths


def test_mooncake_trace_is_rescaled_to_the_request_rate(stub_url: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code = _bench(["--base-url", stub_url, "--model", "m", "--dataset-name", "mooncake_trace",
                   "--dataset-path", str(_timed_trace(tmp_path)),
                   "--timed-trace-chunk-hash-size", "16", "--timed-trace-sec-multiplier", "1",
                   "--request-rate", "20", "--save-result", "--save-detailed",
                   "--result-dir", str(tmp_path), "--result-filename", out.name])
    assert code == 0
    starts = sorted(json.loads(out.read_text())["start_times"])
    assert starts[-1] - starts[0] == pytest.approx(2 / 20, abs=0.05)  # 0.6 s squeezed


def test_a_trace_read_with_the_wrong_block_size_says_so(stub_url: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    code = main(["--base-url", stub_url, "--model", "m",
                 "--dataset-name", "mooncake_trace", "--dataset-path",
                 str(_timed_trace(tmp_path)), "--timed-trace-chunk-hash-size", "8"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "timed.jsonl: line 1: field 'input_length' takes 3 block(s) of 8 tokens" in err
    assert "Is block_size (--timed-trace-chunk-hash-size) the trace's own?" in err


def test_prefix_repetition_zipf_flag(stub_url: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code = _bench(["--base-url", stub_url, "--model", "m", "--dataset-name",
                   "prefix_repetition", "--prefix-repetition-num-prefixes", "3",
                   "--prefix-repetition-prefix-len", "4", "--prefix-repetition-suffix-len", "2",
                   "--prefix-repetition-output-len", "2", "--prefix-repetition-zipf-s", "1.5",
                   "--num-prompts", "6", "--save-result", "--result-dir", str(tmp_path),
                   "--result-filename", out.name])
    assert code == 0
    dataset = json.loads(out.read_text())["slotune"]["workload"]["dataset"]
    assert (dataset["popularity"], dataset["zipf_s"]) == ("zipf", 1.5)
