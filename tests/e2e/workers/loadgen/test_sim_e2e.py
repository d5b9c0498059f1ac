"""The diagnosis against the simulated engine as a real process (slow: starts servers).

A KV-starved configuration (a 4,800-token KV pool for 640-token requests at 20 req/s)
must read KV-bound; a configuration past the knee with KV to spare (max_num_seqs 8 at
20 req/s) must read queue-bound. The engine runs 5× faster than real time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slotune.workers.contracts import SLO, Workload
from slotune.workers.loadgen.cli import main as bench_main
from slotune.workers.loadgen.diagnose.diagnosis import diagnose
from slotune.workers.loadgen.generate.workload_files import load_workload
from slotune.workers.loadgen.runner import run_benchmark_sync
from slotune.workers.loadgen.score.scoring import score
from tests.support.loadgen_procs import MODEL, TIME_SCALE, sim

pytestmark = pytest.mark.slow

K = TIME_SCALE
SLO_ = SLO(ttft=300, tpot=50)


def lab(n: int) -> Workload:
    workload, _ = load_workload("lab")
    return workload.model_copy(update={"num_prompts": n, "warmup_requests": 0})


def test_kv_starved_reads_kv_bound(tmp_path: Path) -> None:
    with sim(tmp_path, "--gpu-memory-utilization", "0.71", "--max-model-len", "2048") as url:
        run = run_benchmark_sync(url, MODEL, lab(120), SLO_, time_scale=K)
    s = score(run.records, run.duration_s, SLO_)
    d = diagnose(run.scrape, s, SLO_)
    assert d is not None, run.scrape.error
    assert d.wall == "kv", d
    assert (d.evidence["kv_usage_max"] or 0) >= 0.9
    assert any("gpu-memory-utilization" in k for k in d.knobs)
    assert not s.gate and s.objective == 0.0


def test_past_the_knee_reads_queue_bound(tmp_path: Path) -> None:
    with sim(tmp_path, "--max-num-seqs", "8") as url:
        run = run_benchmark_sync(url, MODEL, lab(120), SLO_, time_scale=K)
    s = score(run.records, run.duration_s, SLO_)
    d = diagnose(run.scrape, s, SLO_)
    assert d is not None, run.scrape.error
    assert d.wall == "queue", d
    assert (d.evidence["waiting_mean"] or 0) >= 2
    assert (d.evidence["kv_usage_max"] or 1) < 0.9
    assert any("replicas" in k for k in d.knobs)


def test_custom_prompts_go_through_the_servers_chat_template(tmp_path: Path) -> None:
    """``--dataset-name custom`` without ``--skip-chat-template``: the server's /tokenize
    renders each prompt as a chat turn and the token ids are what is sent and counted."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"prompt": "question {i} about the engine"}}\n'
                               for i in range(6)))
    base = ["--model", MODEL, "--dataset-name", "custom", "--dataset-path", str(prompts),
            "--custom-output-len", "4", "--num-prompts", "6", "--time-scale", str(K),
            "--temperature", "0", "--save-result", "--save-detailed", "--disable-tqdm"]
    with sim(tmp_path) as url:
        for name, extra in (("templated", []), ("raw", ["--skip-chat-template"])):
            assert bench_main(["--base-url", url, *base, *extra, "--result-dir",
                               str(tmp_path / name)]) == 0
    (templated,), (raw,) = ((json.loads(p.read_text()) for p in (tmp_path / n).iterdir())
                            for n in ("templated", "raw"))
    assert raw["input_lens"] == [5] * 6  # five words, five tokens to the simulator
    # the template adds its role markers around the turn and the assistant cue
    assert all(t > 5 for t in templated["input_lens"])
    assert templated["total_input_tokens"] == sum(templated["input_lens"])
    assert templated["completed"] == raw["completed"] == 6
