"""Real server processes for the load generator's tests: the known-timing stub, the sim."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from slotune.workers.engines.process import free_port

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TIME_SCALE = 5.0
"""The simulated engine's speed-up over real time in :func:`sim`."""
TTFT_MS = 100.0
ITL_MS = 20.0


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not healthy after {timeout_s} s")


def start_stub(*extra: str) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    argv = [sys.executable, "-m", "slotune.workers.loadgen.stub_server", "--port", str(port),
            "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    return url, proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def sim(tmp_path: Path, *flags: str) -> Iterator[str]:
    port = free_port()
    log = tmp_path / f"sim-{port}.log"
    argv = [sys.executable, "-m", "slotune.workers.sim", "serve", MODEL, "--sim-gpu", "rtx4090",
            "--port", str(port), "--sim-time-scale", str(TIME_SCALE), *flags]
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
