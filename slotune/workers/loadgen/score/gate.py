"""The SLO gate: the one rule that says whether a run holds an SLO.

A run holds its SLO when (in this order):

1. its failed requests are within the error budget (``failed ÷ requests ≤
   max_error_rate``; a run that failed more is not scored at all);
2. at least one request completed;
3. for every targeted metric, the SLO's percentile of the values the gate reads is
   within the target — a failed request counting as an infinitely slow one (vLLM's
   summaries leave failures out, which would let a run that drops requests pass).

Live scoring (:func:`slotune.workers.loadgen.score.scoring.score`, over a run's records), the trial
pipeline's error budget (:func:`slotune.workers.trial.capacity.over_error_budget`) and the rescoring
of stored probes under another SLO (:func:`slotune.tuner.planning.rescore.probe_verdict`, over the
percentiles a probe kept) all ask :func:`slo_gate`, so a stored probe is gated exactly as the live
run that produced it was. Callers word their own reasons for a budget or an empty run (those strings
are part of stored results); the broken targets' sentence is :attr:`SloGate.broken_reason`, shared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, NamedTuple

from slotune.workers.contracts import SLO, SLOMetric

__all__ = ["CONSTRAINT_CAP", "GateCheck", "GateOutcome", "SloGate", "over_budget",
           "slo_gate"]

CONSTRAINT_CAP = 1000.0
"""observed/target − 1 is capped here so a constraint stays finite (failures: infinite)."""

GateOutcome = Literal["pass", "over_budget", "none_completed", "targets_broken"]


class GateCheck(NamedTuple):
    """One SLO target against its observed percentile (ms; None = infinite: failures).

    (Named tuples, this and :class:`SloGate`: immutable, and cheap enough to build for
    every cell of the frontier's capacity grid, thousands of gates a frontier.)"""

    metric: SLOMetric
    target_ms: float
    observed_ms: float | None
    ok: bool
    constraint: float
    """observed/target − 1, ≤ 0 feasible, capped at CONSTRAINT_CAP."""
    margin_ms: float | None
    """target − observed (positive = headroom)."""

    @property
    def ratio(self) -> float:
        """observed/target, uncapped (``inf`` for an infinite percentile)."""
        return math.inf if self.observed_ms is None else self.observed_ms / self.target_ms


class SloGate(NamedTuple):
    """A run under one SLO: the outcome and every target's check (see the module)."""

    outcome: GateOutcome
    percentile: float
    checks: tuple[GateCheck, ...]

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def broken_reason(self) -> str:
        """``p99 ttft 412.0 ms > 300 ms; p99 tpot infinite (failed requests)``: the broken
        targets, in the SLO's order (empty when none broke)."""
        return "; ".join(
            f"p{self.percentile:g} {c.metric} "
            + ("infinite (failed requests)" if c.observed_ms is None
               else f"{c.observed_ms:.1f} ms")
            + f" > {c.target_ms:g} ms"
            for c in self.checks if not c.ok)

    @property
    def worst_ratio(self) -> float:
        """max over the targets of observed/target (``inf``: failures; 0 without targets)."""
        return max([c.ratio for c in self.checks], default=0.0)


def over_budget(requests: int, failed: int, max_error_rate: float) -> bool:
    """Whether ``failed`` of ``requests`` exceeds the error budget (no requests: never)."""
    return bool(requests) and failed / requests > max_error_rate


def slo_gate(slo: SLO, observed_ms: Mapping[SLOMetric, float | None], *, requests: int,
             failed: int, max_error_rate: float | None = None) -> SloGate:
    """Gate a run: ``observed_ms`` holds, per targeted metric, its percentile at
    ``slo.percentile`` over the gate's values (None: infinite, failed requests); a metric
    missing from it is not checked (a caller that cannot see one decides for itself).
    ``max_error_rate`` None: no error budget (live scoring applies it apart, before)."""
    checks = tuple([_check(metric, target, observed_ms[metric])
                    for metric, target in slo.targets.items() if metric in observed_ms])
    if max_error_rate is not None and over_budget(requests, failed, max_error_rate):
        outcome: GateOutcome = "over_budget"
    elif requests == failed:
        outcome = "none_completed"
    elif not all(c.ok for c in checks):
        outcome = "targets_broken"
    else:
        outcome = "pass"
    return SloGate(outcome, slo.percentile, checks)


def _check(metric: SLOMetric, target_ms: float, observed: float | None) -> GateCheck:
    if observed is None or observed == math.inf:
        return GateCheck(metric, target_ms, None, False, CONSTRAINT_CAP, None)
    constraint = min(observed / target_ms - 1.0, CONSTRAINT_CAP)
    return GateCheck(metric, target_ms, observed, observed <= target_ms, constraint,
                     target_ms - observed)
