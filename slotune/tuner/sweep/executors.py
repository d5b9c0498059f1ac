"""What runs a trial: the coordinator's view of its workers.

Contract (:class:`TrialExecutor`): :meth:`submit` starts a trial and returns a handle at
once; :meth:`wait` returns the trials that finished within a timeout (each exactly
once, as a :class:`~slotune.workers.contracts.TrialResult` — a lost worker is a ``worker_lost``
result, never an exception); :meth:`gpu_count` is how many GPUs it schedules onto;
:meth:`cancel` ends a trial (its engine dies with it); :meth:`unplaceable` says why a
trial could never be placed on what the executor can ever offer (None: it can, or may
once a node joins). One coordinator thread per sweep may call an executor;
implementations are thread-safe for that use.

**What can ever be placed.** A trial needs ``spec.gpus`` GPUs on one node (a replica's
devices, TP × PP × DP: :func:`~slotune.workers.contracts.replica_gpus`) — of its GPU type where
the cluster advertises types — or as many CPU cores for vLLM's CPU build. The virtual executor
offers its ``num_gpus``; a local Ray its one node; a Ray cluster the largest node alive,
or ``$SLOTUNE_MAX_NODE_GPUS`` where an autoscaler may add a larger node type than any
running now (Ray does not tell a driver its autoscaler's node types) — of any GPU type,
a type no running node has included (a worker group scaled to zero). A trial bigger
than that would wait in Ray's queue forever.

* :class:`RayExecutor` — trials as Ray tasks with ``num_gpus = spec.gpus``
  (a local Ray with simulated GPUs by default; a cluster with ``RAY_ADDRESS``). A watch
  thread knocks on the Ray head's GCS port every second: once it has not answered for
  :data:`HEAD_LOST_AFTER_S`, every call raises :class:`ExecutorLost` (Ray itself would
  say nothing for a minute and then end the process from its core worker). Every call
  that talks to the head runs through :meth:`_HeadWatch.ask`, so none blocks on a dead one.
  It remembers, per model and GPU type, the node of the last trial that finished there
  (any result that names its node: ok, or failed after booting), and submits the next
  trial of that model to prefer that node while it has the GPUs free — the weights are
  in its page cache — and to go anywhere else at once when it has not
  (:func:`slotune.workers.trial.ray_worker.trial_options`). Which trial goes next is not its
  concern: that stays the coordinator's (fair share); the preference only changes where.
* :class:`VirtualExecutor` — trials of the simulated engine in virtual time, in this
  process (search logic, benchmarks, quick demos): milliseconds per trial.
"""

from __future__ import annotations

import abc
import concurrent.futures as cf
import contextlib
import functools
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from slotune.tuner.db.records import ExecutorChoice
from slotune.workers.contracts import TrialResult, TrialSpec

__all__ = ["HEAD_LOST_AFTER_S", "MAX_NODE_GPUS_ENV", "ExecutorLost", "Largest", "RayExecutor",
           "TrialExecutor", "VirtualExecutor", "declared_max_node_gpus", "make_executor"]

Handle = Hashable

HEAD_LOST_AFTER_S = 3.0
"""The Ray head unanswering this long is lost: a GCS restarting in place answers again
within a second; a dead head never does."""


class ExecutorLost(RuntimeError):
    """What runs the trials is gone (the Ray head died): no trial can be started, waited
    for or cancelled through it any more."""


MAX_NODE_GPUS_ENV = "SLOTUNE_MAX_NODE_GPUS"
"""GPUs of the largest node a Ray cluster may ever have (its autoscaler's largest type)."""


def declared_max_node_gpus() -> int | None:
    """``$SLOTUNE_MAX_NODE_GPUS`` as a number (None when unset); ``ValueError`` naming the
    variable when it is not a whole number of at least 1."""
    text = os.environ.get(MAX_NODE_GPUS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{MAX_NODE_GPUS_ENV}={text!r}: give the GPUs of the largest node "
                         "(a whole number, at least 1)")
    return int(text)


@dataclass(frozen=True)
class Largest:
    """What the largest node (or the whole virtual cluster) offers one trial."""

    gpus: int
    cpus: int
    gpu_types: dict[str, int]
    """GPUs of each advertised type on the node offering most of it (typed clusters)."""
    where: str
    """How to say it: "the largest node", "the virtual executor (--gpus)" …"""
    unseen_type_gpus: int = 0
    """GPUs a type no live node advertises may still get: where an autoscaler may add a
    node (``$SLOTUNE_MAX_NODE_GPUS`` declared), a worker group scaled to zero is not gone."""

    def refuses(self, spec: TrialSpec, gpu_type: str | None = None) -> str | None:
        """Why ``spec`` can never be placed here (None: it can)."""
        if spec.device == "cpu":
            if spec.gpus > self.cpus:
                return f"needs {spec.gpus} CPU cores on one node; {self.where} offers {self.cpus}"
            return None
        if gpu_type is not None:
            offered = self.gpu_types.get(gpu_type, self.unseen_type_gpus)
            if spec.gpus > offered:
                return f"needs {spec.gpus} × {gpu_type}; {self.where} offers {offered}"
        if spec.gpus > self.gpus:
            return f"needs {spec.gpus} GPUs on one node; {self.where} offers {self.gpus}"
        return None


