"""Leases: which coordinator runs a sweep, and the fencing every write under a lease passes.

Each claim raises the sweep's ``lease_epoch`` and hands the claimer a
:class:`~slotune.tuner.db.records.Lease`; :func:`hold` locks the sweep's row for a transaction
on the condition that the lease is still current, so a write under a lease taken over
since is refused (:class:`~slotune.tuner.db.errors.LeaseLost`). A running sweep changes hands when
its holder's lease was seen standing still on this process's monotonic clock
(:mod:`slotune.tuner.db.lease_watch`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, or_, select, true, update
from sqlalchemy.orm import Session, sessionmaker

from slotune.tuner.db._repository import (
    Repository,
    get_row,
    rowcount,
    sweep_record,
    sweep_with_workload,
)
from slotune.tuner.db.errors import Conflict, LeaseLost
from slotune.tuner.db.lease_watch import LeaseSighting, SilenceWatch
from slotune.tuner.db.models import Sweep, SweepTrial
from slotune.tuner.db.records import ExecutorChoice, Lease, SweepRecord
from slotune.tuner.db.session import db_now

__all__ = ["LeaseRepository", "hold", "hold_for_trial", "same_sweep"]


class LeaseRepository(Repository):
    """Claims, takeovers and heartbeats of sweeps."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        super().__init__(sessions)
        self._watch = SilenceWatch()
        """What this store saw of other coordinators' leases, and since when."""

    def claim_sweep(self, sweep_id: int, coordinator: str, *,
                    stale_after_s: float | None = None,
                    executor: ExecutorChoice | None = None) -> SweepRecord | None:
        """Make ``coordinator`` the one running this sweep; None if someone else holds it.

        A queued sweep is claimed (→ running). A running one is claimed again by the
        same coordinator (a restart under the same id), or taken over from another: at
        once with ``stale_after_s=0`` (the user knows its coordinator died), else once
        this store has seen its lease stand still — holder, epoch and heartbeat unchanged
        — for ``stale_after_s`` seconds of this process's monotonic clock
        (:mod:`slotune.tuner.db.lease_watch`; no host's wall clock decides). The first call on a
        lease therefore only starts watching it: call again after the window. Every
        claim starts a new lease (the record's :attr:`~SweepRecord.lease`): writes under
        any earlier one are refused from now on. A sweep that never recorded its
        executor records ``executor`` with the claim.
        """
        with self._session() as session:
            silent = None
            if stale_after_s:
                row = session.execute(select(Sweep.status, *_SIGHTING_COLUMNS)
                                      .where(Sweep.id == sweep_id)).one_or_none()
                if row is not None and row.status == "running" \
                        and row.claimed_by != coordinator:
                    silent = self._silent(sweep_id, _sighting(row), stale_after_s)
            return self._claim(session, sweep_id, coordinator, forced=stale_after_s == 0,
                               silent=silent, executor=executor)

    def claim_next_sweep(self, coordinator: str, *, stale_after_s: float | None = None,
                         executor: ExecutorChoice | None = None) -> SweepRecord | None:
        """Claim the oldest queued sweep (or orphaned running one, see :meth:`claim_sweep`)
        that ``executor`` may run: one recorded on another kind of executor is left for
        a resume that names it (its trials would be measured another way). The executor
        is matched in the query, so no number of other sweeps hides a claimable one."""
        here = _runs_on(executor)
        with self._session() as session:
            queued = session.execute(
                select(Sweep.id, Sweep.created_at).where(Sweep.status == "queued", here)
                .order_by(Sweep.created_at, Sweep.id).limit(_CLAIM_BATCH)).all()
            candidates: list[tuple[datetime, int, LeaseSighting | None]] = [
                (created, sweep_id, None) for sweep_id, created in queued]
            if stale_after_s is not None:
                running = session.execute(
                    select(Sweep.id, Sweep.created_at, *_SIGHTING_COLUMNS,
                           case((here, 1), else_=0).label("here"))
                    .where(Sweep.status == "running")).all()
                self._watch.keep_only(row.id for row in running)
                for row in running:
                    if not row.here:
                        continue
                    sighting = _sighting(row)
                    if stale_after_s == 0 or self._silent(row.id, sighting, stale_after_s):
                        candidates.append((row.created_at, row.id, sighting))
        candidates.sort(key=lambda candidate: candidate[:2])
        for _, sweep_id, silent in candidates:  # another coordinator may win: try the next
            with self._session() as session:
                claimed = self._claim(session, sweep_id, coordinator,
                                      forced=stale_after_s == 0, silent=silent,
                                      executor=executor)
            if claimed is not None:
                return claimed
        return None

    def _silent(self, sweep_id: int, sighting: LeaseSighting,
                stale_after_s: float) -> LeaseSighting | None:
        """``sighting`` when this store has seen it unchanged for the window, else None."""
        return sighting if self._watch.silent_for(sweep_id, sighting) >= stale_after_s \
            else None

    def _claim(self, session: Session, sweep_id: int, coordinator: str, *, forced: bool,
               silent: LeaseSighting | None,
               executor: ExecutorChoice | None) -> SweepRecord | None:
        """One conditional UPDATE: queued, or running and ours, or (taking over) running
        under exactly the lease seen silent — a heartbeat since makes it match nothing."""
        now = db_now(session)
        takeover: list[ColumnElement[bool]] = [Sweep.claimed_by == coordinator]
        if forced:
            takeover.append(true())
        elif silent is not None:
            takeover.append(_unchanged(silent))
        claimable = or_(Sweep.status == "queued",
                        and_(Sweep.status == "running", or_(*takeover)))
        claimed = rowcount(session, update(Sweep).where(Sweep.id == sweep_id, claimable)
                            .values(status="running", claimed_by=coordinator,
                                    heartbeat_at=now, lease_epoch=Sweep.lease_epoch + 1,
                                    started_at=func.coalesce(Sweep.started_at, now)))
        sweep, name = sweep_with_workload(session, sweep_id)
        if not claimed:
            return None
        self._watch.forget(sweep_id)
        if sweep.executor is None and executor is not None:
            sweep.executor = executor.model_dump()
            session.flush()
        return sweep_record(sweep, name)

    def heartbeat_sweep(self, lease: Lease) -> None:
        """Say the lease's holder is still running the sweep.

        :class:`LeaseLost` when the sweep was claimed again since (taken over, resumed
        elsewhere); :class:`Conflict` when it is no longer running (cancelled, finished).
        Either way the coordinator should stop.
        """
        with self._session() as session:
            hold(session, lease)
            done = rowcount(session, update(Sweep).where(
                Sweep.id == lease.sweep_id, Sweep.status == "running",
            ).values(heartbeat_at=db_now(session)))
            if not done:
                sweep, _ = sweep_with_workload(session, lease.sweep_id)
                raise Conflict(f"sweep {lease.sweep_id} is {sweep.status}")


