"""The engine adapter contract: boot an inference server for one trial, watch it, end it.

An adapter turns a :class:`~slotune.workers.contracts.TrialSpec` into an argv list (never a
shell string) and an environment, starts the server in its own process group with its
log in a file, waits for ``/health`` while watching the process, and tears the whole
group down.

This module is the contract; the adapter composes its two halves, kept apart as vLLM
keeps its argument parsing apart from its engine process: what to run — the registry of
engine kinds, the argv and the environment (:mod:`slotune.workers.engines._command`) — and the
server's process — start, ``/health``, stop, the log (:mod:`slotune.workers.engines._lifecycle`,
over the machinery of :mod:`slotune.workers.engines.process`). Redaction is in
:mod:`slotune.workers.engines.redact`, log patterns in :mod:`slotune.workers.engines._log_patterns`.

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
import contextlib
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from slotune.workers.contracts import EngineFacts, TrialSpec
from slotune.workers.contracts.options import EngineOptions
from slotune.workers.engines._command import BASE_ENV as BASE_ENV
from slotune.workers.engines._command import check_known_args, engine_environment, register_engine
from slotune.workers.engines._command import flag_args as flag_args
from slotune.workers.engines._failures import EngineFailure as EngineFailure
from slotune.workers.engines._failures import InvalidEngineArgs as InvalidEngineArgs
from slotune.workers.engines._lifecycle import EngineProcess
from slotune.workers.engines._lifecycle import EngineState as EngineState
from slotune.workers.engines._log_patterns import classify_failure as classify_failure
from slotune.workers.engines._log_patterns import error_sentence
from slotune.workers.engines._log_patterns import parse_startup_log as parse_startup_log
from slotune.workers.engines.process import LOG_TAIL_LINES, free_port

if TYPE_CHECKING:
    from slotune.workers.gpu import GPUProbe


ADAPTERS: dict[str, type[EngineAdapter]] = {}
"""Engine kind → adapter class, filled as each adapter class is defined."""


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
        register_engine(ADAPTERS, cls, cls.kind, cls.options_model)

    def __init__(self, spec: TrialSpec, workdir: Path, gpu_ids: Sequence[str] = (),
                 host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.workdir = workdir
        self.gpu_ids = tuple(str(g) for g in gpu_ids)
        self.host = host
        self.port = 0
        self.notes: list[str] = []
        """slotune's own lines about this boot (a fallback it took, a wait), which head
        the engine log so the trial's log says them."""
        self.turn_wait_s = 0.0
        """Seconds :meth:`boot_slot` waited for another boot's turn before the start."""
        self._process = EngineProcess(self.kind, workdir / "engine.log", run_id=spec.run_id,
                                      teardown_grace_s=spec.timeouts.teardown_grace_s)
        """The server's process, its state and its log: the lifecycle half."""

    # The lifecycle half's state, read (and, for ``state``, set) where the adapter's
    # callers always found it.

    @property
    def state(self) -> EngineState:
        return self._process.state

    @state.setter
    def state(self, value: EngineState) -> None:
        self._process.state = value

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self._process.proc

    @property
    def log_path(self) -> Path:
        return self._process.log_path

    @property
    def argv_redacted(self) -> list[str]:
        """The argv the server was started with, secrets redacted (empty before start)."""
        return self._process.argv_redacted

    @property
    def _env(self) -> dict[str, str]:
        return self._process.env

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
        check_known_args(self.kind, self.spec, self.known_args)

    def argv(self, port: int) -> list[str]:
        self.check_args()
        return self.command(port)

    env_prefixes: ClassVar[tuple[str, ...]] = ()
    """Families of variables the engine reads (``VLLM_``…), handed through as they are."""

    def environment(self) -> dict[str, str]:
        """Base variables, the allow-listed passthrough, and the GPUs Ray assigned."""
        return engine_environment(self.spec, self.gpu_ids, self.env_prefixes)

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
        argv = self.argv(self.port)  # InvalidEngineArgs here: nothing has run
        env = self.environment()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._process.start(argv, env, cwd=self.workdir,
                            preamble="".join(f"[slotune] {note}\n" for note in self.notes),
                            binary_hint=self.binary_hint())

    async def wait_ready(self, timeout_s: float) -> None:
        """Poll ``/health`` while watching the process; a dead process ends the wait."""
        await self._process.wait_ready(f"{self.base_url}/health", timeout_s,
                                       self.health_poll_s)

    def alive(self) -> bool:
        return self._process.alive()

    async def wait_exit(self, poll_s: float = 0.1) -> int:
        """Return the exit code once the process has died (for the measurement watchdog)."""
        return await self._process.wait_exit(poll_s)

    def stop(self) -> None:
        """SIGTERM the process group, wait the grace period, then SIGKILL it. Idempotent."""
        self._process.stop()

    def __enter__(self) -> EngineAdapter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ---- what it said ---------------------------------------------------------------

    def log_text(self) -> str:
        return self._process.log_text()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return self._process.log_tail(lines)

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
            argv=tuple(self.argv_redacted),
            gpu_ids=gpu_ids,
            resolved_config=dict(self.spec.engine_flags),
            **parsed,
        )