class TrialExecutor(abc.ABC):
    """Runs trials somewhere; see the module docstring for the contract."""

    kind: str
    """The name ``make_executor`` knows it by; a sweep records it (:meth:`choice`)."""

    def choice(self) -> ExecutorChoice:
        """What a sweep records of where its trials ran: this kind, these GPUs."""
        return ExecutorChoice(kind=self.kind, gpus=self.gpu_count())

    @abc.abstractmethod
    def submit(self, spec: TrialSpec) -> Handle: ...

    @abc.abstractmethod
    def wait(self, handles: list[Handle], timeout_s: float) -> list[tuple[Handle, TrialResult]]:
        """The finished ones among ``handles`` (possibly none before the timeout)."""

    @abc.abstractmethod
    def gpu_count(self) -> int:
        """GPUs trials can be scheduled onto."""

    @abc.abstractmethod
    def cancel(self, handle: Handle) -> None: ...

    def unplaceable(self, spec: TrialSpec) -> str | None:
        """Why ``spec`` could never be placed (None: it can, or might later)."""
        return None

    def check(self) -> None:
        """:class:`ExecutorLost` once what runs the trials is gone; else nothing."""
        return None

    def shutdown(self) -> None:
        return None


class RayExecutor(TrialExecutor):
    """Trials as Ray tasks. Without ``address`` a local Ray starts with ``num_gpus``."""

    kind = "ray"

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
        self._warm: dict[tuple[str, str], str] = {}
        """(model, GPU type) → the Ray node that last finished a trial of it."""
        self._lock = threading.Lock()
        self._local = not address
        self._largest: tuple[float, Largest] | None = None
        self._head = _HeadWatch(ray.get_runtime_context().gcs_address)

    def check(self) -> None:
        if self._head.lost is not None:
            raise ExecutorLost(self._head.lost)

    def submit(self, spec: TrialSpec) -> Handle:
        from slotune.workers.trial.ray_worker import submit_trial

        self.check()
        with self._lock:
            warm_node = self._warm.get(_warm_key(spec))
        ref: Handle = self._head.ask(lambda: submit_trial(spec, prefer_node=warm_node))
        with self._lock:
            self._specs[ref] = spec
        return ref

    def wait(self, handles: list[Handle], timeout_s: float) -> list[tuple[Handle, TrialResult]]:
        from slotune.workers.trial.ray_worker import collect_trial

        self.check()
        if not handles:
            return []
        ready, _ = self._head.ask(lambda: self._ray.wait(
            list(handles), num_returns=len(handles), timeout=timeout_s))
        self.check()  # a dead head's trials may look merely unfinished to ray.wait
        out = []
        for ref in ready:
            with self._lock:
                spec = self._specs.pop(ref)
            result: TrialResult = self._head.ask(functools.partial(collect_trial, ref, spec))
            if result.node is not None:
                with self._lock:
                    self._warm[_warm_key(spec)] = result.node
            out.append((ref, result))
        return out

    def gpu_count(self) -> int:
        self.check()
        resources: dict[str, float] = self._head.ask(self._ray.cluster_resources)
        return int(resources.get("GPU", 0))

    def cancel(self, handle: Handle) -> None:
        # force: the worker process dies, and its engine with it (PR_SET_PDEATHSIG). With
        # the head gone its workers are gone too: nothing to cancel.
        if self._head.lost is None:
            self._ray.cancel(handle, force=True)

    def unplaceable(self, spec: TrialSpec) -> str | None:
        from slotune.workers.trial.ray_worker import (
            GPU_TYPE_PREFIX,
            gpu_type_resource,
            uses_gpu_types,
        )

        resource = gpu_type_resource(spec) if uses_gpu_types() else None
        gpu_type = resource.removeprefix(GPU_TYPE_PREFIX) if resource else None
        return self.largest().refuses(spec, gpu_type)

    def largest(self) -> Largest:
        """The largest node alive (nodes join and leave: looked at again every 10 s)."""
        from slotune.workers.trial.ray_worker import GPU_TYPE_PREFIX

        now = time.monotonic()
        if self._largest is not None and now - self._largest[0] < 10.0:
            return self._largest[1]
        nodes = [n.get("Resources", {}) for n in self._head.ask(self._ray.nodes)
                 if n.get("Alive")]
        gpus = max((int(r.get("GPU", 0)) for r in nodes), default=0)
        cpus = max((int(r.get("CPU", 0)) for r in nodes), default=0)
        types: dict[str, int] = {}
        for resources in nodes:
            for key, value in resources.items():
                if key.startswith(GPU_TYPE_PREFIX):
                    name = key.removeprefix(GPU_TYPE_PREFIX)
                    types[name] = max(types.get(name, 0), int(value))
        where = "this machine's local Ray" if self._local else "the largest node"
        declared = None
        with contextlib.suppress(ValueError):  # a bad value is refused at the edge instead
            declared = declared_max_node_gpus()
        unseen = 0
        if declared is not None and not self._local:
            gpus = max(gpus, declared)
            types = {key: max(value, gpus) for key, value in types.items()}
            unseen = declared
            where = f"the largest node ({MAX_NODE_GPUS_ENV})"
        largest = Largest(gpus=gpus, cpus=cpus, gpu_types=types, where=where,
                          unseen_type_gpus=unseen)
        self._largest = (now, largest)
        return largest

    def shutdown(self) -> None:
        self._head.stop()
        self._ray.shutdown()  # with the head lost, Ray's own disconnect takes a few seconds


