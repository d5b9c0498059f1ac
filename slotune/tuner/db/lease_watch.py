"""When a sweep's lease may be taken over: its heartbeat seen standing still for the stale
window, timed on the taker's own monotonic clock.

A coordinator's heartbeat is a stored time, written by whatever clock the database uses
(Postgres' own; on SQLite, the writer's host clock). Comparing that time with the
reader's clock ("older than 60 s?") trusts two clocks to agree: a reader ten minutes fast
sees every lease as stale and takes live sweeps; a holder ten minutes slow looks dead to
everyone. So no wall clock decides a takeover. A would-be taker remembers what it saw of
each lease (holder, epoch, heartbeat) and when, by its own :func:`time.monotonic`; the
lease is stale once the taker has seen the very same values for the whole window. Any
heartbeat changes the values and starts the window again, whichever clock wrote it.

The takeover itself is conditional on those values (:meth:`Store.claim_sweep
<slotune.tuner.db.store.Store.claim_sweep>`), so a heartbeat that lands between the look and the
claim wins. The cost: a taker that has just started watches a whole window before it
takes anything over, so a dead holder's sweep waits between one and two windows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

__all__ = ["LeaseSighting", "SilenceWatch"]


@dataclass(frozen=True, slots=True)
class LeaseSighting:
    """What a taker saw of a running sweep's lease: any change is a sign of life."""

    holder: str | None
    epoch: int
    heartbeat_at: datetime | None


class SilenceWatch:
    """How long each lease has been seen unchanged, on this process's monotonic clock.

    Thread-safe: one per :class:`~slotune.tuner.db.store.Store`, shared by its callers.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[int, tuple[LeaseSighting, float]] = {}
        self._lock = threading.Lock()

    def silent_for(self, sweep_id: int, sighting: LeaseSighting) -> float:
        """Seconds ``sighting`` has been seen unchanged (0.0 the first time, or after a
        change: the window starts now)."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(sweep_id)
            if seen is None or seen[0] != sighting:
                self._seen[sweep_id] = (sighting, now)
                return 0.0
            return now - seen[1]

    def forget(self, sweep_id: int) -> None:
        with self._lock:
            self._seen.pop(sweep_id, None)

    def keep_only(self, sweep_ids: Iterable[int]) -> None:
        """Drop what was seen of sweeps no longer running (finished, taken, cancelled)."""
        keep = set(sweep_ids)
        with self._lock:
            for sweep_id in [s for s in self._seen if s not in keep]:
                del self._seen[sweep_id]
