"""A sweep runner's writes under its lease: the outbox, database outages, a lost lease.

Every write a runner makes for its sweep carries the lease its claim returned, and the
database may be away (restarting) or answer that the sweep moved on. The
:class:`SweepRecorder` keeps what those answers mean in one place, so the runner's loop
reads three flags instead of catching storage errors at each write:

* a transient storage error (:data:`TRANSIENT_STORAGE_ERRORS`) is an *outage*: results
  wait in the :class:`~slotune.tuner.sweep.outbox.Outbox` and are written, in order, once it is back
  (one log line when it goes, one when it is back);
* :class:`~slotune.tuner.db.errors.LeaseLost` means another coordinator claimed the sweep: the
  runner's trials are stopped, what waits is dropped with a log line, and nothing more
  is written (``lease_lost``);
* a :class:`~slotune.tuner.db.errors.Conflict` on the sweep's own row under a valid lease means
  it was cancelled (``cancelled``).

The heartbeat is here too: it is one more write under the lease, and its answers are
these same three.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from slotune.tuner.db.errors import Conflict, LeaseLost, StorageUnavailable, describe
from slotune.tuner.db.records import Lease, TrialRecord
from slotune.tuner.db.store import Store
from slotune.tuner.sweep.outbox import Outbox, Step
from slotune.workers.contracts import KnobValue, TrialSpec

__all__ = ["HEARTBEAT_S", "TRANSIENT_STORAGE_ERRORS", "SweepRecorder"]

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0

TRANSIENT_STORAGE_ERRORS: tuple[type[Exception], ...] = (StorageUnavailable,)
"""The database (ours or Optuna's, the same server) is down or restarting: retry later.
Optuna's storage translates its errors as the store does (``slotune.tuner.db.optuna_storage``)."""


class SweepRecorder:
    """One runner's writes for ``sweep_id`` under ``lease`` (see the module docstring)."""

    def __init__(self, store: Store, sweep_id: int, lease: Lease, *, worker: str,
                 stop_trials: Callable[[], None]) -> None:
        self.store = store
        self.sweep_id = sweep_id
        self.lease = lease
        self.worker = worker
        """The coordinator that writes (rows name it as their worker)."""
        self._stop_trials = stop_trials
        # Finished trials whose recording waits for the database (it may be restarting):
        # each item is a queue of steps, run in order, each retried until it succeeds.
        self.outbox = Outbox(TRANSIENT_STORAGE_ERRORS, name=f"sweep {sweep_id}")
        self.unrecorded = 0
        """Search results asked for and measured, not stored yet (the budget counts them)."""
        self.outage: str | None = None
        self.lease_lost = False
        """Another coordinator took the sweep over: every write of this one stops."""
        self.cancelled = False
        self._last_beat = 0.0

    def start_trial(self, number: int, params: dict[str, KnobValue], spec: TrialSpec | None,
                    attempt: int) -> TrialRecord:
        """A search attempt's row, written at once (its trial waits for it, not the outbox)."""
        return self.store.start_trial(self.sweep_id, number=number, params=params, spec=spec,
                                      attempt=attempt, worker=self.worker, lease=self.lease)

    def add(self, *steps: Step) -> None:
        """Steps to run in order once the database answers (see :class:`Outbox`)."""
        self.outbox.add(*steps)

    def record(self, **fields: Any) -> None:
        """A trial row that is not the search's (a baseline, a repeat), via the outbox."""
        self.outbox.add(lambda: self.store.record_trial(
            self.sweep_id, **fields, worker=self.worker, lease=self.lease))

    def drain(self) -> bool:
        """Run what waits in the outbox; False while the database is still away."""
        try:
            outage = self.outbox.drain(stopped=lambda: self.lease_lost)
        except LeaseLost as exc:
            self.fenced_out(exc)
            return True
        if outage is not None:
            self.note_outage(outage)
            return False
        if self.outage is not None and not self.lease_lost:
            log.warning("sweep %s: the database is back; recorded what waited",
                        self.sweep_id)
            self.outage = None
        return True

    def store_progress(self, progress: dict[str, Any]) -> bool:
        """Write the sweep's progress; False when the lease is lost (publish nothing).
        An outage skips it: progress is rewritten whole at the next update."""
        if self.lease_lost:
            return False
        try:
            self.store.update_sweep(self.sweep_id, progress=progress, lease=self.lease)
        except LeaseLost as exc:
            self.fenced_out(exc)
            return False
        except Conflict:
            self.cancelled = True
        except TRANSIENT_STORAGE_ERRORS as exc:
            self.note_outage(exc)
        return True

    def beat(self, running: Iterable[int]) -> bool:
        """Heartbeat the sweep and its ``running`` trial rows (every :data:`HEARTBEAT_S`
        at most); False once the sweep is cancelled or its lease lost."""
        now = time.monotonic()
        if now - self._last_beat < HEARTBEAT_S and not self.cancelled:
            return True
        self._last_beat = now
        if self.lease_lost:
            return False
        try:
            self.store.heartbeat_sweep(self.lease)
        except TRANSIENT_STORAGE_ERRORS as exc:
            self.note_outage(exc)
            return True
        except LeaseLost as exc:
            self.fenced_out(exc)  # another coordinator owns it now: touch nothing of its
            return False
        except Conflict:  # cancelled (or finished) under this lease: stop, leave it resumable
            self.cancelled = True
            self._stop_trials()
            self.store.recover_orphans(self.sweep_id, lease=self.lease)
            return False
        try:
            for row_id in running:
                self.store.heartbeat_trial(row_id, lease=self.lease)
        except TRANSIENT_STORAGE_ERRORS as exc:
            self.note_outage(exc)
        except LeaseLost as exc:
            self.fenced_out(exc)
            return False
        return True

    def abandon(self, reason: str) -> None:
        """Leave the sweep failed and resumable (its running rows lost); best effort."""
        try:
            self.store.recover_orphans(self.sweep_id, lease=self.lease)
            self.store.update_sweep(self.sweep_id, status="failed", stop_reason=reason,
                                    lease=self.lease)
        except LeaseLost as exc:
            self.fenced_out(exc)
        except Exception:  # already failing: the original error is the one that matters
            log.exception("sweep %s: could not record the stop", self.sweep_id)

    def fenced_out(self, exc: LeaseLost) -> None:
        """The sweep was claimed again: stop its trials here, drop what waits, write nothing."""
        if not self.lease_lost:
            log.warning("sweep %s: this coordinator lost its lease (%s); stopping without "
                        "touching the sweep, %d unrecorded result(s) dropped",
                        self.sweep_id, exc, self.unrecorded + len(self.outbox))
        self.lease_lost = self.cancelled = True
        self._stop_trials()
        self.outbox.clear()

    def note_outage(self, exc: Exception) -> None:
        reason = describe(exc)
        if self.outage is None:
            log.warning("sweep %s: database unavailable (%s); results are kept and written "
                        "once it is back", self.sweep_id, reason[:200])
        self.outage = reason