def hold(session: Session, lease: Lease) -> None:
    """Lock the sweep's row for this transaction if ``lease`` is still current, else
    :class:`LeaseLost`. The lock is an UPDATE that changes nothing: it makes a concurrent
    claim wait for this transaction (Postgres row lock; SQLite's one writer at a time)."""
    held = rowcount(session, update(Sweep).where(
        Sweep.id == lease.sweep_id, Sweep.claimed_by == lease.holder,
        Sweep.lease_epoch == lease.epoch).values(lease_epoch=Sweep.lease_epoch))
    if not held:
        sweep, _ = sweep_with_workload(session, lease.sweep_id)
        raise LeaseLost(f"sweep {lease.sweep_id} was claimed again: it is held by "
                        f"{sweep.claimed_by!r} under lease {sweep.lease_epoch}, not by "
                        f"{lease.holder!r} under lease {lease.epoch}")


def same_sweep(lease: Lease, sweep_id: int) -> Lease:
    if lease.sweep_id != sweep_id:
        raise Conflict(f"a lease on sweep {lease.sweep_id} does not cover sweep {sweep_id}")
    return lease


def hold_for_trial(session: Session, lease: Lease | None, trial_id: int) -> None:
    if lease is not None:
        trial = get_row(session, SweepTrial, trial_id, "trial")
        hold(session, same_sweep(lease, trial.sweep_id))


_CLAIM_BATCH = 20
"""Queued sweeps tried per claim (all of them this executor's to run): more than enough
for the coordinators that race for them."""

_SIGHTING_COLUMNS = (Sweep.claimed_by, Sweep.lease_epoch, Sweep.heartbeat_at)


def _sighting(row: Any) -> LeaseSighting:
    return LeaseSighting(holder=row.claimed_by, epoch=row.lease_epoch,
                         heartbeat_at=row.heartbeat_at)


def _unchanged(seen: LeaseSighting) -> ColumnElement[bool]:
    """The sweep's lease is still the one ``seen``: same holder, epoch and heartbeat."""
    return and_(
        Sweep.claimed_by.is_(None) if seen.holder is None else Sweep.claimed_by == seen.holder,
        Sweep.lease_epoch == seen.epoch,
        Sweep.heartbeat_at.is_(None) if seen.heartbeat_at is None
        else Sweep.heartbeat_at == seen.heartbeat_at)


def _runs_on(executor: ExecutorChoice | None) -> ColumnElement[bool]:
    """The sweep may run on ``executor``: it recorded none (SQL NULL or JSON null) or the
    same kind. In SQL (``JSON_EXTRACT`` on SQLite, ``->>`` on Postgres), so the filter
    comes before any LIMIT."""
    if executor is None:
        return true()
    kind = Sweep.executor["kind"].as_string()
    return or_(kind.is_(None), kind == executor.kind)
