"""What runs a trial: the coordinator's view of its workers.

Contract (:class:`TrialExecutor`): :meth:`submit` starts a trial and returns a handle at
once; :meth:`wait` returns the trials that finished within a timeout (each exactly
once, as a :class:`~workers.contracts.TrialResult` — a lost worker is a ``worker_lost``
result, never an exception); :meth:`capacity` is how many GPUs it schedules onto;
:meth:`cancel` ends a trial (its engine dies with it). One coordinator thread per
sweep may call an executor; implementations are thread-safe for that use.

* :class:`RayExecutor` — trials as Ray tasks with ``num_gpus = tensor_parallel_size``
  (a local Ray with simulated GPUs by default; a cluster with ``RAY_ADDRESS``).
* :class:`VirtualExecutor` — trials of the simulated engine in virtual time, in this
  process (search logic, benchmarks, quick demos): milliseconds per trial.
"""

from __future__ import annotations

import abc
import concurrent.futures as cf
import itertools
import threading
from collections.abc import Hashable

from workers.contracts import TrialResult, TrialSpec

__all__ = ["RayExecutor", "TrialExecutor", "VirtualExecutor", "make_executor"]

Handle = Hashable


class TrialExecutor(abc.ABC):
    """Runs trials somewhere; see the module docstring for the contract."""

    @abc.abstractmethod
    def submit(self, spec: TrialSpec) -> Handle: ...

    @abc.abstractmethod
    def wait(self, handles: list[Handle], timeout_s: float) -> list[tuple[Handle, TrialResult]]:
        """The finished ones among ``handles`` (possibly none before the timeout)."""

    @abc.abstractmethod
    def capacity(self) -> int:
        """GPUs trials can be scheduled onto."""

    @abc.abstractmethod
    def cancel(self, handle: Handle) -> None: ...

    def shutdown(self) -> None:
        return None


class RayExecutor(TrialExecutor):
    """Trials as Ray tasks. Without ``address`` a local Ray starts with ``num_gpus``."""

    def __init__(self, address: str | None = None, *, num_gpus: int = 2,
                 num_cpus: int | None = None) -> None:
        import ray

        self._ray = ray
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            else:
                # Simulated GPUs are Ray resources like real ones; trials also need a CPU
                # slot each, so give the local node enough logical CPUs for them.
                ray.init(num_gpus=num_gpus, num_cpus=num_cpus or max(4, 2 * num_gpus),
                         include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
        self._specs: dict[Handle, TrialSpec] = {}
        self._lock = threading.Lock()

    def submit(self, spec: TrialSpec) -> Handle:
        from workers.ray_worker import submit_trial

        ref = submit_trial(spec)
        with self._lock:
            self._specs[ref] = spec
        return ref

    def wait(self, handles: list[Handle], timeout_s: float) -> list[tuple[Handle, TrialResult]]:
        from workers.ray_worker import collect_trial

        if not handles:
            return []
        ready, _ = self._ray.wait(list(handles), num_returns=len(handles), timeout=timeout_s)
        out = []
        for ref in ready:
            with self._lock:
                spec = self._specs.pop(ref)
            out.append((ref, collect_trial(ref, spec)))
        return out

    def capacity(self) -> int:
        resources: dict[str, float] = self._ray.cluster_resources()  # type: ignore[no-untyped-call]
        return int(resources.get("GPU", 0))

    def cancel(self, handle: Handle) -> None:
        # force: the worker process dies, and its engine with it (PR_SET_PDEATHSIG).
        self._ray.cancel(handle, force=True)

    def shutdown(self) -> None:
        self._ray.shutdown()


class VirtualExecutor(TrialExecutor):
    """Simulated-engine trials in virtual time, on a small thread pool in this process."""

    def __init__(self, num_gpus: int = 2) -> None:
        self._gpus = num_gpus
        self._pool = cf.ThreadPoolExecutor(max_workers=num_gpus, thread_name_prefix="vtrial")
        self._ids = itertools.count()
        self._futures: dict[Handle, cf.Future[TrialResult]] = {}

    def submit(self, spec: TrialSpec) -> Handle:
        from workers.sim_trial import run_virtual_trial

        handle = next(self._ids)
        self._futures[handle] = self._pool.submit(run_virtual_trial, spec, per_request=False)
        return handle

    def wait(self, handles: list[Handle], timeout_s: float) -> list[tuple[Handle, TrialResult]]:
        futures = {self._futures[h]: h for h in handles}
        done, _ = cf.wait(futures, timeout=timeout_s, return_when=cf.FIRST_COMPLETED)
        out = []
        for future in done:
            handle = futures[future]
            del self._futures[handle]
            out.append((handle, future.result()))
        return out

    def capacity(self) -> int:
        return self._gpus

    def cancel(self, handle: Handle) -> None:
        future = self._futures.pop(handle, None)
        if future is not None:
            future.cancel()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


EXECUTORS = ("ray", "virtual")


def make_executor(kind: str, *, num_gpus: int = 2, address: str | None = None) -> TrialExecutor:
    if kind == "ray":
        return RayExecutor(address, num_gpus=num_gpus)
    if kind == "virtual":
        return VirtualExecutor(num_gpus)
    raise ValueError(f"unknown executor {kind!r}; valid: {', '.join(EXECUTORS)}")
