"""Start the simulated engine as a real server process for end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from slotune.workers.engines.process import free_port

SLOTUNE = str(Path(sys.executable).with_name("slotune"))


@dataclass
class SimProcess:
    proc: subprocess.Popen[str]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()


def wait_healthy(sim: SimProcess, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sim.proc.poll() is not None:
            raise RuntimeError(f"simulated engine exited {sim.proc.returncode}:\n{sim.log()}")
        try:
            if httpx.get(f"{sim.base_url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"simulated engine not healthy after {timeout}s:\n{sim.log()}")


@contextmanager
def sim_server(model: str, *flags: str, log_dir: Path, command: Sequence[str] | None = None,
               wait: bool = True) -> Iterator[SimProcess]:
    """Run ``slotune sim serve MODEL FLAGS --port P`` until the block ends."""
    port = free_port()
    log_path = log_dir / f"sim-{port}.log"
    argv = [*(command or [SLOTUNE, "sim", "serve"]), model, *flags, "--port", str(port)]
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    sim = SimProcess(proc, port, log_path)
    try:
        if wait:
            wait_healthy(sim)
        yield sim
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
