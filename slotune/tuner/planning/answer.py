"""The seed's whole answer to a capacity sweep, in one sentence.

"Given p99 TTFT ≤ 300 ms and TPOT ≤ 50 ms at 20 req/s, how do we serve the most traffic
and how many instances do we need?" A capacity-mode sweep measured what one replica of
each configuration carries; the capacity planner
(:func:`slotune.tuner.planning.planner.plan_capacity`, the same one ``slotune plan`` and ``POST
/api/v1/capacity`` ask) sizes the workload's own rate from it, with its default headroom and the
configured GPU prices. The terminal (``sweep run``) and the report lead with the same sentence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slotune.tuner.db.records import SweepRecord
from slotune.tuner.db.snapshot import WorkloadSnapshot
from slotune.tuner.planning.planner import (
    DEFAULT_HEADROOM,
    CapacityOption,
    CapacityPlan,
    PlanError,
    plan_capacity,
)
from slotune.tuner.settings import get_settings
from slotune.tuner.sweep.progress import SweepProgress
from slotune.workers.contracts import SLO, QualityVerdict
from slotune.workers.sim.catalog import UnknownCatalogEntry, get_gpu

__all__ = ["SweepAnswer", "capacity_text", "carries", "sweep_answer", "twin_sentence"]


@dataclass(frozen=True, slots=True)
class SweepAnswer:
    plan: CapacityPlan
    slo: SLO
    """The sweep's SLO (the plan's, parsed once)."""
    quality: str | None
    """What the chosen configuration's quality gate found (None: it is lossless)."""
    twin: str | None = None
    """A twin sweep: how many configurations were measured and how many only screened."""

    @property
    def sentence(self) -> str:
        plan, slo = self.plan, self.slo
        targets = " / ".join(f"{m.upper()} ≤ {v:g} ms" for m, v in slo.targets.items())
        config = ", ".join(f"{k}={v}" for k, v in plan.config.items())
        cost = "" if plan.cost_per_hour is None else f", ${plan.cost_per_hour:,.2f}/h"
        checked = f" ({self.quality})" if self.quality else ""
        return (f"{plan.model} on {_replica(plan)} carries {carries(plan)} "
                f"under p{slo.percentile:g} {targets} with {config}{checked}; "
                f"{plan.target_rps:g} req/s needs {plan.replicas} "
                f"replica{'s' if plan.replicas != 1 else ''} ({plan.gpus} "
                f"GPU{'s' if plan.gpus != 1 else ''}{cost}, {plan.headroom:.0%} headroom, "
                f"sized on {plan.per_replica_rps:.3g} req/s a replica: the interval's lower "
                "end)" + (f"; {self.twin}" if self.twin else ""))


def capacity_text(capacity: float | None, low: float | None, high: float | None) -> str:
    """A capacity with its interval: ``5.92 (5.52–6.35)``; ``≥ 32`` for an open one."""
    if capacity is None:
        return "—"
    if low is None or (low == capacity and high is None):
        return f"{capacity:.2f}" if low is None else f"≥ {low:.2f}"
    return f"{capacity:.2f} ({low:.2f}–{'∞' if high is None else f'{high:.2f}'})"


def carries(plan: CapacityPlan | CapacityOption) -> str:
    """What one replica carries, as its interval: "4.8–5.1 req/s" (its lower end alone,
    "≥ 32 req/s", when the search's ceiling passed)."""
    low, high = plan.per_replica_rps, plan.capacity_high_rps
    if high is None:
        return f"≥ {low:.3g} req/s" if plan.capacity_rps is not None else f"{low:.3g} req/s"
    return f"{low:.3g}–{high:.3g} req/s"


def sweep_answer(snapshot: WorkloadSnapshot, sweep: SweepRecord) -> SweepAnswer | None:
    """The answer for a capacity-mode sweep of the snapshot's workload at its own rate;
    None for a goodput sweep, a workload without a finite rate, or nothing that met the
    SLO."""
    if sweep.mode != "capacity":
        return None
    rate = snapshot.workload.spec.get("arrivals", {}).get("request_rate")
    if not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        return None
    try:
        plan = plan_capacity(snapshot, target_rps=float(rate), headroom=DEFAULT_HEADROOM,
                             model=sweep.model, gpu=sweep.gpu, slo=sweep.slo_key,
                             gpu_prices=get_settings().planner.prices())
    except PlanError:
        return None
    if plan.basis != "capacity":
        return None
    measured = snapshot.sweep(sweep.id)
    chosen = snapshot.trial(plan.trial_ids[0])
    result = (chosen.result if chosen is not None else None) or {}
    return SweepAnswer(plan=plan,
                       slo=measured.slo if measured is not None else SLO.model_validate(
                           sweep.slo),
                       quality=_quality(result.get("quality")), twin=twin_sentence(sweep))


def twin_sentence(sweep: SweepRecord) -> str | None:
    """"measured 6 of 144 configurations; the twin screened the rest" (twin sweeps)."""
    twin = SweepProgress.of(sweep.progress).twin
    if twin is None:
        return None
    return (f"measured {twin.booted} of {twin.candidates} configurations; "
            "the twin screened the rest")


def _replica(plan: CapacityPlan) -> str:
    try:
        name = get_gpu(plan.gpu).device_name.removeprefix("NVIDIA ").removeprefix("GeForce ")
    except UnknownCatalogEntry:
        name = plan.gpu
    if plan.gpus_per_replica == 1:
        return f"one {name}"
    return f"{plan.gpus_per_replica} × {name} per replica"


def _quality(stored: object) -> str | None:
    if not isinstance(stored, dict):
        return None  # lossless: nothing was checked
    verdict = QualityVerdict.model_validate(stored)
    lossy = ", ".join(verdict.lossy)
    if not verdict.checked:
        return f"{lossy} not quality-checked: lossy values allowed"
    if verdict.agreement is not None:
        return (f"{lossy} passed the golden-request check: {verdict.agreement:.0%} "
                "token agreement with the lossless baseline")
    return f"{lossy} passed the quality command: score {verdict.score:g}"
