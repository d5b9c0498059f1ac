"""The API's read path: workload snapshots, and what is computed from them, cached until
the workload's sweeps change.

The frontier, a sweep's report and a capacity plan are functions of one workload's
snapshot (:mod:`slotune.tuner.db.snapshot`). Recomputing them per request made the frontier cost
hundreds of milliseconds at one client and seconds under many. Here each request asks
one cheap question — the workload's :func:`~slotune.tuner.db.snapshot.change_key`, one indexed
query — and is answered from a bounded in-process LRU keyed by (what, change key): any
write to the workload, its sweeps, trials or cards gives a new key, so an answer is never
older than the request that reads it, and the old entries age out.

Thread-safe (FastAPI runs sync handlers in a thread pool): concurrent requests that miss
the same key wait for one computation instead of each starting their own (a stampede of
200 readers after a write computes once). An error is handed to the requests waiting on
that computation and not cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from slotune.tuner.db.snapshot import WorkloadSnapshot, change_key, load_workload, workload_of_sweep
from slotune.tuner.db.store import Store

__all__ = ["DEFAULT_ENTRIES", "ReadCache"]

T = TypeVar("T")

DEFAULT_ENTRIES = 256
"""Entries kept (snapshots and derived answers together); least recently used go first."""


class _Flight:
    """One computation in progress: its waiters block on ``done``."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class ReadCache:
    """Snapshots of workloads and values derived from them, keyed by their change key."""

    def __init__(self, store: Store, *, max_entries: int = DEFAULT_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._store = store
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._flights: dict[Hashable, _Flight] = {}
        self._sweep_workloads: dict[int, str] = {}
        self.computed = 0
        """How many values were computed (misses), for tests and the benchmark."""

    def snapshot(self, workload: str) -> WorkloadSnapshot:
        """The workload's current snapshot (:class:`~slotune.tuner.db.errors.NotFound`)."""
        key = change_key(self._store, workload)
        return self._snapshot_at(workload, key)

    def derived(self, workload: str, what: Hashable,
                compute: Callable[[WorkloadSnapshot], T]) -> T:
        """``compute(snapshot)`` for the workload's current snapshot, cached under ``what``
        (everything else the value depends on: the query's parameters)."""
        key = change_key(self._store, workload)
        value: T = self._get(("derived", what, key),
                             lambda: compute(self._snapshot_at(workload, key)))
        return value

    def workload_of_sweep(self, sweep_id: int) -> str:
        """The workload a sweep measured (it never changes: remembered once seen)."""
        with self._lock:
            known = self._sweep_workloads.get(sweep_id)
        if known is not None:
            return known
        name = workload_of_sweep(self._store, sweep_id)
        with self._lock:
            if len(self._sweep_workloads) >= self._max * 16:
                self._sweep_workloads.clear()  # bounded: a re-read costs one query
            self._sweep_workloads[sweep_id] = name
        return name

    def _snapshot_at(self, workload: str, key: Hashable) -> WorkloadSnapshot:
        # Read after its key (the caller's): the snapshot is at least as new as the key.
        snapshot: WorkloadSnapshot = self._get(("snapshot", key),
                                               lambda: load_workload(self._store, workload))
        return snapshot

    def _get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.value
        try:
            flight.value = compute()
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[key]
                if flight.error is None:
                    self.computed += 1
                    self._entries[key] = flight.value
                    while len(self._entries) > self._max:
                        self._entries.popitem(last=False)
            flight.done.set()
        return flight.value
