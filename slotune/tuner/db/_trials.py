"""Trials: every boot a sweep paid for, from start to result, lost ones and confirmations."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

from sqlalchemy import select, update

from slotune.tuner.db._leases import hold, hold_for_trial, same_sweep
from slotune.tuner.db._repository import (
    Repository,
    count_rows,
    get_row,
    rowcount,
    sweep_with_workload,
)
from slotune.tuner.db.errors import Conflict
from slotune.tuner.db.models import UNFINISHED_TRIAL_STATUSES, SweepTrial, TrialRole
from slotune.tuner.db.records import Lease, OrphanTrial, Page, TrialRecord
from slotune.tuner.db.session import db_now
from slotune.workers.contracts import TrialResult, TrialSpec, replica_gpus

__all__ = ["TrialRepository"]


class TrialRepository(Repository):
    """The sweep_trials table."""

    def start_trial(
        self,
        sweep_id: int,
        *,
        number: int,
        params: Mapping[str, Any],
        spec: TrialSpec | None = None,
        attempt: int = 1,
        worker: str | None = None,
        node: str | None = None,
        status: Literal["pending", "running"] = "running",
        lease: Lease | None = None,
    ) -> TrialRecord:
        """Record Optuna trial ``number`` (attempt ``attempt``) as running on ``worker``.

        ``config`` is stored as the spec's full engine flags (fixed args + knobs), else
        the params. The same (sweep, number, attempt) twice is a :class:`Conflict`.
        """
        config = dict(spec.engine_flags) if spec is not None else dict(params)
        with self._session() as session:
            now = db_now(session)
            sweep_with_workload(session, sweep_id)  # NotFound rather than an FK error
            if lease is not None:
                hold(session, same_sweep(lease, sweep_id))
            trial = SweepTrial(
                sweep_id=sweep_id, number=number, attempt=attempt, params=dict(params),
                config=config, gpus=replica_gpus(config),
                spec=spec.model_dump(mode="json") if spec else None,
                status=status, confirmed=False, worker=worker, node=node,
                started_at=now if status == "running" else None, heartbeat_at=now,
                created_at=now,
            )
            session.add(trial)
            session.flush()
            return TrialRecord.model_validate(trial)

    def heartbeat_trial(self, trial_id: int, *, lease: Lease | None = None) -> None:
        """The trial is still being worked on; :class:`Conflict` once it has finished or is
        lost (its params were handed back for re-enqueue: stop and drop the result)."""
        with self._session() as session:
            hold_for_trial(session, lease, trial_id)
            done = rowcount(session, update(SweepTrial).where(
                SweepTrial.id == trial_id, SweepTrial.status.in_(UNFINISHED_TRIAL_STATUSES),
            ).values(heartbeat_at=db_now(session)))
            if not done:
                trial = get_row(session, SweepTrial, trial_id, "trial")
                raise Conflict(f"trial {trial_id} is {trial.status}")

    def finish_trial(self, trial_id: int, result: TrialResult, *,
                     lease: Lease | None = None) -> TrialRecord:
        """Store what the trial learned: status, failure, objective, capacity, diagnosis,
        timings, and the whole result as JSON. Only an unfinished trial can finish
        (:class:`Conflict` otherwise, e.g. after orphan recovery marked it lost), and
        under ``lease`` only while the lease is current (:class:`LeaseLost`)."""
        values = _result_values(result)
        with self._session() as session:
            values["finished_at"] = values["heartbeat_at"] = db_now(session)
            hold_for_trial(session, lease, trial_id)
            trial = get_row(session, SweepTrial, trial_id, "trial")
            values["engine"] = (trial.spec or {}).get("engine")
            done = rowcount(session, update(SweepTrial).where(
                SweepTrial.id == trial_id, SweepTrial.status.in_(UNFINISHED_TRIAL_STATUSES),
            ).values(**values))
            session.refresh(trial)  # the row as it is now (finished here, or before)
            if not done:
                raise Conflict(f"trial {trial_id} is already {trial.status}")
            return TrialRecord.model_validate(trial)

    def record_trial(self, sweep_id: int, *, role: Literal["repeat", "baseline"], number: int,
                     params: Mapping[str, Any], spec: TrialSpec, result: TrialResult,
                     attempt: int = 1, repeat: int = 0, repeat_of: int | None = None,
                     worker: str | None = None, lease: Lease | None = None) -> TrialRecord:
        """Store a finished boot that is not a configuration of the search (a confirmation
        repeat of trial ``repeat_of``, or a quality baseline) with its whole result, in one
        write: it was never a running row, so a dead coordinator leaves no orphan of it
        to re-enqueue. Its start is its finish less its measured wall time. Idempotent:
        the same (role, number, repeat, attempt) again returns the stored row, so a write
        retried after a lost reply (the database restarting) stores it once."""
        if (role == "repeat") != (repeat_of is not None and repeat >= 1):
            raise ValueError("a repeat row needs repeat_of and a repeat from 1; "
                             "a baseline row has neither")
        with self._session() as session:
            now = db_now(session)
            sweep_with_workload(session, sweep_id)
            if lease is not None:
                hold(session, same_sweep(lease, sweep_id))
            if repeat_of is not None:
                original = get_row(session, SweepTrial, repeat_of, "trial")
                if original.sweep_id != sweep_id or original.role != "search":
                    raise Conflict(f"trial {repeat_of} is not a search trial of sweep "
                                   f"{sweep_id}: only those are repeated")
            stored = session.scalars(select(SweepTrial).where(
                SweepTrial.sweep_id == sweep_id, SweepTrial.role == role,
                SweepTrial.number == number, SweepTrial.repeat == repeat,
                SweepTrial.attempt == attempt)).first()
            if stored is not None:
                return TrialRecord.model_validate(stored)
            trial = SweepTrial(
                sweep_id=sweep_id, role=role, number=number, repeat=repeat,
                repeat_of=repeat_of, attempt=attempt, params=dict(params),
                config=dict(spec.engine_flags), gpus=spec.gpus,
                spec=spec.model_dump(mode="json"), engine=spec.engine, confirmed=False,
                worker=worker, created_at=now, heartbeat_at=now,
                started_at=now - timedelta(seconds=result.timings.total_s),
                **{**_result_values(result), "finished_at": now})
            session.add(trial)
            session.flush()
            return TrialRecord.model_validate(trial)

    def recover_orphans(self, sweep_id: int, *, lease: Lease | None = None
                        ) -> list[OrphanTrial]:
        """Mark the sweep's unfinished (pending/running) trials ``lost`` and return them.

        For a coordinator taking over a sweep whose previous coordinator died: the
        returned params are to be re-enqueued (and the Optuna trials failed). Idempotent:
        a second call finds nothing unfinished and returns ``[]``; the lost rows keep
        their params (``list_trials(sweep_id, status="lost")``). Under ``lease``, only
        while it is current: a coordinator that lost the sweep never marks its
        successor's trials lost.
        """
        with self._session() as session:
            now = db_now(session)
            sweep_with_workload(session, sweep_id)
            if lease is not None:
                hold(session, same_sweep(lease, sweep_id))
            candidates = session.scalars(
                select(SweepTrial)
                .where(SweepTrial.sweep_id == sweep_id, SweepTrial.role == "search",
                       SweepTrial.status.in_(UNFINISHED_TRIAL_STATUSES))
                .order_by(SweepTrial.number, SweepTrial.attempt)).all()
            orphans = []
            for trial in candidates:
                # Conditional, row by row: a result that lands meanwhile is kept, not lost
                # (SQLite runs the SELECT above outside the write transaction).
                if rowcount(session, update(SweepTrial).where(
                        SweepTrial.id == trial.id,
                        SweepTrial.status.in_(UNFINISHED_TRIAL_STATUSES),
                ).values(status="lost", failure_class="worker_lost", finished_at=now)):
                    orphans.append(OrphanTrial(trial_id=trial.id, number=trial.number,
                                               attempt=trial.attempt, params=trial.params))
            return orphans

    def get_trial(self, trial_id: int) -> TrialRecord:
        with self._session() as session:
            return TrialRecord.model_validate(get_row(session, SweepTrial, trial_id, "trial"))

    def list_trials(
        self,
        sweep_id: int,
        *,
        status: str | Sequence[str] | None = None,
        role: TrialRole | Literal["any"] = "search",
        offset: int = 0,
        limit: int | None = None,
    ) -> Page[TrialRecord]:
        """A sweep's trials — the configurations it searched, one row per attempt — by
        Optuna number then attempt; ``role`` ``repeat`` or ``baseline`` lists those boots
        instead, ``any`` every boot the sweep paid for (by number, role, repeat and
        attempt). ``count`` is before paging."""
        query = select(SweepTrial).where(SweepTrial.sweep_id == sweep_id)
        if role != "any":
            query = query.where(SweepTrial.role == role)
        if status is not None:
            query = query.where(SweepTrial.status.in_([status] if isinstance(status, str)
                                                      else list(status)))
        with self._session() as session:
            sweep_with_workload(session, sweep_id)
            count = count_rows(session, query)
            page = query.order_by(SweepTrial.number, SweepTrial.role.desc(), SweepTrial.repeat,
                                  SweepTrial.attempt).offset(offset)
            if limit is not None:
                page = page.limit(limit)
            rows = session.scalars(page).all()
            return Page(data=[TrialRecord.model_validate(r) for r in rows], count=count)

    def set_capacity(self, trial_id: int, *, low: float, high: float | None, gpus: int,
                     repeats: int, capacity: float | None = None,
                     lease: Lease | None = None) -> TrialRecord:
        """Give a search trial the capacity interval its confirmation measured in
        ``repeats`` re-runs (its capacity the interval's centre, its objective that per
        GPU; ``capacity`` None: the interval's geometric centre): the number every
        surface reads of the configuration from now on. Its search result stays in
        ``result``."""
        centre = capacity if capacity is not None else \
            low if high is None else math.sqrt(low * high)
        with self._session() as session:
            hold_for_trial(session, lease, trial_id)
            trial = get_row(session, SweepTrial, trial_id, "trial")
            if trial.status != "ok" or trial.role != "search":
                raise Conflict(f"trial {trial_id} is a {trial.status} {trial.role} row; only "
                               "an ok search trial carries a confirmed capacity")
            trial.capacity, trial.capacity_low, trial.capacity_high = centre, low, high
            trial.objective = centre / max(gpus, 1)
            trial.repeats = repeats
            session.flush()
            return TrialRecord.model_validate(trial)

    def mark_confirmed(self, trial_id: int, confirmed: bool = True, *, repeats: int = 0,
                       lease: Lease | None = None) -> TrialRecord:
        """Mark an ``ok`` trial as confirmed (it held up in ``repeats`` re-runs); it then
        ranks first in ``best_config_per_workload``."""
        with self._session() as session:
            hold_for_trial(session, lease, trial_id)
            trial = get_row(session, SweepTrial, trial_id, "trial")
            if trial.status != "ok":
                raise Conflict(f"trial {trial_id} is {trial.status}; only ok trials are "
                               "confirmed")
            trial.confirmed = confirmed
            trial.repeats = repeats if confirmed else 0
            session.flush()
            return TrialRecord.model_validate(trial)


def _result_values(result: TrialResult) -> dict[str, Any]:
    """The columns a finished trial's result fills (``node`` only when the result knows
    where it ran: a lost worker's result never blanks the row's node)."""
    values: dict[str, Any] = {
        "status": result.status,
        "failure_class": result.failure,
        "objective": result.objective,
        "capacity": result.capacity,
        "capacity_low": result.capacity_low if result.capacity_low is not None
        else result.capacity,
        "capacity_high": result.capacity_high,
        "result": result.model_dump(mode="json"),
        "diagnosis": result.diagnosis,
        "timings": result.timings.model_dump(mode="json"),
        "engine_version": result.engine.engine_version,
        "gpu_driver": result.engine.gpu_driver,
        "model_revision": result.engine.model_revision,
        "headroom": result.headroom,
    }
    if result.node is not None:
        values["node"] = result.node
    return values
