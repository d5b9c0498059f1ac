"""The store: slotune's memory, a service layer over the database for coordinator and API.

Every public method is one transaction (nothing a caller stored is lost to a later
crash), returns detached records (:mod:`slotune.tuner.db.records`), and raises only
:class:`StorageError` and its subclasses — :class:`NotFound`, :class:`Conflict`,
:class:`StorageUnavailable`, :class:`SchemaMissing` — translated once in
:func:`slotune.tuner.db.session.session_scope`, with database URLs redacted.

State changes that can race (claiming a sweep, cancelling it while its coordinator
finishes it, finishing a trial that orphan recovery just marked lost) are single
conditional ``UPDATE … WHERE status IN (…)`` statements, atomic on SQLite and Postgres.

Fencing: each claim of a sweep raises its ``lease_epoch`` and hands the claimer a
:class:`Lease`. Every write a coordinator makes for the sweep and its trials passes that
lease; the write's transaction first locks the sweep's row on the condition that the lease
is still current (:func:`_hold`), so a claim either happens before it (the write is
refused with :class:`LeaseLost`) or waits until it has committed. A running sweep changes
hands when its holder's lease was seen standing still for the stale window on the taker's
own monotonic clock (:mod:`slotune.tuner.db.lease_watch`), never by comparing wall clocks.

The schema comes from the migrations (``slotune db upgrade``); the store never creates it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, cast

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Select,
    Update,
    and_,
    case,
    func,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.orm import Session, sessionmaker

from slotune.tuner.db.errors import (
    Conflict,
    LeaseLost,
    NotFound,
    SchemaMissing,
    StorageError,
    StorageUnavailable,
)
from slotune.tuner.db.lease_watch import LeaseSighting, SilenceWatch
from slotune.tuner.db.models import (
    SWEEP_STATUSES,
    UNFINISHED_TRIAL_STATUSES,
    ExperimentCardRow,
    Sweep,
    SweepStatus,
    SweepTrial,
    TrialRole,
    Verdict,
    WorkloadRow,
    best_config_view,
    no_passing_view,
)
from slotune.tuner.db.records import (
    BestConfig,
    CardRecord,
    EquivalentConfig,
    ExecutorChoice,
    Lease,
    NoPassingConfig,
    OrphanTrial,
    Page,
    SweepRecord,
    TrialRecord,
    WorkloadRecord,
    overlaps,
    per_gpu_interval,
)
from slotune.tuner.db.session import db_now, make_db_engine, session_scope
from slotune.tuner.settings import Settings, get_settings, redact_url
from slotune.workers.contracts import (
    SLO,
    ObjectiveMode,
    TrialResult,
    TrialSpec,
    Workload,
    replica_gpus,
)

__all__ = [
    "BestConfig",
    "CardRecord",
    "Conflict",
    "Lease",
    "LeaseLost",
    "NoPassingConfig",
    "NotFound",
    "OrphanTrial",
    "Page",
    "SchemaMissing",
    "StorageError",
    "StorageUnavailable",
    "Store",
    "SweepRecord",
    "SweepStatus",
    "TrialRecord",
    "Verdict",
    "WorkloadRecord",
    "slo_key",
    "study_name_for",
]


# Which states a sweep may enter a state from. "queued" from failed/cancelled is resume.
_SWEEP_SOURCES: dict[str, tuple[str, ...]] = {
    "queued": ("failed", "cancelled"),
    "running": ("queued",),
    "done": ("running",),
    "failed": ("queued", "running"),
    "cancelled": ("queued", "running"),
}
_TERMINAL = ("done", "failed", "cancelled")


def study_name_for(sweep_id: int) -> str:
    """The Optuna study name a sweep gets unless told otherwise."""
    return f"slotune-sweep-{sweep_id}"


def slo_key(slo: SLO) -> str:
    """Canonical JSON of an SLO (sorted keys, no unset targets): equal SLOs, equal keys."""
    return json.dumps(slo.model_dump(mode="json", exclude_none=True), sort_keys=True,
                      separators=(",", ":"))


class Store:
    """Sessions over one database. Thread-safe: each call opens its own session.

    ``Store(url)`` or ``Store.from_settings()``; ``close()`` (or ``with Store(...)``)
    releases the connection pool.
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self._url = url
        self._engine = make_db_engine(url, echo=echo)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._watch = SilenceWatch()
        """What this store saw of other coordinators' leases, and since when."""

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Store:
        settings = settings or get_settings()
        return cls(settings.database.url, echo=settings.database.echo)

    @property
    def url(self) -> str:
        """The database URL, password redacted (safe to log)."""
        return redact_url(self._url)

    def check_schema(self) -> None:
        """Refuse to start on a database whose schema is missing or not at our head.

        :class:`SchemaMissing` (run ``slotune db upgrade``) or :class:`StorageUnavailable`.
        """
        from slotune.tuner.db import migrate

        current, head = migrate.current_revision(self._url), migrate.head_revision()
        if current != head:
            raise SchemaMissing(f"the database is at schema revision "
                                f"{current or 'none'}, this slotune needs {head}; run "
                                "`slotune db upgrade`")

    def clock_skew_s(self) -> float:
        """How far this host's clock runs ahead of the database's, in seconds (0 on
        SQLite, whose clock is this host's). Leases never use this host's clock; a large
        skew still misleads whoever reads this host's logs beside the stored times."""
        with self._session() as session:
            return (datetime.now(UTC) - db_now(session)).total_seconds()

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _session(self) -> AbstractContextManager[Session]:
        return session_scope(self._sessions)

    # --- workloads ---------------------------------------------------------------------

    def upsert_workload(self, workload: Workload) -> WorkloadRecord:
        """Store ``workload`` under its name; an existing one gets the new spec."""
        def write() -> WorkloadRecord:
            with self._session() as session:
                return WorkloadRecord.model_validate(_upsert_workload(session, workload))

        return _again_on_conflict(write)

    def get_workload(self, name: str) -> WorkloadRecord:
        with self._session() as session:
            return WorkloadRecord.model_validate(_workload_by_name(session, name))

    def list_workloads(self) -> list[WorkloadRecord]:
        with self._session() as session:
            rows = session.scalars(select(WorkloadRow).order_by(WorkloadRow.name))
            return [WorkloadRecord.model_validate(row) for row in rows]

    # --- sweeps --------------------------------------------------------------------------

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
        return _again_on_conflict(lambda: self._create_sweep(
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
            workload_row = _upsert_workload(session, workload)
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
            return _sweep_record(sweep, workload_row.name)

    def get_sweep(self, sweep_id: int) -> SweepRecord:
        with self._session() as session:
            return _sweep_record(*_sweep_with_workload(session, sweep_id))

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
            count = _count(session, query)
            page = query.order_by(Sweep.created_at.desc(), Sweep.id.desc()).offset(offset)
            if limit is not None:
                page = page.limit(limit)
            rows = session.execute(page).all()
            return Page(data=[_sweep_record(s, n) for s, n in rows], count=count)

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
        claimed = _rowcount(session, update(Sweep).where(Sweep.id == sweep_id, claimable)
                            .values(status="running", claimed_by=coordinator,
                                    heartbeat_at=now, lease_epoch=Sweep.lease_epoch + 1,
                                    started_at=func.coalesce(Sweep.started_at, now)))
        sweep, name = _sweep_with_workload(session, sweep_id)
        if not claimed:
            return None
        self._watch.forget(sweep_id)
        if sweep.executor is None and executor is not None:
            sweep.executor = executor.model_dump()
            session.flush()
        return _sweep_record(sweep, name)

    def heartbeat_sweep(self, lease: Lease) -> None:
        """Say the lease's holder is still running the sweep.

        :class:`LeaseLost` when the sweep was claimed again since (taken over, resumed
        elsewhere); :class:`Conflict` when it is no longer running (cancelled, finished).
        Either way the coordinator should stop.
        """
        with self._session() as session:
            _hold(session, lease)
            done = _rowcount(session, update(Sweep).where(
                Sweep.id == lease.sweep_id, Sweep.status == "running",
            ).values(heartbeat_at=db_now(session)))
            if not done:
                sweep, _ = _sweep_with_workload(session, lease.sweep_id)
                raise Conflict(f"sweep {lease.sweep_id} is {sweep.status}")

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
                _hold(session, _same_sweep(lease, sweep_id))
            if values:
                changed = _rowcount(session, update(Sweep).where(*where).values(**values))
                if not changed:
                    sweep, _ = _sweep_with_workload(session, sweep_id)
                    raise Conflict(f"sweep {sweep_id} is {sweep.status}; it cannot become "
                                   f"{status}")
            return _sweep_record(*_sweep_with_workload(session, sweep_id))

    def cancel_sweep(self, sweep_id: int, reason: str = "cancelled") -> SweepRecord:
        """Mark the sweep cancelled (its coordinator sees it at its next heartbeat).

        Idempotent on a cancelled sweep; :class:`Conflict` on a finished one.
        """
        with self._session() as session:
            sweep, name = _sweep_with_workload(session, sweep_id)
            if sweep.status == "cancelled":
                return _sweep_record(sweep, name)
        return self.update_sweep(sweep_id, status="cancelled", stop_reason=reason)

    def requeue_sweep(self, sweep_id: int) -> SweepRecord:
        """Resume a failed or cancelled sweep: back to queued for a coordinator to claim."""
        return self.update_sweep(sweep_id, status="queued")

    # --- trials --------------------------------------------------------------------------

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
            _sweep_with_workload(session, sweep_id)  # NotFound rather than an FK error
            if lease is not None:
                _hold(session, _same_sweep(lease, sweep_id))
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
            _hold_for_trial(session, lease, trial_id)
            done = _rowcount(session, update(SweepTrial).where(
                SweepTrial.id == trial_id, SweepTrial.status.in_(UNFINISHED_TRIAL_STATUSES),
            ).values(heartbeat_at=db_now(session)))
            if not done:
                trial = _get(session, SweepTrial, trial_id, "trial")
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
            _hold_for_trial(session, lease, trial_id)
            trial = _get(session, SweepTrial, trial_id, "trial")
            values["engine"] = (trial.spec or {}).get("engine")
            done = _rowcount(session, update(SweepTrial).where(
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
            _sweep_with_workload(session, sweep_id)
            if lease is not None:
                _hold(session, _same_sweep(lease, sweep_id))
            if repeat_of is not None:
                original = _get(session, SweepTrial, repeat_of, "trial")
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
            _sweep_with_workload(session, sweep_id)
            if lease is not None:
                _hold(session, _same_sweep(lease, sweep_id))
            candidates = session.scalars(
                select(SweepTrial)
                .where(SweepTrial.sweep_id == sweep_id, SweepTrial.role == "search",
                       SweepTrial.status.in_(UNFINISHED_TRIAL_STATUSES))
                .order_by(SweepTrial.number, SweepTrial.attempt)).all()
            orphans = []
            for trial in candidates:
                # Conditional, row by row: a result that lands meanwhile is kept, not lost
                # (SQLite runs the SELECT above outside the write transaction).
                if _rowcount(session, update(SweepTrial).where(
                        SweepTrial.id == trial.id,
                        SweepTrial.status.in_(UNFINISHED_TRIAL_STATUSES),
                ).values(status="lost", failure_class="worker_lost", finished_at=now)):
                    orphans.append(OrphanTrial(trial_id=trial.id, number=trial.number,
                                               attempt=trial.attempt, params=trial.params))
            return orphans

    def get_trial(self, trial_id: int) -> TrialRecord:
        with self._session() as session:
            return TrialRecord.model_validate(_get(session, SweepTrial, trial_id, "trial"))

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
            _sweep_with_workload(session, sweep_id)
            count = _count(session, query)
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
            _hold_for_trial(session, lease, trial_id)
            trial = _get(session, SweepTrial, trial_id, "trial")
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
            _hold_for_trial(session, lease, trial_id)
            trial = _get(session, SweepTrial, trial_id, "trial")
            if trial.status != "ok":
                raise Conflict(f"trial {trial_id} is {trial.status}; only ok trials are "
                               "confirmed")
            trial.confirmed = confirmed
            trial.repeats = repeats if confirmed else 0
            session.flush()
            return TrialRecord.model_validate(trial)

    # --- experiment cards ----------------------------------------------------------------

    def add_card(
        self,
        sweep_id: int,
        *,
        step: int,
        symptom: str,
        hypothesis: str,
        variable: str,
        values: Sequence[Any],
        expected_direction: str,
        evidence: Mapping[str, Any] | None = None,
        result: Mapping[str, Any] | None = None,
        verdict: Verdict | None = None,
        rollback: Any = None,
        controls: Mapping[str, Any] | None = None,
        stop_condition: Sequence[str] | None = None,
        lease: Lease | None = None,
    ) -> CardRecord:
        """One step of a guided sweep; a step number used twice is a :class:`Conflict`."""
        with self._session() as session:
            _sweep_with_workload(session, sweep_id)
            if lease is not None:
                _hold(session, _same_sweep(lease, sweep_id))
            card = ExperimentCardRow(
                sweep_id=sweep_id, step=step, symptom=symptom, evidence=dict(evidence or {}),
                hypothesis=hypothesis, variable=variable, values=list(values),
                expected_direction=expected_direction,
                result=dict(result) if result is not None else None, verdict=verdict,
                rollback=rollback, controls=dict(controls) if controls is not None else None,
                stop_condition=list(stop_condition) if stop_condition is not None else None,
                created_at=db_now(session),
            )
            session.add(card)
            session.flush()
            return CardRecord.model_validate(card)

    def resolve_card(self, card_id: int, *, result: Mapping[str, Any], verdict: Verdict,
                     rollback: Any = None, values: Sequence[Any] | None = None,
                     lease: Lease | None = None) -> CardRecord:
        """Write a card's outcome once its experiment has run (and, with ``values``,
        every value it tried: a line search adds values as it goes)."""
        with self._session() as session:
            card = _get(session, ExperimentCardRow, card_id, "experiment card")
            if lease is not None:
                _hold(session, _same_sweep(lease, card.sweep_id))
            card.result = dict(result)
            card.verdict = verdict
            if values is not None:
                card.values = list(values)
            if rollback is not None:
                card.rollback = rollback
            session.flush()
            return CardRecord.model_validate(card)

    def list_cards(self, sweep_id: int) -> list[CardRecord]:
        with self._session() as session:
            _sweep_with_workload(session, sweep_id)
            rows = session.scalars(select(ExperimentCardRow).where(
                ExperimentCardRow.sweep_id == sweep_id).order_by(ExperimentCardRow.step))
            return [CardRecord.model_validate(r) for r in rows]

    # --- best configurations (the view) --------------------------------------------------

    def best_config_per_workload(self) -> list[BestConfig]:
        """Every row of the ``best_config_per_workload`` view."""
        view = best_config_view.c
        query = select(best_config_view).order_by(view.workload, view.model, view.gpu,
                                                  view.slo)
        with self._session() as session:
            rows = session.execute(query).mappings().all()
            return [_with_equivalents(session, BestConfig.model_validate(dict(r)))
                    for r in rows]

    def without_passing_config(self, workload: str | None = None) -> list[NoPassingConfig]:
        """Rows of ``workloads_without_passing_config`` (of one workload, if named):
        measured groups where no configuration met the SLO."""
        view = no_passing_view.c
        query = select(no_passing_view).order_by(view.workload, view.model, view.gpu,
                                                 view.slo)
        if workload is not None:
            query = query.where(view.workload == workload)
        with self._session() as session:
            rows = session.execute(query).mappings().all()
            return [NoPassingConfig.model_validate(dict(r)) for r in rows]

    def best_for_workload(self, name: str) -> list[BestConfig]:
        """The best configuration of workload ``name`` per (model, gpu, slo).

        Empty when nothing was measured ok yet; :class:`NotFound` for an unknown workload.
        """
        view = best_config_view.c
        query = (select(best_config_view).where(view.workload == name)
                 .order_by(view.model, view.gpu, view.slo))
        with self._session() as session:
            _workload_by_name(session, name)
            rows = session.execute(query).mappings().all()
            return [_with_equivalents(session, BestConfig.model_validate(dict(r)))
                    for r in rows]


# --- helpers -------------------------------------------------------------------------------

_R = TypeVar("_R")


def _with_equivalents(session: Session, best: BestConfig) -> BestConfig:
    """``best`` with its sweep's configurations whose capacity intervals per GPU overlap
    its own (:class:`EquivalentConfig`): one query, its sweep's ok search rows."""
    if best.capacity is None or best.sweep_id is None:
        return best
    # An interval with no upper end (the search's ceiling passed, or a row measured
    # before intervals) is taken at its capacity: it shows no rate above that.
    own = per_gpu_interval(best.capacity_low, best.capacity_high or best.capacity, best.gpus)
    rows = session.execute(select(SweepTrial).where(
        SweepTrial.sweep_id == best.sweep_id, SweepTrial.role == "search",
        SweepTrial.status == "ok", SweepTrial.capacity > 0,
        SweepTrial.id != best.trial_id).order_by(SweepTrial.number)).scalars().all()
    equivalent = [
        EquivalentConfig(trial_id=t.id, number=t.number, config=dict(t.config),
                         capacity=t.capacity or 0.0,
                         capacity_low=t.capacity_low or t.capacity or 0.0,
                         capacity_high=t.capacity_high, gpus=t.gpus, confirmed=t.repeats > 0)
        for t in rows
        if overlaps(own, per_gpu_interval(t.capacity_low or t.capacity,
                                          t.capacity_high or t.capacity, t.gpus))]
    return best.model_copy(update={"equivalent": equivalent})


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


def _again_on_conflict(write: Callable[[], _R]) -> _R:
    """Run ``write`` (its own transaction) once more if it hits a :class:`Conflict`.

    Two writers storing the same new workload both see it missing and both insert; the
    loser's retry finds the winner's row and updates it. A real duplicate (a study name
    already taken) conflicts again and is raised.
    """
    try:
        return write()
    except Conflict:
        return write()


_M = TypeVar("_M", SweepTrial, ExperimentCardRow)


def _upsert_workload(session: Session, workload: Workload) -> WorkloadRow:
    spec = workload.model_dump(mode="json")
    row = session.scalars(select(WorkloadRow).where(WorkloadRow.name == workload.name)
                          .with_for_update()).one_or_none()
    if row is None:
        now = db_now(session)
        row = WorkloadRow(name=workload.name, spec=spec, created_at=now, updated_at=now)
        session.add(row)
    elif row.spec != spec:
        row.spec = spec
        row.updated_at = db_now(session)
    session.flush()
    return row


def _workload_by_name(session: Session, name: str) -> WorkloadRow:
    row = session.scalars(select(WorkloadRow).where(WorkloadRow.name == name)).one_or_none()
    if row is None:
        raise NotFound(f"no workload named {name!r}")
    return row


def _hold(session: Session, lease: Lease) -> None:
    """Lock the sweep's row for this transaction if ``lease`` is still current, else
    :class:`LeaseLost`. The lock is an UPDATE that changes nothing: it makes a concurrent
    claim wait for this transaction (Postgres row lock; SQLite's one writer at a time)."""
    held = _rowcount(session, update(Sweep).where(
        Sweep.id == lease.sweep_id, Sweep.claimed_by == lease.holder,
        Sweep.lease_epoch == lease.epoch).values(lease_epoch=Sweep.lease_epoch))
    if not held:
        sweep, _ = _sweep_with_workload(session, lease.sweep_id)
        raise LeaseLost(f"sweep {lease.sweep_id} was claimed again: it is held by "
                        f"{sweep.claimed_by!r} under lease {sweep.lease_epoch}, not by "
                        f"{lease.holder!r} under lease {lease.epoch}")


def _same_sweep(lease: Lease, sweep_id: int) -> Lease:
    if lease.sweep_id != sweep_id:
        raise Conflict(f"a lease on sweep {lease.sweep_id} does not cover sweep {sweep_id}")
    return lease


def _hold_for_trial(session: Session, lease: Lease | None, trial_id: int) -> None:
    if lease is not None:
        trial = _get(session, SweepTrial, trial_id, "trial")
        _hold(session, _same_sweep(lease, trial.sweep_id))


def _sweep_with_workload(session: Session, sweep_id: int) -> tuple[Sweep, str]:
    row = session.execute(
        select(Sweep, WorkloadRow.name).join(WorkloadRow, Sweep.workload_id == WorkloadRow.id)
        .where(Sweep.id == sweep_id).execution_options(populate_existing=True)
    ).one_or_none()
    if row is None:
        raise NotFound(f"no sweep {sweep_id}")
    return row


def _get(session: Session, model: type[_M], key: int, what: str) -> _M:
    row = session.get(model, key, populate_existing=True)
    if row is None:
        raise NotFound(f"no {what} {key}")
    return row


def _rowcount(session: Session, statement: Update) -> int:
    """Rows an UPDATE matched: how a conditional state change says whether it happened."""
    return cast("CursorResult[Any]", session.execute(statement)).rowcount


def _count(session: Session, query: Select[*tuple[Any, ...]]) -> int:
    return session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0


def _sweep_record(sweep: Sweep, workload_name: str) -> SweepRecord:
    columns = {c.key: getattr(sweep, c.key) for c in Sweep.__table__.columns}
    return SweepRecord.model_validate({**columns, "workload": workload_name})


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


def _status_timestamps(status: str, now: datetime) -> dict[str, Any]:
    if status == "running":
        return {"started_at": func.coalesce(Sweep.started_at, now)}
    if status in _TERMINAL:
        return {"finished_at": now}
    if status == "queued":  # resumed: a fresh run, claimed anew
        return {"finished_at": None, "stop_reason": None, "claimed_by": None}
    return {}
