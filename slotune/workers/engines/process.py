"""Process machinery for engine servers: the log pump, dying with the parent (the engine
and its whole process group), free ports.

Generic: nothing here knows an engine. The adapter contract (:mod:`slotune.workers.engines.base`)
starts its server with these.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import IO

__all__ = ["LOG_TAIL_LINES", "LogPump", "die_with_parent", "free_port", "log_budget_bytes",
           "start_group_reaper"]

LOG_TAIL_LINES = 40
DEFAULT_LOG_BUDGET_BYTES = 32 << 20
"""Disk an engine's log may take (``SLOTUNE_ENGINE_LOG_MAX_BYTES`` overrides it)."""
LOG_TAIL_KEEP_BYTES = 256 << 10
"""Past the budget, this much of the newest output is still kept (for the crash's end)."""
_PR_SET_PDEATHSIG = 1


def log_budget_bytes() -> int:
    raw = os.environ.get("SLOTUNE_ENGINE_LOG_MAX_BYTES")
    return max(64 << 10, int(raw)) if raw and raw.isdigit() else DEFAULT_LOG_BUDGET_BYTES


class LogPump(threading.Thread):
    """Copies an engine's output to its log file within a byte budget.

    The first ``budget − tail`` bytes go to the file as they come; past that, only the
    newest ``tail`` bytes are kept (in memory, then appended when the engine exits), with
    a line saying how much was dropped. The pipe is always drained, so a chatty engine
    never blocks on a full pipe and never fills the disk. ``preamble`` (slotune's own
    lines about this boot) heads the file.
    """

    def __init__(self, pipe: IO[bytes], path: Path, budget: int, preamble: str = "") -> None:
        super().__init__(name=f"log-pump-{path.parent.name}", daemon=True)
        self.pipe = pipe
        self.path = path
        self.head_budget = max(0, budget - min(LOG_TAIL_KEEP_BYTES, budget // 4))
        self.tail_budget = budget - self.head_budget
        # What slotune itself has to say about this boot comes first, and is in the file
        # before the engine's first line can be read back.
        head = preamble.encode()
        path.write_bytes(head)
        self.written = len(head)
        self.dropped = 0
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self._lock = threading.Lock()

    def run(self) -> None:
        with self.path.open("ab") as out:
            for line in iter(self.pipe.readline, b""):
                with self._lock:
                    if self.written + len(line) <= self.head_budget and not self.dropped:
                        out.write(line)
                        out.flush()
                        self.written += len(line)
                        continue
                    self._tail.append(line)
                    self._tail_bytes += len(line)
                    while self._tail_bytes > self.tail_budget and self._tail:
                        gone = self._tail.popleft()
                        self._tail_bytes -= len(gone)
                        self.dropped += len(gone)
            with self._lock:
                if self.dropped:
                    out.write(self._marker())
                out.writelines(self._tail)
        self.pipe.close()

    def _marker(self) -> bytes:
        return (f"[slotune: {self.dropped:,} bytes of engine log dropped here — over the "
                f"log budget (SLOTUNE_ENGINE_LOG_MAX_BYTES)]\n").encode()

    def text(self) -> str:
        """Everything kept so far (the file's head, the marker, the newest output)."""
        with self._lock:
            tail = b"".join(self._tail)
            marker = self._marker() if self.dropped else b""
            alive = self.is_alive()
        try:
            head = self.path.read_bytes()
        except FileNotFoundError:
            head = b""
        if not alive:
            return head.decode(errors="replace")  # the file is complete now
        return (head + marker + tail).decode(errors="replace")


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the engine gets SIGKILL if the process that launched it dies.

    The engine runs in its own session (so teardown can kill its whole group), which
    also means a killed Ray worker would otherwise leave it running, holding the GPU.
    This reaches the engine's own process only; :func:`start_group_reaper` takes the
    rest of its group.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_REAPER = Path(__file__).with_name("_group_reaper.py")
_REAPER_ENV = ("PATH", "LD_LIBRARY_PATH")
"""All the reaper is given of the environment: it carries no trial's marker
(``SLOTUNE_RUN_ID``), so nothing counts it as an engine."""


def start_group_reaper(pgid: int) -> subprocess.Popen[bytes]:
    """A small process that SIGKILLs process group ``pgid`` if this process dies.

    :func:`die_with_parent` reaches the engine's own process only; what the engine
    started lives on without this (:mod:`slotune.workers.engines._group_reaper`). The caller
    stops it (``kill``, ``wait``) once the group is torn down. Raises ``OSError`` when
    it cannot start.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(_REAPER), str(pgid), str(os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={k: os.environ[k] for k in _REAPER_ENV if k in os.environ},
        start_new_session=True)  # not in the trial's group: a ^C to it spares the reaper


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
