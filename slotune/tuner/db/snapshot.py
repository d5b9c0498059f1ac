"""What the read surfaces see of a workload: one snapshot, loaded once, then plain data.

The report, a capacity sweep's answer, the planner, the frontier and rescoring read the
same rows — a workload, its sweeps, their trials and cards, its best-config rows — and
are functions of them (:mod:`slotune.tuner.planning`, :mod:`slotune.tuner.report`); none holds a
database handle. :func:`load_workload` reads them in one go through the store's public
methods; each sweep's SLO is parsed once, here, into an :class:`~slotune.workers.contracts.SLO`.

:func:`change_key` is the cheap question the API's cache asks per request (one indexed
query): a value that differs whenever any row a snapshot holds was inserted, updated or
deleted — the workload's ``updated_at``, and per table (sweeps, trials, cards) the rows'
count, largest id and the sum of their ``row_version`` (bumped by the database on every
update: migration 0011). It is read *before* the snapshot it keys, so a snapshot is
always at least as new as its key and a write that lands between the two is seen by the
next request's key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from slotune.tuner.db.models import ExperimentCardRow, Sweep, SweepTrial, WorkloadRow
from slotune.tuner.db.records import (
    BestConfig,
    CardRecord,
    SweepRecord,
    TrialRecord,
    WorkloadRecord,
)
from slotune.tuner.db.store import Store
from slotune.workers.contracts import SLO

__all__ = ["ChangeKey", "SweepSnapshot", "WorkloadSnapshot", "change_key", "load_workload",
           "workload_of_sweep"]

ChangeKey = tuple[Any, ...]
"""Opaque and hashable: equal keys, equal snapshots."""


@dataclass(frozen=True, slots=True)
class SweepSnapshot:
    """One sweep as the read surfaces see it."""

    sweep: SweepRecord
    slo: SLO
    """``sweep.slo``, parsed once."""
    trials: tuple[TrialRecord, ...]
    """Every boot it paid for (search runs, repeats, baselines; any status), in
    :meth:`~slotune.tuner.db.store.Store.list_trials` order."""
    cards: tuple[CardRecord, ...]

    def ok_trials(self) -> Iterator[TrialRecord]:
        """Its finished trials (status ``ok``), in order."""
        return (t for t in self.trials if t.status == "ok")


@dataclass(frozen=True, slots=True)
class WorkloadSnapshot:
    """A workload, every sweep of it (newest first) and its best-config rows."""

    workload: WorkloadRecord
    sweeps: tuple[SweepSnapshot, ...]
    best: tuple[BestConfig, ...]
    """``best_config_per_workload`` rows of this workload (with their equivalents)."""

    @property
    def name(self) -> str:
        return self.workload.name

    def sweep(self, sweep_id: int) -> SweepSnapshot | None:
        return next((s for s in self.sweeps if s.sweep.id == sweep_id), None)

    def trial(self, trial_id: int) -> TrialRecord | None:
        return next((t for s in self.sweeps for t in s.trials if t.id == trial_id), None)


def load_workload(store: Store, name: str) -> WorkloadSnapshot:
    """Everything the read surfaces use of workload ``name``.

    :class:`~slotune.tuner.db.errors.NotFound` for an unknown workload."""
    workload = store.get_workload(name)
    sweeps = tuple(
        SweepSnapshot(sweep=s, slo=SLO.model_validate(s.slo),
                      trials=tuple(store.list_trials(s.id, role="any", limit=None).data),
                      cards=tuple(store.list_cards(s.id)))
        for s in store.list_sweeps(workload=name, limit=None).data)
    return WorkloadSnapshot(workload=workload, sweeps=sweeps,
                            best=tuple(store.best_for_workload(name)))


def workload_of_sweep(store: Store, sweep_id: int) -> str:
    """The workload sweep ``sweep_id`` measured (:class:`~slotune.tuner.db.errors.NotFound`)."""
    return store.get_sweep(sweep_id).workload


def change_key(store: Store, name: str) -> ChangeKey:
    """A key that changes whenever anything :func:`load_workload` reads of ``name`` does
    (see the module docstring); one query over indexed columns, no JSON read."""
    sweep_ids = (select(Sweep.id).join(WorkloadRow, Sweep.workload_id == WorkloadRow.id)
                 .where(WorkloadRow.name == name))

    # Three aggregates a table, each its own scalar subquery: one round trip, and a join
    # would multiply a sweep's version by its trials.
    query = select(
        select(WorkloadRow.updated_at).where(WorkloadRow.name == name).scalar_subquery(),
        *(select(agg).where(Sweep.id.in_(sweep_ids)).scalar_subquery()
          for agg in (func.count(Sweep.id), func.max(Sweep.id),
                      func.coalesce(func.sum(Sweep.row_version), 0))),
        *(select(agg).where(SweepTrial.sweep_id.in_(sweep_ids)).scalar_subquery()
          for agg in (func.count(SweepTrial.id), func.max(SweepTrial.id),
                      func.coalesce(func.sum(SweepTrial.row_version), 0))),
        *(select(agg).where(ExperimentCardRow.sweep_id.in_(sweep_ids)).scalar_subquery()
          for agg in (func.count(ExperimentCardRow.id), func.max(ExperimentCardRow.id),
                      func.coalesce(func.sum(ExperimentCardRow.row_version), 0))),
    )
    # The store has no public method for this one question; its session is the one
    # place storage errors are translated, so the query runs there (package-private).
    with store._session() as session:
        row = session.execute(query).one()
    return (name, *row)
