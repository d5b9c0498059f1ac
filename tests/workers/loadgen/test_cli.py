"""``slotune bench`` end to end against the known-timing stub, and its user-mistake paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loadgen_procs import free_port

from tuner.cli import main as slotune
from workers.loadgen.cli import main


def test_bench_writes_vllm_result_json(stub_url: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as exit_info:
        slotune(["bench", "--base-url", stub_url, "--model", "m", "--dataset-name", "random",
                 "--random-input-len", "16", "--random-output-len", "8", "--num-prompts", "12",
                 "--request-rate", "20", "--burstiness", "1", "--seed", "3",
                 "--goodput", "ttft:300", "tpot:50", "--metric-percentiles", "50,99",
                 "--save-result", "--result-filename", str(out), "--quiet"])
    assert exit_info.value.code == 0
    doc = json.loads(out.read_text())
    for field in ("date", "backend", "model_id", "num_prompts", "request_rate", "burstiness",
                  "max_concurrency", "duration", "completed", "total_input_tokens",
                  "total_output_tokens", "request_throughput", "request_goodput",
                  "output_throughput", "total_token_throughput", "input_lens", "output_lens",
                  "ttfts", "itls", "errors"):
        assert field in doc, field
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p99", "p50"):
            assert isinstance(doc[f"{stat}_{metric}_ms"], float)
    assert doc["completed"] == 12 and doc["num_prompts"] == 12
    assert doc["request_goodput"] is not None and doc["request_goodput"] > 0
    assert doc["gate"] is True and doc["objective"] == doc["request_goodput"]
    assert set(doc["constraints"]) == {"ttft", "tpot"}
    assert doc["output_lens"] == [8] * 12 and doc["input_lens"] == [16] * 12
    assert doc["diagnosis"]["wall"] == "limit"
    assert doc["client_bound"] is False and doc["early_abort"] is None
    text = capsys.readouterr().out
    assert "Request goodput" in text and "PASS" in text


def test_bench_with_builtin_workload_and_overrides(stub_url: str, tmp_path: Path) -> None:
    out = tmp_path / "lab.json"
    code = main(["--base-url", stub_url, "--model", "m", "--workload", "lab",
                 "--num-prompts", "5", "--num-warmups", "0", "--random-output-len", "4",
                 "--request-rate", "inf", "--slo", "ttft:50", "--early-abort",
                 "--endpoint", "/v1/chat/completions", "--time-scale", "2",
                 "--result-filename", str(out), "--quiet"])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["workload"]["name"] == "lab" and doc["request_rate"] == "inf"
    assert doc["backend"] == "openai-chat" and doc["time_scale"] == 2.0
    assert doc["objective"] == 0.0 and doc["gate"] is False


@pytest.mark.parametrize(("argv", "needle"), [
    (["--slo", "latency:3"], "unknown SLO metric 'latency'"),
    (["--workload", "nope"], "unknown workload 'nope'"),
    (["--random-range-ratio", "2"], "range_ratio"),
    (["--prefix-repetition-prefix-len", "5"], "use --dataset-name prefix_repetition"),
    (["--percentile-metrics", "ttft,foo"], "unknown foo"),
    (["--endpoint", "/v1/embeddings"], "expected /v1/completions"),
    (["--time-scale", "0"], "--time-scale must be a positive number"),
    (["--request-rate", "fast"], "not a number or 'inf'"),
    (["--num-prompts", "0"], "num_prompts"),
])
def test_user_mistakes_exit_2_without_traceback(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--base-url", "http://127.0.0.1:1", "--model", "m", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and "Traceback" not in err


def test_bad_workload_file_names_file_and_field(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_text("arrivals:\n  burstiness: -1\n")
    assert main(["--model", "m", "--workload", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "w.yaml: arrivals.burstiness" in err


def test_server_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--base-url", f"http://127.0.0.1:{free_port()}", "--model", "m", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot reach the server" in err and "Traceback" not in err


def test_every_request_failed_exits_1(stub_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--base-url", stub_url, "--model", "broken", "--num-prompts", "2", "--quiet"])
    assert code == 1 and "every request failed" in capsys.readouterr().err
