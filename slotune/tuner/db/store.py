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

The store is a façade: each concern is a repository of its own (:mod:`slotune.tuner.db._workloads`,
:mod:`~slotune.tuner.db._sweeps`, :mod:`~slotune.tuner.db._leases`,
:mod:`~slotune.tuner.db._trials`, :mod:`~slotune.tuner.db._cards`, :mod:`~slotune.tuner.db._views`)
over one session factory and the one session helper (:mod:`slotune.tuner.db._repository`); this
class keeps the one API callers use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, Self

from sqlalchemy.orm import Session, sessionmaker

from slotune.tuner.db._cards import CardRepository
from slotune.tuner.db._leases import LeaseRepository
from slotune.tuner.db._sweeps import SweepRepository, slo_key, study_name_for
from slotune.tuner.db._trials import TrialRepository
from slotune.tuner.db._views import ViewRepository
from slotune.tuner.db._workloads import WorkloadRepository
from slotune.tuner.db.errors import (
    Conflict,
    LeaseLost,
    NotFound,
    SchemaMissing,
    StorageError,
    StorageUnavailable,
)
from slotune.tuner.db.models import (
    SweepStatus,
    TrialRole,
    Verdict,
)
from slotune.tuner.db.records import (
    BestConfig,
    CardRecord,
    ExecutorChoice,
    Lease,
    NoPassingConfig,
    OrphanTrial,
    Page,
    SweepRecord,
    TrialRecord,
    WorkloadRecord,
)
from slotune.tuner.db.session import db_now, make_db_engine, session_scope
from slotune.tuner.settings import Settings, get_settings, redact_url
from slotune.workers.contracts import SLO, ObjectiveMode, TrialResult, TrialSpec, Workload

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


