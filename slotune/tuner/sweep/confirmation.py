"""The confirmation phase: re-run a sweep's top configurations and pick the winner.

A search result is one run; the winner must hold the SLO when run again. The top
configurations (best first, distinct params) are repeated in interleaved order — repeat
0 of each, then repeat 1 of each, … — through the sweep's :class:`TrialLauncher` (so
repeats share the GPUs like any trial, and a lost worker or a distorted run is run again
as in the search). :func:`slotune.tuner.strategies.confirm` then picks the best lower confidence
bound; a winner whose bound is not above zero did not hold and is not confirmed.

Every attempt is handed to ``record`` as it ends (:mod:`slotune.tuner.sweep.confirming` stores it as
a ``repeat`` row linked to the trial it re-runs: a repeat costs a full boot, and its timings,
metrics and engine facts are kept like any trial's); repeats a resumed sweep already stored come in
as ``done`` and are not run again. Storing is the sweep's side
(:mod:`slotune.tuner.sweep.confirming`): nothing here touches the database.

**Capacity mode.** Each repeat measures its candidate afresh — its own boot, a fresh
workload sample, the space's full probe design (not the search's ranking one), a bracket
of its own — so the number reported for the winner never comes from the search runs that
made it a candidate. A candidate's interval is the hull of its repeats' intervals (the
lowest rate any repeat showed to pass, the highest any showed to fail), its capacity the
geometric mean of its repeats' capacities; it *held* when every repeat found a rate that
passes. The leader is the
held candidate with the highest capacity per GPU; the candidates whose per-GPU intervals
overlap the leader's are its *equivalent set*, measurements cannot tell them apart; the
winner is picked among them by :func:`choose_capacity`'s stated rule: lossless before
lossy, fewer GPUs a replica, then the higher capacity per GPU.

**Goodput mode.** The winner is the candidate with the highest lower confidence bound of
its objective, mean − z·stdev/√n (:func:`choose`): one lucky run should not crown a
configuration, and the interleaved order makes drift over the session (thermal, a
neighbour's load) hit every candidate alike. Within noise of the best bound, more SLO
headroom wins (the same tie-break as the search).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slotune.tuner.strategies import params_key, rank
from slotune.tuner.sweep.launcher import TrialLauncher, gpu_hours, retry_as
from slotune.workers.contracts import KnobValue, TrialResult, TrialSpec

Slot = tuple[int, int]
"""(candidate index, repeat)."""

SpecFor = Callable[[int, int, int], TrialSpec]
"""The spec of candidate ``i``'s repeat ``r``, attempt ``a`` (from 1)."""
Record = Callable[[Slot, int, TrialSpec, TrialResult], None]
Started = Callable[[Slot, int], None]
"""Told each attempt (slot, attempt number) as it is handed to the launcher (the log)."""
"""Called with (slot, attempt, spec, result) for every attempt that ends."""

POLL_S = 2.0
LCB_Z = 1.645
"""One-sided 95 %: the bound a winner's objective stays above in 19 runs of 20."""
WITHIN_NOISE = 0.02
"""Bounds this close to the best (relative) are a tie, broken by SLO headroom."""


@dataclass(frozen=True, slots=True)
class Repeated:
    """One candidate's repeats: their objectives and headrooms, the bound they give, and in
    capacity mode the interval they show together."""

    objectives: tuple[float, ...]
    headrooms: tuple[float, ...]
    mean: float
    stdev: float
    lcb: float
    low: float | None = None
    """Capacity mode: the lowest rate a repeat showed to pass (None: one passed none)."""
    high: float | None = None
    """Capacity mode: the highest rate a repeat showed to fail (None: one found none)."""
    centre: float | None = None
    """Capacity mode: the geometric mean of the repeats' capacities (each its interval's
    centre): averaging fresh samples narrows what one sample's luck moves."""

    @classmethod
    def of(cls, results: Sequence[TrialResult]) -> Repeated:
        objs = tuple(r.objective for r in results)
        mean = statistics.fmean(objs) if objs else 0.0
        sd = statistics.stdev(objs) if len(objs) > 1 else 0.0
        heads = tuple(r.headroom if r.headroom is not None else math.inf for r in results)
        lows = [r.capacity_low or 0.0 for r in results if r.status == "ok"]
        highs = [r.capacity_high for r in results if r.capacity_high is not None]
        held = bool(results) and len(lows) == len(results) and min(lows) > 0
        centres = [r.capacity for r in results if r.capacity]
        return cls(objs, heads, mean, sd, mean - LCB_Z * sd / math.sqrt(max(len(objs), 1)),
                   low=min(lows) if held else None,
                   high=max(highs) if held and len(highs) == len(results) else None,
                   centre=statistics.geometric_mean(centres) if held else None)

    @property
    def held(self) -> bool:
        """Capacity mode: every repeat showed a rate that passes."""
        return self.low is not None

    @property
    def capacity(self) -> float | None:
        """Capacity mode: the capacity the repeats measured (:attr:`centre`), inside their
        interval."""
        return self.centre


