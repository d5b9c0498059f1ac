"""The simulated engine as a real server process, through real HTTP clients.

httpx and the ``openai`` package (a client nobody here wrote) talk to it exactly as they
would talk to ``vllm serve``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.simproc import SLOTUNE, SimProcess, sim_server

pytestmark = pytest.mark.slow

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def rtx4090(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with sim_server(QWEN7B, "--sim-gpu", "rtx4090",
                    log_dir=tmp_path_factory.mktemp("sim")) as sim:
        yield sim


def _metrics(base_url: str) -> dict[str, float]:
    text = httpx.get(f"{base_url}/metrics").text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert sample.labels.get("model_name") == QWEN7B
            values.setdefault(sample.name, 0.0)
            values[sample.name] += sample.value
    return values


def test_startup_reports_kv_cache_of_tens_of_thousands_of_tokens(rtx4090: SimProcess) -> None:
    log = rtx4090.log()
    tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", log).group(1)  # type: ignore[union-attr]
                 .replace(",", ""))
    assert 10_000 <= tokens < 100_000
    assert re.search(r"Maximum concurrency for 32,768 tokens per request: [\d.]+x", log)
    assert "Loading weights took" in log and "Graph capturing finished in" in log


def test_health_models_and_metrics(rtx4090: SimProcess) -> None:
    assert httpx.get(f"{rtx4090.base_url}/health").status_code == 200
    models = httpx.get(f"{rtx4090.base_url}/v1/models").json()
    assert models["data"][0]["id"] == QWEN7B
    assert models["data"][0]["max_model_len"] == 32768
    metrics = _metrics(rtx4090.base_url)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_sum",
                 "vllm:request_queue_time_seconds_count",
                 "vllm:request_prefill_time_seconds_count",
                 "vllm:request_decode_time_seconds_count",
                 "vllm:iteration_tokens_total_bucket"):
        assert name in metrics, name


def test_openai_client_streams_token_by_token_with_usage(rtx4090: SimProcess) -> None:
    client = openai.OpenAI(base_url=f"{rtx4090.base_url}/v1", api_key="unused")
    before = _metrics(rtx4090.base_url)
    stream = client.completions.create(
        model=QWEN7B, prompt="the quick brown fox " * 100, max_tokens=20, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    texts: list[str] = []
    arrivals: list[float] = []
    usage = None
    for chunk in stream:
        if chunk.choices:
            texts.append(chunk.choices[0].text)
            arrivals.append(time.monotonic())
        if chunk.usage is not None:
            usage = chunk.usage
    assert len(texts) == 20 and all(len(t.split()) == 1 for t in texts)
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (400, 20, 420)
    # Tokens arrive spread over the decode steps, not in one burst.
    assert arrivals[-1] - arrivals[0] > 0.1
    after = _metrics(rtx4090.base_url)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 20
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 400


def test_chat_completion_streams_and_answers_whole(rtx4090: SimProcess) -> None:
    client = openai.OpenAI(base_url=f"{rtx4090.base_url}/v1", api_key="unused")
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": "say something"}]
    whole = client.chat.completions.create(model=QWEN7B, messages=messages,  # type: ignore[arg-type]
                                           max_tokens=7, extra_body={"ignore_eos": True})
    assert whole.usage is not None and whole.usage.completion_tokens == 7
    assert whole.choices[0].finish_reason == "length"
    assert len((whole.choices[0].message.content or "").split()) == 7
    stream = client.chat.completions.create(model=QWEN7B, messages=messages,  # type: ignore[arg-type]
                                            max_tokens=5, stream=True,
                                            extra_body={"ignore_eos": True})
    chunks = [c for c in stream if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    words = "".join(c.choices[0].delta.content or "" for c in chunks).split()
    # The same prompt makes the simulated model say the same words.
    assert words == (whole.choices[0].message.content or "").split()[:5]
    assert chunks[-1].choices[0].finish_reason == "length"


def test_same_prompt_hits_the_prefix_cache(rtx4090: SimProcess) -> None:
    prompt = " ".join(f"shared{i}" for i in range(256))
    before = _metrics(rtx4090.base_url)
    for _ in range(2):
        r = httpx.post(f"{rtx4090.base_url}/v1/completions",
                       json={"prompt": prompt, "max_tokens": 2, "ignore_eos": True})
        assert r.status_code == 200
    after = _metrics(rtx4090.base_url)
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert hits == 240  # 15 full blocks of 16 (one token must always be computed)
    assert httpx.post(f"{rtx4090.base_url}/reset_prefix_cache").status_code == 200
    httpx.post(f"{rtx4090.base_url}/v1/completions",
               json={"prompt": prompt, "max_tokens": 2, "ignore_eos": True})
    assert _metrics(rtx4090.base_url)["vllm:prefix_cache_hits_total"] == \
        after["vllm:prefix_cache_hits_total"]


def test_too_long_request_gets_an_openai_style_400(rtx4090: SimProcess) -> None:
    r = httpx.post(f"{rtx4090.base_url}/v1/completions",
                   json={"model": QWEN7B, "prompt": "hello " * 100, "max_tokens": 32700})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert "maximum context length is 32768 tokens" in error["message"]
    client = openai.OpenAI(base_url=f"{rtx4090.base_url}/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=QWEN7B, prompt="hello " * 100, max_tokens=32700)


@pytest.mark.parametrize("body", [
    {"prompt": "x", "max_tokens": 0},
    {"prompt": "x", "max_tokens": "many"},
    {"max_tokens": 5},
    {"prompt": "x", "n": 2},
])
def test_malformed_requests_get_400_with_the_field(rtx4090: SimProcess,
                                                   body: dict[str, object]) -> None:
    r = httpx.post(f"{rtx4090.base_url}/v1/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("Invalid request:")


def test_unknown_model_is_404(rtx4090: SimProcess) -> None:
    r = httpx.post(f"{rtx4090.base_url}/v1/completions", json={"model": "nope", "prompt": "x"})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]


def test_client_that_hangs_up_frees_its_request(rtx4090: SimProcess) -> None:
    with httpx.stream("POST", f"{rtx4090.base_url}/v1/completions",
                      json={"prompt": "a b c", "max_tokens": 5000, "ignore_eos": True,
                            "stream": True}) as response:
        for _ in response.iter_lines():
            break
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if _metrics(rtx4090.base_url)["vllm:num_requests_running"] == 0:
            break
        time.sleep(0.05)
    assert _metrics(rtx4090.base_url)["vllm:num_requests_running"] == 0


def test_invalid_combination_prints_vllms_sentence_and_exits_fast() -> None:
    start = time.monotonic()
    proc = subprocess.run(
        [SLOTUNE, "sim", "serve", QWEN7B, "--max-num-batched-tokens", "32",
         "--max-num-seqs", "64"], capture_output=True, text=True, timeout=30,
    )
    assert time.monotonic() - start < 5
    assert proc.returncode != 0
    assert ("max_num_batched_tokens (32) must be greater than or equal to max_num_seqs (64)."
            in proc.stderr)
    assert "Traceback" not in proc.stderr


def test_module_entry_point_stands_in_for_vllm_and_honours_time_scale(tmp_path: Path) -> None:
    """``python -m slotune.workers.sim serve`` at 20× runs 200 decode steps in a fraction of real
    time."""
    with sim_server(QWEN7B, "--sim-gpu", "h100-sxm", "--sim-time-scale", "20",
                    command=[sys.executable, "-m", "slotune.workers.sim", "serve"],
                    log_dir=tmp_path) as sim:
        start = time.monotonic()
        r = httpx.post(f"{sim.base_url}/v1/completions", timeout=30,
                       json={"prompt": "hello world", "max_tokens": 200, "ignore_eos": True})
        wall = time.monotonic() - start
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 200
        e2e = _metrics_for(sim.base_url, "vllm:e2e_request_latency_seconds_sum")
        # The engine reports engine time; the wall clock saw about a twentieth of it.
        assert e2e > 0.5
        assert wall < e2e / 5


def _metrics_for(base_url: str, name: str) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{base_url}/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise KeyError(name)


def test_health_is_503_until_loaded(tmp_path: Path) -> None:
    with sim_server(QWEN7B, "--sim-startup-delay", "3", log_dir=tmp_path, wait=False) as sim:
        deadline = time.monotonic() + 10
        status = None
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"{sim.base_url}/health").status_code
                break
            except httpx.TransportError:
                time.sleep(0.05)
        assert status == 503
        r = httpx.post(f"{sim.base_url}/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert r.status_code == 503


def test_runtime_oom_kills_the_server(tmp_path: Path) -> None:
    with sim_server(QWEN7B, "--sim-gpu", "rtx4090", "--gpu-memory-utilization", "0.97",
                    "--max-num-batched-tokens", "8192", log_dir=tmp_path) as sim:
        with pytest.raises((httpx.HTTPError, AssertionError)):
            r = httpx.post(f"{sim.base_url}/v1/completions", timeout=10,
                           json={"prompt": "tok " * 4000, "max_tokens": 4})
            assert r.status_code == 200
        sim.proc.wait(timeout=10)
        assert sim.proc.returncode != 0
        assert "CUDA out of memory" in sim.log()
