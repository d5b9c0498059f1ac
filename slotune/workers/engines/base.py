"""The engine adapter contract: boot an inference server for one trial, watch it, end it.

An adapter turns a :class:`~slotune.workers.contracts.TrialSpec` into an argv list (never a
shell string) and an environment, starts the server in its own process group with its
log in a file, waits for ``/health`` while watching the process, and tears the whole
group down.

The process machinery (log pump, parent-death signal, ports) is in
:mod:`slotune.workers.engines.process`, redaction in :mod:`slotune.workers.engines.redact`, log
patterns in :mod:`slotune.workers.engines._log_patterns`; this module is the contract.

Contract (every adapter; ``tests/support/engines.py`` holds one suite
against each):

* **Booting.** :meth:`EngineAdapter.boot` is how a trial boots: :meth:`start` then
  :meth:`wait_ready`, inside the adapter's :meth:`boot_slot` (vLLM: boots that would
  write the same compile-cache entries take turns, :mod:`slotune.workers.engines.shared_cache`).
  Waiting for the slot is part of the boot.
* **States.** ``created`` → ``starting`` (after :meth:`EngineAdapter.start`) →
  ``ready`` (``/health`` answered 200) → ``stopped``; or → ``failed`` when start-up
  fails. :meth:`stop` is valid from every state.
* **Who cleans up.** The adapter that started a process owns it and its whole process
  group. :meth:`stop` is idempotent and never raises for a process already gone; use
  the adapter as a context manager so cleanup happens on every path, exceptions and
  cancellation included. A failed start-up has already cleaned up when it raises.
* **What each call raises.** :meth:`argv` raises :class:`InvalidEngineArgs` (an
  ``invalid_config`` failure) for arguments the engine does not take, before anything
  runs. :meth:`wait_ready` raises :class:`EngineFailure` classified as
  ``invalid_config``, ``oom``, ``crashed`` (the process died, for another reason) or
  ``startup_timeout``; a dead process ends the wait at once, with its exit code and
  log tail. Nothing else is raised for engine behaviour.
* **Threads.** An adapter belongs to one trial and one task; it is not thread-safe.
* **Registration.** A subclass that sets its own ``kind`` registers itself as that
  engine, with its ``options_model`` (:mod:`slotune.workers.contracts.options`), when the class is
  defined; :mod:`slotune.workers.engines` imports every module of the package, so an engine is
  one module there. A kind taken by another adapter is refused.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from slotune.workers.contracts import EngineFacts, FailureClass, KnobValue, TrialSpec
from slotune.workers.contracts.options import EngineOptions, register_options
from slotune.workers.engines._log_patterns import classify_failure as classify_failure
from slotune.workers.engines._log_patterns import error_sentence
from slotune.workers.engines._log_patterns import parse_startup_log as parse_startup_log
from slotune.workers.engines.process import (
    LOG_TAIL_LINES,
    LogPump,
    die_with_parent,
    free_port,
    log_budget_bytes,
    start_group_reaper,
)
from slotune.workers.engines.redact import argv_secrets, redact, redact_argv

if TYPE_CHECKING:
    from slotune.workers.gpu import GPUProbe

log = logging.getLogger(__name__)

BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
"""Variables every engine inherits; anything else must be on the spec's allow-list."""


ADAPTERS: dict[str, type[EngineAdapter]] = {}
"""Engine kind → adapter class, filled as each adapter class is defined."""


class EngineState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    READY = "ready"
    STOPPED = "stopped"
    FAILED = "failed"


class EngineFailure(Exception):
    """The engine could not serve: a classified failure with its evidence."""

    def __init__(self, failure: FailureClass, message: str, *, exit_code: int | None = None,
                 log_tail: str | None = None, boot_s: float | None = None) -> None:
        super().__init__(message)
        self.failure: FailureClass = failure
        self.message = message
        self.exit_code = exit_code
        self.log_tail = log_tail
        self.boot_s = boot_s
        """Engine seconds the start-up took before it failed, where the engine itself
        keeps the time (the virtual-time simulator); None: the caller's clock says."""


