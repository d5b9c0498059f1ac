"""The trial launcher: one sweep's trials on the executor, within its share of the GPUs.

Launching is its own part of the coordinator, apart from what to try (the strategy),
whether to go on (the budget) and what to store (the runner):

* :class:`GpuShare` splits one coordinator's GPUs fairly between the sweeps it runs;
* :class:`TrialLauncher` reserves a spec's GPUs in that share, submits it, knows what is
  in flight and gives the GPUs back as results come in;
* :func:`retry_as` decides, by failure class and never by message text, whether a finished
  attempt says something about the configuration or is to be run again; an input error
  (:data:`~slotune.workers.contracts.INPUT_FAILURES`) says neither, and stops the sweep
  (:class:`InputFailure`).

Nothing here touches the database, so each part is tested with the virtual executor alone.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from slotune.tuner.sweep.executors import TrialExecutor
from slotune.workers.contracts import INPUT_FAILURES, TRANSIENT_FAILURES, TrialResult, TrialSpec
from slotune.workers.loadgen.result import slotune_fields

MAX_ATTEMPTS = 3
"""A configuration whose attempt said nothing about it is run this many times in all."""

T = TypeVar("T")


class InputFailure(Exception):
    """A trial could not read the sweep's input (its workload's file): every trial would
    fail the same way, so the sweep stops with the file's message, nothing retried."""


