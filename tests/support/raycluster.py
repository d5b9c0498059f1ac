"""A real multi-node Ray cluster on this machine, started with ``ray start`` (for tests).

Recent Ray authenticates RPCs with a token when ``~/.ray/auth_token`` exists, and a
process fixes its own mode when ``ray`` is imported (or at its first local ``ray.init``).
A test process cannot reliably change its mode afterwards, so these nodes run with
``RAY_AUTH_MODE=disabled`` (they accept drivers either way); they are test-only and
short-lived. Production nodes use token mode (see ``docker-compose.yml``).

Each node is its own ``ray start`` with its own temp dir; all bind 127.0.0.1. GPUs are
fake (``--num-gpus``) and typed with ``gpu_type:*`` resources, the cluster convention of
:mod:`slotune.workers.trial.ray_worker`. :meth:`LocalRayCluster.stop` ends every
node it started, by process id: each ``ray start --block`` leads its own process group,
and any straggler whose command line names one of our temp dirs is ended too. (``ray
stop`` is not used: it ends every Ray process on the machine, other people's included.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slotune.workers.engines.process import free_port

RAY = str(Path(sys.executable).with_name("ray"))


@dataclass
class LocalRayCluster:
    """A head and worker nodes started by ``ray start``; ``address`` is the GCS address."""

    port: int = field(default_factory=free_port)
    temp_dirs: list[Path] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, args: list[str], gpus: int, gpu_type: str | None, cpus: int) -> None:
        # Short paths: Ray's Unix sockets live under the temp dir (108-byte limit).
        temp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
        self.temp_dirs.append(temp)
        resources = {f"gpu_type:{gpu_type}": gpus} if gpu_type else {}
        cmd = [RAY, "start", *args, "--node-ip-address", "127.0.0.1",
               "--num-cpus", str(cpus), "--num-gpus", str(gpus),
               "--resources", json.dumps(resources), "--temp-dir", str(temp),
               "--object-store-memory", str(256 << 20), "--disable-usage-stats"]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAY_AUTH_MODE"] = "disabled"
        with (temp / "ray-start.log").open("wb") as out:
            self.procs.append(subprocess.Popen([*cmd, "--block"], env=env, stdout=out,
                                               stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def start_head(self, *, gpus: int, gpu_type: str | None, cpus: int = 4,
                   timeout_s: float = 60) -> None:
        self._start(["--head", "--port", str(self.port), "--include-dashboard", "false"],
                    gpus, gpu_type, cpus)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.procs[-1].poll() is not None:
                raise RuntimeError("ray start --head exited:\n"
                                   + (self.temp_dirs[-1] / "ray-start.log").read_text())
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"Ray head not listening on {self.address} after {timeout_s:g} s")

    def add_node(self, *, gpus: int, gpu_type: str | None, cpus: int = 4) -> None:
        self._start(["--address", self.address], gpus, gpu_type, cpus)

    def wait_for_nodes(self, count: int, timeout_s: float = 60) -> None:
        """Block until ``count`` nodes are alive (the caller is connected with ray.init)."""
        import ray

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
            if sum(1 for n in nodes if n["Alive"]) >= count:
                return
            time.sleep(0.2)
        raise TimeoutError(f"fewer than {count} Ray nodes alive after {timeout_s:g} s")

    def stop(self, grace_s: float = 5) -> None:
        """End every process this cluster started (workers first), remove temp dirs."""
        for proc in reversed(self.procs):
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        # Processes that left the group (Ray daemons call setsid) still name our dirs.
        for _ in range(50):
            pids = self.stragglers()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for temp in self.temp_dirs:
            shutil.rmtree(temp, ignore_errors=True)
        self.procs.clear()
        self.temp_dirs.clear()

    def stragglers(self) -> list[int]:
        """Live processes whose command line names one of this cluster's temp dirs."""
        needles = [str(t).encode() for t in self.temp_dirs]
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
                status = (proc / "status").read_text()
            except OSError:
                continue
            if "State:\tZ" not in status and any(n in cmdline for n in needles):
                found.append(int(proc.name))
        return found


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@contextlib.contextmanager
def joined_cluster(*nodes: tuple[int, str | None]) -> Iterator[LocalRayCluster]:
    """A cluster of ``nodes`` (GPUs, GPU type) — the first is the head — with this process's
    Ray joined to it; everything stopped after, and no process of it left behind."""
    import pytest
    import ray

    if ray.is_initialized():
        ray.shutdown()  # another module's local Ray; the caller needs the cluster
    cluster = LocalRayCluster()
    mp = pytest.MonkeyPatch()
    mp.delenv("RAY_ADDRESS", raising=False)
    try:
        (head_gpus, head_type), *others = nodes
        cluster.start_head(gpus=head_gpus, gpu_type=head_type)
        for gpus, gpu_type in others:
            cluster.add_node(gpus=gpus, gpu_type=gpu_type)
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes(len(nodes))
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()
        mp.undo()
    assert cluster.stragglers() == []