class InvalidEngineArgs(EngineFailure):
    """Arguments the engine does not take (refused before anything runs)."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_config", message)


def flag_args(flags: Mapping[str, KnobValue]) -> list[str]:
    """vLLM-style arguments: ``--name=value``; booleans ``--x``/``--no-x``; objects as JSON."""
    out: list[str] = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        # ``--flag=value`` as one element: a value that looks like an option (say
        # "--enforce-eager") can then never be read by the engine as a flag of its own.
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, dict):
            out.append(f"{flag}={json.dumps(value, separators=(',', ':'), sort_keys=True)}")
        else:
            out.append(f"{flag}={value}")
    return out


class EngineAdapter(abc.ABC):
    """One engine server for one trial (see the module docstring for the contract)."""

    kind: ClassVar[str]
    options_model: ClassVar[type[EngineOptions]] = EngineOptions
    """The model of the engine's own options (a spec's ``options``); the base takes none."""
    known_args: ClassVar[frozenset[str]]
    """Argument names the engine takes; anything else needs the space's declaration."""
    health_poll_s: ClassVar[float] = 0.2
    occupies_gpus: ClassVar[bool] = False
    """Whether the process holds the GPUs it is given (so they are checked free before
    boot and after teardown)."""
    simulated: ClassVar[bool] = False
    """Whether the engine models its GPU and its model rather than running them: its
    ``gpu`` is a catalogue GPU or a device file, its model one with facts we know, and a
    sweep of it may run in virtual time (``--executor virtual``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" not in cls.__dict__:
            return  # a helper base, or a variant of an engine (a test's): not an engine
        known = ADAPTERS.get(cls.kind)
        if known is not None and (known.__module__, known.__qualname__) != \
                (cls.__module__, cls.__qualname__):
            raise TypeError(f"engine {cls.kind!r} is already {known.__module__}."
                            f"{known.__qualname__}; {cls.__qualname__} needs a kind of its own")
        register_options(cls.kind, cls.options_model)
        ADAPTERS[cls.kind] = cls

    def __init__(self, spec: TrialSpec, workdir: Path, gpu_ids: Sequence[str] = (),
                 host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.workdir = workdir
        self.gpu_ids = tuple(str(g) for g in gpu_ids)
        self.host = host
        self.port = 0
        self.state = EngineState.CREATED
        self.log_path = workdir / "engine.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self.notes: list[str] = []
        """slotune's own lines about this boot (a fallback it took, a wait), which head
        the engine log so the trial's log says them."""
        self.turn_wait_s = 0.0
        """Seconds :meth:`boot_slot` waited for another boot's turn before the start."""

    @property
    def time_scale(self) -> float:
        """How many times faster than real time the engine runs (measurements stretch back)."""
        return 1.0

    def hardware_facts(self, probe: GPUProbe) -> dict[str, Any]:
        """What the engine runs on, as :class:`EngineFacts` fields (GPU name, memory, …)."""
        return {}

    @classmethod
    def repeat_spec(cls, spec: TrialSpec, repeat: int) -> TrialSpec:
        """``spec`` for its ``repeat``-th confirmation run (0-based): a real engine runs it
        as it is; a simulated one varies what stands for the world's noise."""
        return spec

    @classmethod
    def gpu_type(cls, spec: TrialSpec, labels: Mapping[str, str]) -> str | None:
        """The node label of the GPU type this trial must run on, None: any GPU will do.

        ``labels`` maps the spaces' GPU names to a typed cluster's node labels
        (``SLOTUNE_GPU_TYPES``). A real engine runs on whatever GPU it is given unless the
        cluster names the kind its space targets.
        """
        return labels.get(spec.gpu)

    # ---- what to run --------------------------------------------------------------

    @abc.abstractmethod
    def command(self, port: int) -> list[str]:
        """The argv that serves ``spec`` on ``port`` (validated flags, no shell)."""

    def binary_hint(self) -> str:
        """What to set when the engine's executable cannot be run."""
        return "check the engine's installation"

    def check_args(self) -> None:
        unknown = sorted(set(self.spec.engine_flags) - self.known_args
                         - set(self.spec.allowed_extra_args))
        if unknown:
            raise InvalidEngineArgs(
                f"unknown engine argument(s) for {self.kind}: {', '.join(unknown)}; declare "
                "them in the search space's allowed_extra_args, or use one of: "
                + ", ".join(sorted(self.known_args))
            )

    def argv(self, port: int) -> list[str]:
        self.check_args()
        return self.command(port)

    env_prefixes: ClassVar[tuple[str, ...]] = ()
    """Families of variables the engine reads (``VLLM_``…), handed through as they are."""

    def environment(self) -> dict[str, str]:
        """Base variables, the allow-listed passthrough, and the GPUs Ray assigned."""
        env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
        for name, value in os.environ.items():
            if self.env_prefixes and name.startswith(self.env_prefixes):
                env[name] = value
        for name in self.spec.env_passthrough:
            if name in os.environ:
                env[name] = os.environ[name]
        if self.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        # Marks the process as this trial's, so a leak can always be traced to its trial.
        env["SLOTUNE_RUN_ID"] = self.spec.run_id
        return env

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ---- lifecycle ----------------------------------------------------------------

    async def boot(self, timeout_s: float) -> None:
        """:meth:`start` then :meth:`wait_ready`, inside :meth:`boot_slot`.

        ``timeout_s`` bounds the engine's own start-up; the slot's wait is bounded apart
        (by the adapter), so a boot that waited its turn is not a start-up timeout.
        """
        async with self.boot_slot(timeout_s):
            self.start()
            await self.wait_ready(timeout_s)

    @contextlib.asynccontextmanager
    async def boot_slot(self, timeout_s: float) -> AsyncIterator[None]:
        """Held from before :meth:`start` until the engine is healthy or has failed: an
        adapter whose boots can collide (shared caches) waits its turn here. None by
        default."""
        yield

    def start(self) -> None:
        """Spawn the server in its own process group on a free port, logging to a file."""
        if self.state is not EngineState.CREATED:
            raise RuntimeError(f"engine already {self.state.value}")
        self.port = free_port()
        argv = self.argv(self.port)
        self._env = self.environment()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.argv_redacted = redact_argv(argv)
        self._secrets = argv_secrets(argv)
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self._env,
                                         cwd=self.workdir, start_new_session=True,
                                         preexec_fn=die_with_parent)
        except OSError as exc:  # no such executable, not executable, …
            self.state = EngineState.FAILED
            raise EngineFailure(
                "crashed", f"cannot run the {self.kind} engine {argv[0]!r}: "
                f"{exc.strerror or exc}; {self.binary_hint()}") from exc
        try:
            self._reaper: subprocess.Popen[bytes] | None = start_group_reaper(self.proc.pid)
        except OSError as exc:  # the engine itself still dies with us; its children may not
            log.warning("trial %s: no reaper for the engine's process group (%s)",
                        self.spec.run_id, exc.strerror or exc)
            self._reaper = None
        assert self.proc.stdout is not None
        self._pump = LogPump(self.proc.stdout, self.log_path, log_budget_bytes(),
                             preamble="".join(f"[slotune] {note}\n" for note in self.notes))
        self._pump.start()
        self.state = EngineState.STARTING

    async def wait_ready(self, timeout_s: float) -> None:
        """Poll ``/health`` while watching the process; a dead process ends the wait."""
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0)) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self._fail_startup(code)
                try:
                    response = await client.get(f"{self.base_url}/health")
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
                await asyncio.sleep(self.health_poll_s)

    def _fail_startup(self, code: int) -> None:
        text = self.log_text()
        self.stop()
        self.state = EngineState.FAILED
        failure = classify_failure(text, during="startup")
        raise EngineFailure(failure, f"{self.kind} engine exited with code {code} during "
                            f"start-up: {self.last_error_line(text)}",
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
        grace = self.spec.timeouts.teardown_grace_s
        if proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        # The group may hold children (tensor-parallel workers) even when the leader died.
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        reaper, self._reaper = getattr(self, "_reaper", None), None
        if reaper is not None:  # the group is gone: nothing left for it to guard
            reaper.kill()
            reaper.wait()
        pump = getattr(self, "_pump", None)
        if pump is not None:
            pump.join(timeout=grace)
        if self.state is not EngineState.FAILED:
            self.state = EngineState.STOPPED

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def __enter__(self) -> EngineAdapter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ---- what it said ---------------------------------------------------------------

    def log_text(self) -> str:
        pump = getattr(self, "_pump", None)
        if pump is not None:
            raw = pump.text()
        else:
            try:
                raw = self.log_path.read_text(errors="replace")
            except FileNotFoundError:
                return ""
        return redact(raw, self._env, getattr(self, "_secrets", ()))

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    @staticmethod
    def last_error_line(text: str) -> str:
        """The line that best says why, as the engine worded it: a known cause first
        (``_OOM_PATTERNS``, ``_INVALID_PATTERNS``), else the last error line."""
        return error_sentence(text)

    def facts(self) -> EngineFacts:
        parsed = parse_startup_log(self.log_text())
        if self.turn_wait_s:
            parsed["startup_phases_s"]["turn_wait"] = round(self.turn_wait_s, 3)
        visible = parsed.pop("cuda_visible_devices", None)
        # What the engine says it saw beats what we meant to give it.
        gpu_ids = tuple(visible.split(",")) if visible else self.gpu_ids
        return EngineFacts(
            argv=tuple(getattr(self, "argv_redacted", ())),
            gpu_ids=gpu_ids,
            resolved_config=dict(self.spec.engine_flags),
            **parsed,
        )