class GpuShare:
    """GPUs shared fairly between the sweeps one coordinator runs at once.

    A sweep may hold at most its fair share (``gpus`` ÷ active sweeps, at least one
    trial's worth) while others wait, and everything when it runs alone.
    """

    def __init__(self, gpus: int) -> None:
        self.gpus = max(1, gpus)
        self._held: dict[int, int] = {}
        self._active: set[int] = set()
        self._lock = threading.Lock()

    def join(self, sweep_id: int) -> None:
        with self._lock:
            self._active.add(sweep_id)
            self._held.setdefault(sweep_id, 0)

    def leave(self, sweep_id: int) -> None:
        with self._lock:
            self._active.discard(sweep_id)
            self._held.pop(sweep_id, None)

    def active(self) -> int:
        """How many sweeps share the GPUs now."""
        with self._lock:
            return len(self._active)

    def acquire(self, sweep_id: int, gpus: int) -> bool:
        with self._lock:
            if not self._fits(sweep_id, gpus):
                return False
            self._held[sweep_id] = self._held.get(sweep_id, 0) + gpus
            return True

    def take(self, sweep_id: int, gpus: int) -> None:
        """Hold ``gpus`` even over the share: a retry of an attempt that held them a moment
        ago (it must not queue behind the sweep's own new proposals)."""
        with self._lock:
            self._held[sweep_id] = self._held.get(sweep_id, 0) + gpus

    def could_fit(self, sweep_id: int, gpus: int) -> bool:
        """Whether an acquire of ``gpus`` would succeed now (without taking them)."""
        with self._lock:
            return self._fits(sweep_id, gpus)

    def _fits(self, sweep_id: int, gpus: int) -> bool:
        """Free GPUs for it, within the sweep's fair share (caller holds the lock)."""
        used = sum(self._held.values())
        fair = max(gpus, self.gpus // max(1, len(self._active)))
        return used + gpus <= self.gpus and self._held.get(sweep_id, 0) + gpus <= fair

    def release(self, sweep_id: int, gpus: int) -> None:
        with self._lock:
            self._held[sweep_id] = max(0, self._held.get(sweep_id, 0) - gpus)


_DISCARDED = "client-bound: the load generator could not keep its schedule"


def distorted(result: TrialResult) -> bool:
    """An ok run that failed its gate while the client itself was overloaded."""
    return (result.status == "ok" and not result.gate_passed
            and bool(slotune_fields(result.metrics).get("client_bound")))


def discarded(result: TrialResult) -> TrialResult:
    """The distorted run, recorded as a failed attempt that says why (then retried)."""
    lag = (slotune_fields(result.metrics).get("send_lag_ms") or {}).get("p99")
    detail = f" (p99 send lag {lag:.1f} ms)" if isinstance(lag, int | float) else ""
    return TrialResult.model_validate({
        **result.model_dump(), "status": "failed", "failure": "client_bound",
        "objective": 0.0, "constraints": {"fits": -1.0},
        "failure_message": f"{_DISCARDED}{detail}; measurement discarded and retried",
    })


def retry_as(result: TrialResult, attempt: int) -> TrialResult | None:
    """The failed attempt to record when ``result`` is to be run again; None: it stands.

    Run again: a lost worker or a crashed client (:data:`TRANSIENT_FAILURES`), and a run
    the load generator says it distorted (its zero may be the machine's, not the
    configuration's) — each at most :data:`MAX_ATTEMPTS` times in all.
    """
    if attempt >= MAX_ATTEMPTS:
        return None
    if distorted(result):
        return discarded(result)
    if result.failure in TRANSIENT_FAILURES:
        return result
    return None


def gpu_hours(result: TrialResult, gpus: int) -> float:
    return result.timings.total_s * max(1, gpus) / 3600.0


@dataclass
class Launched(Generic[T]):
    """A trial in flight: what it runs, and the caller's note of what it is for."""

    spec: TrialSpec
    tag: T


class TrialLauncher(Generic[T]):
    """Submits one sweep's specs within its GPU share; each carries a caller's ``tag``."""

    def __init__(self, executor: TrialExecutor, share: GpuShare, sweep_id: int) -> None:
        self.executor = executor
        self.share = share
        self.sweep_id = sweep_id
        self._in_flight: dict[Hashable, Launched[T]] = {}

    def __len__(self) -> int:
        return len(self._in_flight)

    def tags(self) -> list[T]:
        return [launched.tag for launched in self._in_flight.values()]

    def has_room(self) -> bool:
        """Whether one more GPU's worth fits in the sweep's share now."""
        return self.share.could_fit(self.sweep_id, 1)

    def never_placed(self, spec: TrialSpec) -> str | None:
        """Why ``spec`` can never run here (None: it can, now or once GPUs free up)."""
        reason = self.executor.unplaceable(spec)
        if reason is None and spec.device == "gpu" and spec.gpus > self.share.gpus:
            reason = (f"needs {spec.gpus} GPUs; this coordinator schedules onto "
                      f"{self.share.gpus}")
        return reason

    def reserve(self, spec: TrialSpec) -> bool:
        """Take the spec's GPUs in the share; False: they are not free (nothing taken)."""
        return self.share.acquire(self.sweep_id, spec.gpus)

    def unreserve(self, spec: TrialSpec) -> None:
        """Give back what :meth:`reserve` took, for a spec that was not submitted."""
        self.share.release(self.sweep_id, spec.gpus)

    def submit(self, spec: TrialSpec, tag: T) -> None:
        """Run a spec whose GPUs :meth:`reserve` took."""
        self._in_flight[self.executor.submit(spec)] = Launched(spec, tag)

    def resubmit(self, spec: TrialSpec, tag: T) -> None:
        """Run a retried attempt at once, on the GPUs its previous attempt just gave back."""
        self.share.take(self.sweep_id, spec.gpus)
        self.submit(spec, tag)

    def wait(self, timeout_s: float) -> list[tuple[Launched[T], TrialResult]]:
        """What finished within ``timeout_s``; their GPUs are given back.
        :class:`InputFailure` when one could not read the sweep's input."""
        if not self._in_flight:
            return []
        out = []
        for handle, result in self.executor.wait(list(self._in_flight), timeout_s=timeout_s):
            launched = self._in_flight.pop(handle, None)
            if launched is None:
                continue  # cancelled meanwhile
            self.share.release(self.sweep_id, launched.spec.gpus)
            if result.failure in INPUT_FAILURES:
                raise InputFailure(result.failure_message or result.failure)
            out.append((launched, result))
        return out

    def cancel_all(self) -> None:
        """Stop everything in flight (the engines die with their trials)."""
        for handle, launched in list(self._in_flight.items()):
            self.executor.cancel(handle)
            self.share.release(self.sweep_id, launched.spec.gpus)
        self._in_flight.clear()