class Store:
    """Sessions over one database. Thread-safe: each call opens its own session.

    ``Store(url)`` or ``Store.from_settings()``; ``close()`` (or ``with Store(...)``)
    releases the connection pool.
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self._url = url
        self._engine = make_db_engine(url, echo=echo)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        # One repository per concern, all on this one session factory: each call still
        # opens its own session, so the store stays thread-safe.
        self._workloads = WorkloadRepository(self._sessions)
        self._sweeps = SweepRepository(self._sessions)
        self._leases = LeaseRepository(self._sessions)
        """Holds what this store saw of other coordinators' leases, and since when."""
        self._trials = TrialRepository(self._sessions)
        self._cards = CardRepository(self._sessions)
        self._views = ViewRepository(self._sessions)

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

    # --- workloads ------------------------------------------------------------------

    def upsert_workload(self, workload: Workload) -> WorkloadRecord:
        """Store ``workload`` under its name; an existing one gets the new spec."""
        return self._workloads.upsert_workload(workload)

    def get_workload(self, name: str) -> WorkloadRecord:
        return self._workloads.get_workload(name)

    def list_workloads(self) -> list[WorkloadRecord]:
        return self._workloads.list_workloads()

    # --- sweeps ---------------------------------------------------------------------

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
        return self._sweeps.create_sweep(
            name=name, workload=workload, slo=slo, space=space, model=model, gpu=gpu,
            strategy=strategy, mode=mode, budget=budget, seed=seed, owner=owner,
            optuna_study_name=optuna_study_name, claimed_by=claimed_by, executor=executor)

    def get_sweep(self, sweep_id: int) -> SweepRecord:
        return self._sweeps.get_sweep(sweep_id)

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
        return self._sweeps.list_sweeps(
            status=status, workload=workload, owner=owner, offset=offset, limit=limit)

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
        return self._sweeps.update_sweep(
            sweep_id, status=status, progress=progress, stop_reason=stop_reason,
            optuna_study_name=optuna_study_name, lease=lease)

    def cancel_sweep(self, sweep_id: int, reason: str = "cancelled") -> SweepRecord:
        """Mark the sweep cancelled (its coordinator sees it at its next heartbeat).

        Idempotent on a cancelled sweep; :class:`Conflict` on a finished one.
        """
        return self._sweeps.cancel_sweep(sweep_id, reason)

    def requeue_sweep(self, sweep_id: int) -> SweepRecord:
        """Resume a failed or cancelled sweep: back to queued for a coordinator to claim."""
        return self._sweeps.requeue_sweep(sweep_id)

    # --- leases ---------------------------------------------------------------------

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
        return self._leases.claim_sweep(
            sweep_id, coordinator, stale_after_s=stale_after_s, executor=executor)

    def claim_next_sweep(self, coordinator: str, *, stale_after_s: float | None = None,
                         executor: ExecutorChoice | None = None) -> SweepRecord | None:
        """Claim the oldest queued sweep (or orphaned running one, see :meth:`claim_sweep`)
        that ``executor`` may run: one recorded on another kind of executor is left for
        a resume that names it (its trials would be measured another way). The executor
        is matched in the query, so no number of other sweeps hides a claimable one."""
        return self._leases.claim_next_sweep(
            coordinator, stale_after_s=stale_after_s, executor=executor)

    def heartbeat_sweep(self, lease: Lease) -> None:
        """Say the lease's holder is still running the sweep.

        :class:`LeaseLost` when the sweep was claimed again since (taken over, resumed
        elsewhere); :class:`Conflict` when it is no longer running (cancelled, finished).
        Either way the coordinator should stop.
        """
        return self._leases.heartbeat_sweep(lease)

    # --- trials ---------------------------------------------------------------------

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
        return self._trials.start_trial(
            sweep_id, number=number, params=params, spec=spec, attempt=attempt, worker=worker,
            node=node, status=status, lease=lease)

    def heartbeat_trial(self, trial_id: int, *, lease: Lease | None = None) -> None:
        """The trial is still being worked on; :class:`Conflict` once it has finished or is
        lost (its params were handed back for re-enqueue: stop and drop the result)."""
        return self._trials.heartbeat_trial(trial_id, lease=lease)

    def finish_trial(self, trial_id: int, result: TrialResult, *,
                     lease: Lease | None = None) -> TrialRecord:
        """Store what the trial learned: status, failure, objective, capacity, diagnosis,
        timings, and the whole result as JSON. Only an unfinished trial can finish
        (:class:`Conflict` otherwise, e.g. after orphan recovery marked it lost), and
        under ``lease`` only while the lease is current (:class:`LeaseLost`)."""
        return self._trials.finish_trial(trial_id, result, lease=lease)

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
        return self._trials.record_trial(
            sweep_id, role=role, number=number, params=params, spec=spec, result=result,
            attempt=attempt, repeat=repeat, repeat_of=repeat_of, worker=worker, lease=lease)

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
        return self._trials.recover_orphans(sweep_id, lease=lease)

    def get_trial(self, trial_id: int) -> TrialRecord:
        return self._trials.get_trial(trial_id)

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
        return self._trials.list_trials(
            sweep_id, status=status, role=role, offset=offset, limit=limit)

    def set_capacity(self, trial_id: int, *, low: float, high: float | None, gpus: int,
                     repeats: int, capacity: float | None = None,
                     lease: Lease | None = None) -> TrialRecord:
        """Give a search trial the capacity interval its confirmation measured in
        ``repeats`` re-runs (its capacity the interval's centre, its objective that per
        GPU; ``capacity`` None: the interval's geometric centre): the number every
        surface reads of the configuration from now on. Its search result stays in
        ``result``."""
        return self._trials.set_capacity(
            trial_id, low=low, high=high, gpus=gpus, repeats=repeats, capacity=capacity,
            lease=lease)

    def mark_confirmed(self, trial_id: int, confirmed: bool = True, *, repeats: int = 0,
                       lease: Lease | None = None) -> TrialRecord:
        """Mark an ``ok`` trial as confirmed (it held up in ``repeats`` re-runs); it then
        ranks first in ``best_config_per_workload``."""
        return self._trials.mark_confirmed(trial_id, confirmed, repeats=repeats, lease=lease)

    # --- experiment cards -----------------------------------------------------------

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
        return self._cards.add_card(
            sweep_id, step=step, symptom=symptom, hypothesis=hypothesis, variable=variable,
            values=values, expected_direction=expected_direction, evidence=evidence, result=result,
            verdict=verdict, rollback=rollback, controls=controls, stop_condition=stop_condition,
            lease=lease)

    def resolve_card(self, card_id: int, *, result: Mapping[str, Any], verdict: Verdict,
                     rollback: Any = None, values: Sequence[Any] | None = None,
                     lease: Lease | None = None) -> CardRecord:
        """Write a card's outcome once its experiment has run (and, with ``values``,
        every value it tried: a line search adds values as it goes)."""
        return self._cards.resolve_card(
            card_id, result=result, verdict=verdict, rollback=rollback, values=values, lease=lease)

    def list_cards(self, sweep_id: int) -> list[CardRecord]:
        return self._cards.list_cards(sweep_id)

    # --- best configurations (the views) --------------------------------------------

    def best_config_per_workload(self) -> list[BestConfig]:
        """Every row of the ``best_config_per_workload`` view."""
        return self._views.best_config_per_workload()

    def without_passing_config(self, workload: str | None = None) -> list[NoPassingConfig]:
        """Rows of ``workloads_without_passing_config`` (of one workload, if named):
        measured groups where no configuration met the SLO."""
        return self._views.without_passing_config(workload)

    def best_for_workload(self, name: str) -> list[BestConfig]:
        """The best configuration of workload ``name`` per (model, gpu, slo).

        Empty when nothing was measured ok yet; :class:`NotFound` for an unknown workload.
        """
        return self._views.best_for_workload(name)