@dataclass(frozen=True, slots=True)
class Trait:
    """What the capacity rule reads of a candidate besides its measurements."""

    lossy: bool
    gpus: int


def choose_capacity(candidates: Sequence[Repeated], traits: Sequence[Trait]
                    ) -> tuple[int | None, list[int]]:
    """The winner among capacity-mode candidates and its equivalent set (module
    docstring): (None, []) when none held."""
    held = [i for i, c in enumerate(candidates) if c.held]
    if not held:
        return None, []

    def per_gpu(i: int, value: float | None) -> float:
        return (value if value is not None else math.inf) / traits[i].gpus

    leader = max(held, key=lambda i: (per_gpu(i, candidates[i].capacity), -i))
    lead_low, lead_high = per_gpu(leader, candidates[leader].low), \
        per_gpu(leader, candidates[leader].high)
    equivalent = [i for i in held if per_gpu(i, candidates[i].low) <= lead_high
                  and per_gpu(i, candidates[i].high) >= lead_low]
    winner = min(equivalent, key=lambda i: (traits[i].lossy, traits[i].gpus,
                                            -per_gpu(i, candidates[i].capacity), i))
    return winner, equivalent


def choose(candidates: Sequence[Repeated]) -> int | None:
    """The index of the winner among ``candidates`` (module docstring); None if none."""
    if not candidates:
        return None
    top = max(c.lcb for c in candidates)

    def key(i: int) -> tuple[int, float, float]:
        c = candidates[i]
        within = top > 0 and c.lcb >= top * (1 - WITHIN_NOISE)
        return (0, statistics.fmean(c.headrooms), -c.lcb) if within else (1, -c.lcb, 0.0)

    return min(range(len(candidates)), key=key)


def top_configurations(results: Sequence[tuple[Mapping[str, KnobValue], TrialResult]],
                       n: int) -> list[int]:
    """Indexes into ``results`` of the ``n`` best ok configurations, distinct params."""
    if n <= 0:
        return []  # confirmation is off
    ok = [i for i, (_, res) in enumerate(results) if res.status == "ok" and res.objective > 0]
    chosen: list[int] = []
    seen: set[str] = set()
    for j in rank([results[i][1] for i in ok]):
        key = params_key(dict(results[ok[j]][0]))
        if key not in seen:
            seen.add(key)
            chosen.append(ok[j])
        if len(chosen) == n:
            break
    return chosen


@dataclass
class ConfirmationOutcome:
    """What the repeats showed. ``winner``: the index of the chosen candidate, None when
    there was none; ``held``: whether it held (its lower bound is above zero; in capacity
    mode every repeat passed a rate): it is confirmed."""

    winner: int | None
    held: bool
    mean: float
    table: list[dict[str, Any]]
    """One row per candidate: runs, mean, stdev, lcb, winner, equivalent, and in capacity
    mode its interval (capacity, capacity_low, capacity_high), and each repeat's summary."""
    repeated: list[Repeated] = field(default_factory=list)
    equivalent: list[int] = field(default_factory=list)
    """Capacity mode: the candidates the winner's interval cannot be told from."""


def _summary(result: TrialResult) -> dict[str, Any]:
    return {"objective": result.objective, "status": result.status,
            "failure": result.failure, "gate_passed": result.gate_passed,
            "p99_ttft_ms": result.metrics.get("p99_ttft_ms"),
            "p99_tpot_ms": result.metrics.get("p99_tpot_ms"),
            "early_abort": result.early_abort, "capacity": result.capacity,
            "capacity_low": result.capacity_low, "capacity_high": result.capacity_high}


