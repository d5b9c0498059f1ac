"""The views' reads: best configuration per workload, and workloads none passed.

Read-only; each best row comes with the configurations of its sweep whose capacity
intervals per GPU overlap its own (:func:`_with_equivalents`).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from slotune.tuner.db._repository import Repository
from slotune.tuner.db._workloads import workload_by_name
from slotune.tuner.db.models import SweepTrial, best_config_view, no_passing_view
from slotune.tuner.db.records import (
    BestConfig,
    EquivalentConfig,
    NoPassingConfig,
    overlaps,
    per_gpu_interval,
)

__all__ = ["ViewRepository"]


class ViewRepository(Repository):
    """``best_config_per_workload`` and ``workloads_without_passing_config``."""

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
            workload_by_name(session, name)
            rows = session.execute(query).mappings().all()
            return [_with_equivalents(session, BestConfig.model_validate(dict(r)))
                    for r in rows]




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
