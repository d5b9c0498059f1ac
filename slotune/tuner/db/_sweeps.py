"""Sweeps: created (with their workload), listed, and moved between states.

A state change that can race (cancelling a sweep while its coordinator finishes it) is
one conditional ``UPDATE … WHERE status IN (…)``, from the states :data:`_SWEEP_SOURCES`
allows; claims and heartbeats are :mod:`slotune.tuner.db._leases`'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select, update

from slotune.tuner.db._leases import hold, same_sweep
from slotune.tuner.db._repository import (
    Repository,
    again_on_conflict,
    count_rows,
    rowcount,
    sweep_record,
    sweep_with_workload,
)
from slotune.tuner.db._workloads import upsert_workload_row
from slotune.tuner.db.errors import Conflict
from slotune.tuner.db.models import SWEEP_STATUSES, Sweep, SweepStatus, WorkloadRow
from slotune.tuner.db.records import ExecutorChoice, Lease, Page, SweepRecord
from slotune.tuner.db.session import db_now
from slotune.workers.contracts import SLO, ObjectiveMode, Workload

__all__ = ["SweepRepository", "slo_key", "study_name_for"]


def study_name_for(sweep_id: int) -> str:
    """The Optuna study name a sweep gets unless told otherwise."""
    return f"slotune-sweep-{sweep_id}"


def slo_key(slo: SLO) -> str:
    """Canonical JSON of an SLO (sorted keys, no unset targets): equal SLOs, equal keys."""
    return json.dumps(slo.model_dump(mode="json", exclude_none=True), sort_keys=True,
                      separators=(",", ":"))



class SweepRepository(Repository):
    """The sweeps table, but for leases."""

    def create_sweep(
        self,
        *,
        name: str,
        workload: Workload,
        slo: SLO,
        space: Mapping[str, Any],
        model: str,
        gpu: str,
        strategy: str,
        mode: ObjectiveMode = "goodput",
        budget: Mapping[str, Any] | None = None,
        seed: int = 0,
        owner: str | None = None,
        optuna_study_name: str | None = None,
        claimed_by: str | None = None,
        executor: ExecutorChoice | None = None,
    ) -> SweepRecord:
        """A new ``queued`` sweep; its workload is stored (upserted) in the same write.

        With ``claimed_by`` the sweep is born ``running`` under that coordinator (one
        write: no other coordinator can claim it first), on ``executor``.

        ``optuna_study_name`` defaults to :func:`study_name_for` of the new id; a name
        already used by another sweep is a :class:`Conflict`.
        """
        return again_on_conflict(lambda: self._create_sweep(
            name=name, workload=workload, slo=slo, space=space, model=model, gpu=gpu,
            strategy=strategy, mode=mode, budget=budget, seed=seed, owner=owner,
            optuna_study_name=optuna_study_name, claimed_by=claimed_by, executor=executor))

    def _create_sweep(self, *, name: str, workload: Workload, slo: SLO,
                      space: Mapping[str, Any], model: str, gpu: str, strategy: str,
                      mode: ObjectiveMode, budget: Mapping[str, Any] | None, seed: int,
                      owner: str | None, optuna_study_name: str | None,
                      claimed_by: str | None, executor: ExecutorChoice | None) -> SweepRecord:
        with self._session() as session:
            now = db_now(session)
            workload_row = upsert_workload_row(session, workload)
            sweep = Sweep(
                name=name, workload_id=workload_row.id, space=dict(space),
                slo=slo.model_dump(mode="json"), slo_key=slo_key(slo), model=model, gpu=gpu,
                strategy=strategy, mode=mode, status="queued", budget=dict(budget or {}),
                seed=seed, progress={}, owner=owner, optuna_study_name=optuna_study_name,
                created_at=now, executor=executor.model_dump() if executor else None,
            )
            if claimed_by is not None:
                sweep.status, sweep.claimed_by, sweep.lease_epoch = "running", claimed_by, 1
                sweep.heartbeat_at = sweep.started_at = now
            session.add(sweep)
            session.flush()
            if sweep.optuna_study_name is None:
                sweep.optuna_study_name = study_name_for(sweep.id)
                session.flush()
            return sweep_record(sweep, workload_row.name)

    def get_sweep(self, sweep_id: int) -> SweepRecord:
        with self._session() as session:
            return sweep_record(*sweep_with_workload(session, sweep_id))

    def list_sweeps(
        self,
        *,
        status: SweepStatus | Sequence[SweepStatus] | None = None,
        workload: str | None = None,
        owner: str | None = None,
        offset: int = 0,
        limit: int | None = 50,
    ) -> Page[SweepRecord]:
        """Sweeps, newest first, filtered; ``count`` is the total before paging."""
        filters: list[ColumnElement[bool]] = []
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            filters.append(Sweep.status.in_(statuses))
        if workload is not None:
            filters.append(WorkloadRow.name == workload)
        if owner is not None:
            filters.append(Sweep.owner == owner)
        query = (select(Sweep, WorkloadRow.name).join(WorkloadRow, Sweep.workload_id
                                                      == WorkloadRow.id).where(*filters))
        with self._session() as session:
            count = count_rows(session, query)
            page = query.order_by(Sweep.created_at.desc(), Sweep.id.desc()).offset(offset)
            if limit is not None:
                page = page.limit(limit)
            rows = session.execute(page).all()
            return Page(data=[sweep_record(s, n) for s, n in rows], count=count)

    def update_sweep(
        self,
        sweep_id: int,
        *,
        status: SweepStatus | None = None,
        progress: Mapping[str, Any] | None = None,
        stop_reason: str | None = None,
        optuna_study_name: str | None = None,
        lease: Lease | None = None,
    ) -> SweepRecord:
        """Change what is given. A status change must be allowed from the current status
        (queued → running → done/failed; queued/running → cancelled; failed/cancelled →
        queued to resume), else :class:`Conflict` — e.g. a cancelled sweep stays cancelled
        when its coordinator reports ``done`` a moment later. Under ``lease`` the change
        is made only while the lease is current (:class:`LeaseLost`)."""
        values: dict[str, Any] = {}
        if progress is not None:
            values["progress"] = dict(progress)
        if stop_reason is not None:
            values["stop_reason"] = stop_reason
        if optuna_study_name is not None:
            values["optuna_study_name"] = optuna_study_name
        where: list[ColumnElement[bool]] = [Sweep.id == sweep_id]
        if status is not None:
            if status not in SWEEP_STATUSES:
                raise ValueError(f"unknown sweep status {status!r}; valid: {SWEEP_STATUSES}")
            where.append(Sweep.status.in_(_SWEEP_SOURCES[status]))
            values["status"] = status
        with self._session() as session:
            if status is not None:
                values.update(_status_timestamps(status, db_now(session)))
            if lease is not None:
                hold(session, same_sweep(lease, sweep_id))
            if values:
                changed = rowcount(session, update(Sweep).where(*where).values(**values))
                if not changed:
                    sweep, _ = sweep_with_workload(session, sweep_id)
                    raise Conflict(f"sweep {sweep_id} is {sweep.status}; it cannot become "
                                   f"{status}")
            return sweep_record(*sweep_with_workload(session, sweep_id))

    def cancel_sweep(self, sweep_id: int, reason: str = "cancelled") -> SweepRecord:
        """Mark the sweep cancelled (its coordinator sees it at its next heartbeat).

        Idempotent on a cancelled sweep; :class:`Conflict` on a finished one.
        """
        with self._session() as session:
            sweep, name = sweep_with_workload(session, sweep_id)
            if sweep.status == "cancelled":
                return sweep_record(sweep, name)
        return self.update_sweep(sweep_id, status="cancelled", stop_reason=reason)

    def requeue_sweep(self, sweep_id: int) -> SweepRecord:
        """Resume a failed or cancelled sweep: back to queued for a coordinator to claim."""
        return self.update_sweep(sweep_id, status="queued")



# Which states a sweep may enter a state from. "queued" from failed/cancelled is resume.
_SWEEP_SOURCES: dict[str, tuple[str, ...]] = {
    "queued": ("failed", "cancelled"),
    "running": ("queued",),
    "done": ("running",),
    "failed": ("queued", "running"),
    "cancelled": ("queued", "running"),
}
_TERMINAL = ("done", "failed", "cancelled")


def _status_timestamps(status: str, now: datetime) -> dict[str, Any]:
    if status == "running":
        return {"started_at": func.coalesce(Sweep.started_at, now)}
    if status in _TERMINAL:
        return {"finished_at": now}
    if status == "queued":  # resumed: a fresh run, claimed anew
        return {"finished_at": None, "stop_reason": None, "claimed_by": None}
    return {}
