"""The diagnosis against the simulated engine as a real process (slow: starts servers).

A KV-starved configuration (a 4,800-token KV pool for 640-token requests at 20 req/s)
must read KV-bound; a configuration past the knee with KV to spare (max_num_seqs 8 at
20 req/s) must read queue-bound. The engine runs 5× faster than real time.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from loadgen_procs import free_port, stop, wait_healthy

from workers.contracts import SLO, Workload
from workers.loadgen.diagnosis import diagnose
from workers.loadgen.runner import run_benchmark_sync
from workers.loadgen.scoring import score
from workers.loadgen.workload_files import load_workload

pytestmark = pytest.mark.slow

MODEL = "Qwen/Qwen2.5-7B-Instruct"
K = 5.0
SLO_ = SLO(ttft=300, tpot=50)


@contextmanager
def sim(tmp_path: Path, *flags: str) -> Iterator[str]:
    port = free_port()
    log = tmp_path / f"sim-{port}.log"
    argv = [sys.executable, "-m", "workers.sim", "serve", MODEL, "--sim-gpu", "rtx4090",
            "--port", str(port), "--sim-time-scale", str(K), *flags]
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{log.read_text()}") from exc
        yield url
    finally:
        stop(proc)


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