def _warm_key(spec: TrialSpec) -> tuple[str, str]:
    """Trials that read the same weights onto the same kind of device."""
    return spec.model, "cpu" if spec.device == "cpu" else spec.gpu


class _HeadWatch:
    """Knocks on the Ray head's GCS port every second, in a daemon thread; ``lost`` says
    why once it has not answered for :data:`HEAD_LOST_AFTER_S`."""

    def __init__(self, gcs_address: str) -> None:
        host, _, port = gcs_address.rpartition(":")
        self._where = (host.strip("[]"), int(port))
        self.lost: str | None = None
        self._stop = threading.Event()
        self._decided = threading.Event()
        threading.Thread(target=self._watch, name="ray-head-watch", daemon=True).start()

    def ask(self, question: Callable[[], Any]) -> Any:
        """``question()`` — anything that talks to the head — or :class:`ExecutorLost` as
        soon as the head is lost. Ray's calls to a dead head block for a minute or fail
        with whatever the socket said ("Broken pipe"): the call runs in a daemon thread
        this one stops waiting for, and its error is the head's loss once the watch
        decides it was."""
        answer: dict[str, Any] = {}
        done = threading.Event()

        def ask() -> None:
            try:
                answer["value"] = question()
            except BaseException as exc:  # handed to the caller below
                answer["error"] = exc
            finally:
                done.set()

        threading.Thread(target=ask, name="ray-head-call", daemon=True).start()
        while not done.wait(0.5):
            if self.lost is not None:
                raise ExecutorLost(self.lost)
        if "error" in answer:
            if not self._answers() and self._decided.wait(HEAD_LOST_AFTER_S + 2.0):
                raise ExecutorLost(self.lost or "the Ray head is gone") from answer["error"]
            raise answer["error"]
        return answer["value"]

    def _answers(self) -> bool:
        try:
            with socket.create_connection(self._where, timeout=1.0):
                return True
        except OSError:
            return False

    def _watch(self) -> None:
        silent_since: float | None = None
        while not self._stop.wait(1.0):
            if self._answers():
                silent_since = None
            else:
                now = time.monotonic()
                silent_since = silent_since or now
                if now - silent_since >= HEAD_LOST_AFTER_S:
                    self.lost = (f"the Ray head stopped answering {HEAD_LOST_AFTER_S:g} s ago "
                                 "(its GCS is gone): no trial can run until it is back")
                    self._decided.set()
                    return

    def stop(self) -> None:
        self._stop.set()


class VirtualExecutor(TrialExecutor):
    """Simulated-engine trials in virtual time, on a small thread pool in this process."""

    kind = "virtual"

    def __init__(self, num_gpus: int = 2) -> None:
        self._gpus = num_gpus
        self._pool = cf.ThreadPoolExecutor(max_workers=num_gpus, thread_name_prefix="vtrial")
        self._ids = itertools.count()
        self._futures: dict[Handle, cf.Future[TrialResult]] = {}

    def submit(self, spec: TrialSpec) -> Handle:
        from slotune.workers.trial.virtual import run_virtual_trial

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

    def gpu_count(self) -> int:
        return self._gpus

    def unplaceable(self, spec: TrialSpec) -> str | None:
        return Largest(gpus=self._gpus, cpus=self._gpus, gpu_types={},
                       where=f"the virtual executor (--gpus {self._gpus})").refuses(spec)

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