@dataclass
class ConfirmationPhase:
    """Runs ``repeats`` of each candidate through ``launcher``; see the module docstring."""

    launcher: TrialLauncher[Slot]
    spec_for: SpecFor
    repeats: int
    record: Record = lambda slot, attempt, spec, result: None
    started: Started = lambda slot, attempt: None
    done: Mapping[Slot, TrialResult] = field(default_factory=dict)
    """Repeats that ran before (a resumed sweep): their results stand."""
    attempts: Mapping[Slot, int] = field(default_factory=dict)
    """Attempts already made per slot (a resumed sweep): new ones are numbered after them."""
    gpu_hours: float = 0.0
    """GPU-hours the repeats used so far (also when the phase was stopped)."""
    _attempts: dict[Slot, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._attempts.update(self.attempts)

    def run(self, candidates: Sequence[Mapping[str, KnobValue]], *,
            keep_going: Callable[[], bool] = lambda: True,
            traits: Sequence[Trait] | None = None) -> ConfirmationOutcome | None:
        """The outcome; None when ``keep_going`` said stop (what ran is cancelled).
        ``traits`` (one per candidate): a capacity-mode confirmation, picked by
        :func:`choose_capacity`; None: by the objective's lower bound."""
        queue: list[Slot] = [(i, r) for r in range(self.repeats) for i in range(len(candidates))
                             if (i, r) not in self.done]
        runs: dict[Slot, TrialResult] = dict(self.done)
        specs: dict[Slot, TrialSpec] = {}
        while queue or len(self.launcher):
            if not keep_going():
                self.launcher.cancel_all()
                return None
            # Start what the GPU share allows, in interleaved order.
            while queue:
                slot = queue[0]
                spec = specs.get(slot) or self._next_attempt(slot)
                specs[slot] = spec
                if not self.launcher.reserve(spec):
                    break
                self.launcher.submit(spec, slot)
                self.started(slot, self._attempts[slot])
                queue.pop(0)
                del specs[slot]
            if not len(self.launcher):
                time.sleep(0.2)  # the GPUs are held by other sweeps of this coordinator
                continue
            for launched, result in self.launcher.wait(POLL_S):
                slot = launched.tag
                self.gpu_hours += gpu_hours(result, launched.spec.gpus)
                retry = retry_as(result, self._attempts[slot])
                self.record(slot, self._attempts[slot], launched.spec,
                            result if retry is None else retry)
                if retry is not None:
                    # As in the search: it says nothing about the configuration.
                    self.launcher.resubmit(self._next_attempt(slot), slot)
                    self.started(slot, self._attempts[slot])
                    continue
                runs[slot] = result
        return self._outcome(candidates, runs, traits)

    def _next_attempt(self, slot: Slot) -> TrialSpec:
        attempt = self._attempts[slot] = self._attempts.get(slot, 0) + 1
        return self.spec_for(slot[0], slot[1], attempt)

    def _outcome(self, candidates: Sequence[Mapping[str, KnobValue]],
                 runs: dict[Slot, TrialResult], traits: Sequence[Trait] | None
                 ) -> ConfirmationOutcome:
        repeated = [Repeated.of([runs[(i, r)] for r in range(self.repeats)])
                    for i in range(len(candidates))]
        equivalent: list[int] = []
        if traits is not None:
            winner, equivalent = choose_capacity(repeated, traits)
        else:
            winner = choose(repeated)
        table = [{
            "params": dict(params), "runs": list(c.objectives), "mean": c.mean,
            "stdev": c.stdev, "lcb": c.lcb, "winner": i == winner,
            "details": [_summary(runs[(i, r)]) for r in range(self.repeats)],
            "candidate": i,
            **({} if traits is None else {
                "capacity": c.capacity, "capacity_low": c.low, "capacity_high": c.high,
                "held": c.held, "equivalent": i in equivalent}),
        } for i, (params, c) in enumerate(zip(candidates, repeated, strict=True))]
        if winner is None:
            return ConfirmationOutcome(None, False, 0.0, table, repeated, equivalent)
        chosen = repeated[winner]
        held = chosen.held if traits is not None else chosen.lcb > 0
        return ConfirmationOutcome(winner, held, chosen.mean, table, repeated, equivalent)
