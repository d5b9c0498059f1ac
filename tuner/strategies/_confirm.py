"""Confirm: re-run the top configurations several times, interleaved; pick the best LCB.

One lucky run should not crown a configuration. The top-k are re-measured ``repeats``
times each in round-robin order (A B C A B C …, so drift over the session — thermal,
a neighbour's load — hits every candidate alike), and the winner is the one with the
highest lower confidence bound of its objective: mean − z·stdev/√n. Within noise of
each other, more SLO headroom wins (the same tie-break as the search).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from workers.contracts import KnobValue, TrialResult

__all__ = ["Confirmation", "ConfirmedConfig", "confirm"]

Evaluate = Callable[[Mapping[str, KnobValue], int], TrialResult]
"""(params, repeat index) → result; the repeat index seeds the run's noise."""


@dataclass(frozen=True, slots=True)
class ConfirmedConfig:
    params: dict[str, KnobValue]
    objectives: tuple[float, ...]
    headrooms: tuple[float, ...]
    mean: float
    stdev: float
    lcb: float


@dataclass(frozen=True, slots=True)
class Confirmation:
    """Every candidate's repeats and the winner (``best``: index into ``candidates``)."""

    candidates: tuple[ConfirmedConfig, ...]
    best: int | None
    order: tuple[int, ...] = field(default=())
    """The candidate index of each run, in the order they ran."""

    @property
    def winner(self) -> ConfirmedConfig | None:
        return None if self.best is None else self.candidates[self.best]


def confirm(
    configs: Sequence[Mapping[str, KnobValue]],
    evaluate: Evaluate,
    *,
    repeats: int = 3,
    z: float = 1.645,
    tolerance: float = 0.02,
) -> Confirmation:
    """Re-run ``configs`` (the top-k, best first) ``repeats`` times each, interleaved."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    runs: list[list[TrialResult]] = [[] for _ in configs]
    order: list[int] = []
    for r in range(repeats):
        for i, params in enumerate(configs):
            runs[i].append(evaluate(params, r))
            order.append(i)
    confirmed = []
    for params, results in zip(configs, runs, strict=True):
        objs = tuple(res.objective for res in results)
        mean = statistics.fmean(objs) if objs else 0.0
        sd = statistics.stdev(objs) if len(objs) > 1 else 0.0
        heads = tuple(res.headroom if res.headroom is not None else math.inf for res in results)
        confirmed.append(ConfirmedConfig(dict(params), objs, heads, mean, sd,
                                         mean - z * sd / math.sqrt(len(objs))))
    if not confirmed:
        return Confirmation((), None, ())
    top = max(c.lcb for c in confirmed)

    def key(i: int) -> tuple[int, float, float]:
        c = confirmed[i]
        within = top > 0 and c.lcb >= top * (1 - tolerance)
        return (0, statistics.fmean(c.headrooms), -c.lcb) if within else (1, -c.lcb, 0.0)

    best = min(range(len(confirmed)), key=key)
    return Confirmation(tuple(confirmed), best, tuple(order))
