"""One engine server's process: start it, wait for ``/health``, read its log, end it.

Knows no engine: it is handed an argv and an environment (built by the adapter,
:mod:`slotune.workers.engines._command`) and runs them in a process group of their own, with
the log pump, the parent-death signal and the group reaper of
:mod:`slotune.workers.engines.process`. The adapter (:mod:`slotune.workers.engines.base`) composes
one per trial; the states and what each call raises are its contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from slotune.workers.engines._failures import EngineFailure
from slotune.workers.engines._log_patterns import classify_failure, error_sentence
from slotune.workers.engines.process import (
    LOG_TAIL_LINES,
    LogPump,
    die_with_parent,
    log_budget_bytes,
    start_group_reaper,
)
from slotune.workers.engines.redact import argv_secrets, redact, redact_argv

__all__ = ["EngineProcess", "EngineState"]

log = logging.getLogger(__name__)


class EngineState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    READY = "ready"
    STOPPED = "stopped"
    FAILED = "failed"


class EngineProcess:
    """The process (and process group) of one engine server, and its log file."""

    def __init__(self, kind: str, log_path: Path, *, run_id: str,
                 teardown_grace_s: float) -> None:
        self.kind = kind
        self.log_path = log_path
        self.run_id = run_id
        self.teardown_grace_s = teardown_grace_s
        self.state = EngineState.CREATED
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}
        self.argv_redacted: list[str] = []
        self.secrets: Sequence[str] = ()
        self._reaper: subprocess.Popen[bytes] | None = None
        self._pump: LogPump | None = None

    def start(self, argv: Sequence[str], env: dict[str, str], *, cwd: Path, preamble: str,
              binary_hint: str) -> None:
        """Spawn ``argv`` in its own process group, its output pumped to the log file."""
        self.env = env
        self.argv_redacted = redact_argv(argv)
        self.secrets = argv_secrets(argv)
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                         start_new_session=True, preexec_fn=die_with_parent)
        except OSError as exc:  # no such executable, not executable, …
            self.state = EngineState.FAILED
            raise EngineFailure(
                "crashed", f"cannot run the {self.kind} engine {argv[0]!r}: "
                f"{exc.strerror or exc}; {binary_hint}") from exc
        try:
            self._reaper = start_group_reaper(self.proc.pid)
        except OSError as exc:  # the engine itself still dies with us; its children may not
            log.warning("trial %s: no reaper for the engine's process group (%s)",
                        self.run_id, exc.strerror or exc)
            self._reaper = None
        assert self.proc.stdout is not None
        self._pump = LogPump(self.proc.stdout, self.log_path, log_budget_bytes(),
                             preamble=preamble)
        self._pump.start()
        self.state = EngineState.STARTING

    async def wait_ready(self, health_url: str, timeout_s: float, poll_s: float) -> None:
        """Poll ``health_url`` while watching the process; a dead process ends the wait."""
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0)) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self._fail_startup(code)
                try:
                    response = await client.get(health_url)
                    if response.status_code == 200:
                        self.state = EngineState.READY
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() >= deadline:
                    self.stop()
                    self.state = EngineState.FAILED
                    raise EngineFailure(
                        "startup_timeout",
                        f"{self.kind} engine did not become healthy within {timeout_s:g} s",
                        log_tail=self.log_tail())
                await asyncio.sleep(poll_s)

    def _fail_startup(self, code: int) -> None:
        text = self.log_text()
        self.stop()
        self.state = EngineState.FAILED
        failure = classify_failure(text, during="startup")
        raise EngineFailure(failure, f"{self.kind} engine exited with code {code} during "
                            f"start-up: {error_sentence(text)}",
                            exit_code=code, log_tail=self.log_tail())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def wait_exit(self, poll_s: float = 0.1) -> int:
        """Return the exit code once the process has died (for the measurement watchdog)."""
        assert self.proc is not None
        while (code := self.proc.poll()) is None:
            await asyncio.sleep(poll_s)
        return code

    def stop(self) -> None:
        """SIGTERM the process group, wait the grace period, then SIGKILL it. Idempotent."""
        proc = self.proc
        if proc is None:
            self.state = EngineState.STOPPED
            return
        grace = self.teardown_grace_s
        if proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        # The group may hold children (tensor-parallel workers) even when the leader died.
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        reaper, self._reaper = self._reaper, None
        if reaper is not None:  # the group is gone: nothing left for it to guard
            reaper.kill()
            reaper.wait()
        if self._pump is not None:
            self._pump.join(timeout=grace)
        if self.state is not EngineState.FAILED:
            self.state = EngineState.STOPPED

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def log_text(self) -> str:
        """The log so far, with the environment's and the argv's secrets redacted."""
        if self._pump is not None:
            raw = self._pump.text()
        else:
            try:
                raw = self.log_path.read_text(errors="replace")
            except FileNotFoundError:
                return ""
        return redact(raw, self.env, self.secrets)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
