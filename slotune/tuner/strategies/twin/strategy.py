"""twin: boot the real engine only where the calibrated simulator cannot rule a config out.

Before each boot the twin (:class:`slotune.tuner.strategies.twin.model.Twin`) predicts every
candidate — the whole space when it has at most :data:`MAX_CANDIDATES` points, a random sample of
that many otherwise — including the ones it expects to be refused or not to fit. The strategy boots
the candidate with the best *optimistic* prediction (prediction × (1 + the twin's error band)),
measures, refits the twin on every measurement so far, and repeats. It stops when no unmeasured
candidate's optimistic prediction beats the best measured objective by more than the measurements'
own noise — the median half-width of their capacity intervals (:func:`measured_noise`): a plateau of
configurations the probes cannot tell apart is not booted one by one — and says so.

Screening is lazy: a prediction made under older factors is kept with an upper bound
(its value scaled by how far the factors have moved since, to the power
:data:`_BOUND_EXPONENT`), and only the candidates whose bound reaches the top are
re-predicted; the one about to boot is re-predicted with the full virtual trial, and that
prediction is what the report sets against the measurement.

The error band is measured, not assumed: the largest relative error of the twin's last
three pre-boot predictions (at least :data:`~slotune.tuner.strategies.twin.model.MIN_BAND`); until
three measurements exist it is :data:`~slotune.tuner.strategies.twin.model.PRIOR_BAND`.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies._base import Proposal, Strategy, StudySource, params_key
from slotune.tuner.strategies._ranking import NOISE_TOLERANCE
from slotune.tuner.strategies.twin import model as twin_model
from slotune.tuner.strategies.twin.factors import TwinFactors
from slotune.workers.contracts import KnobValue, TrialResult

__all__ = ["MAX_CANDIDATES", "TwinCall", "TwinStrategy"]

MAX_CANDIDATES = 4096
"""Spaces up to this size are screened whole; larger ones by a random sample of this size."""
_BOUND_EXPONENT = 1.5
"""How fast an objective can move with the factors (capacity is about linear in a step
time, a little faster near an SLO wall): the stale prediction's bound."""
_RANKING_SHOWN = 10
_BAND_SAMPLES = 3
"""Pre-boot errors the band is taken from (the largest of the last ones): two
configurations booted side by side can agree with the twin by luck."""
_MAX_CHECKS = 3
"""Full virtual trials per pick at most: past that the best checked candidate boots."""


@dataclass(slots=True)
class TwinCall:
    """What the twin predicted for one configuration it booted, and what was measured."""

    number: int
    params: dict[str, KnobValue]
    predicted: float
    band: float
    failure: str | None
    measured: float | None = None
    measured_low: float | None = None
    """Capacity mode: the objective at the interval's low end (the highest rate shown to
    pass); the measurement is the interval [measured_low, measured_high]."""
    measured_high: float | None = None
    """Capacity mode: the objective at the interval's high end (the lowest rate shown to
    fail)."""
    status: str | None = None
    measured_failure: str | None = None

    @property
    def error(self) -> float | None:
        """How far the prediction fell outside what was measured, relative to it: 0 inside
        the capacity bracket, else the distance to its nearer end ÷ the measurement (1
        when it predicted a win that measured 0)."""
        if self.measured is None or self.status != "ok":
            return None
        if self.measured <= 0:
            return 1.0 if self.predicted > 0 else 0.0
        low = self.measured if self.measured_low is None else self.measured_low
        high = self.measured if self.measured_high is None else self.measured_high
        if low <= self.predicted <= high:
            return 0.0
        nearer = low if self.predicted < low else high
        return abs(self.predicted - nearer) / self.measured

    def as_dict(self) -> dict[str, Any]:
        return {"number": self.number, "params": self.params,
                "predicted": round(self.predicted, 4), "band": round(self.band, 4),
                "predicted_failure": self.failure,
                "measured": None if self.measured is None else round(self.measured, 4),
                "measured_low": (None if self.measured_low is None
                                 else round(self.measured_low, 4)),
                "measured_high": (None if self.measured_high is None
                                  else round(self.measured_high, 4)),
                "status": self.status, "measured_failure": self.measured_failure,
                "error": None if self.error is None else round(self.error, 4)}


@dataclass(slots=True)
class _Entry:
    params: dict[str, KnobValue]
    prediction: twin_model.Prediction | None = None
    factors: TwinFactors | None = None


class TwinStrategy(Strategy):
    """Multi-fidelity search: the twin screens, the real engine measures (module docstring)."""

    name = "twin"

    def __init__(self, space: SearchSpace, study: StudySource = None, *,
                 seed: int | None = None, factors: TwinFactors | Mapping[str, float] | None = None,
                 warm_start: str | None = None, engine_version: str | None = None) -> None:
        super().__init__(space, study, seed=seed)
        start = factors if isinstance(factors, TwinFactors) else (
            TwinFactors.from_dict(dict(factors)) if factors is not None else TwinFactors())
        self.twin = twin_model.Twin(space, start)
        self.warm_start = warm_start
        """Where the starting factors came from (a sentence), or None: the shipped prior."""
        self.warm_version = engine_version
        """The engine version the warm start was fitted on."""
        self.engine_version: str | None = None
        self.notes: list[str] = []
        self.calls: dict[int, TwinCall] = {}
        self.memory_misses = 0
        """Configurations the twin expected to fit that the engine could not start (OOM)."""
        self._entries = {params_key(p): _Entry(p) for p in self._candidates(seed)}
        self._fitted_on = 0
        self._screen_ratios: list[float] = []
        self._repeats: list[tuple[dict[str, KnobValue], TrialResult]] = []
        """Confirmation repeats: measurements the fit uses beside the trials."""

    # --- candidates ----------------------------------------------------------------

    def _candidates(self, seed: int | None) -> list[dict[str, KnobValue]]:
        space = self.space
        if space.is_finite() and space.grid_size() <= MAX_CANDIDATES:
            pool: Iterable[dict[str, KnobValue]] = space.grid()
        else:
            pool = _sample(space, MAX_CANDIDATES, seed)
        return [p for p in pool if space.check(p) is None]

    @property
    def candidates(self) -> int:
        return len(self._entries)

    # --- the band ------------------------------------------------------------------

    @property
    def band(self) -> float:
        errors = [e for call in self.calls.values() if (e := call.error) is not None]
        if len(errors) < _BAND_SAMPLES:
            return twin_model.PRIOR_BAND
        return min(twin_model.PRIOR_BAND,
                   max(twin_model.MIN_BAND, *errors[-_BAND_SAMPLES:]))

    @property
    def noise(self) -> float:
        """What measurements can resolve (:func:`measured_noise` of the boots so far)."""
        return measured_noise(self._known.values())

    # --- asking --------------------------------------------------------------------

    def _next(self) -> optuna.trial.Trial | None:
        best = self._best_measured()
        band = self.band
        noise = self.noise
        # a candidate is worth booting when its optimistic value beats the best by more
        # than the measurements can resolve: one inside that is an equivalent
        # configuration, and booting it could not change the answer
        threshold = (best * (1 + noise) * (1 + 1e-9)
                     if best is not None and best > 0 else -math.inf)
        picked = self._pick(threshold / (1 + band))
        unmeasured = sum(1 for key in self._entries if self._open(key))
        if picked is None:
            if unmeasured == 0:
                self._stop(f"the twin has nothing left to boot: all {self.candidates} "
                           "candidate configurations were measured")
                return None
        else:
            key, prediction = picked
            optimistic = prediction.objective * (1 + band)
            if optimistic > threshold:
                entry = self._entries[key]
                trial = self._ask_params(entry.params)
                self.calls[trial.number] = TwinCall(trial.number, dict(entry.params),
                                                    prediction.objective, band,
                                                    prediction.failure)
                return trial
        if self.pending:
            return None  # the trials in flight may still move the twin: decide after them
        assert best is not None
        self._stop(f"the twin rules out the other {unmeasured} configurations: none can "
                   f"beat {best:.3g} {self._unit()} by more than the measurements' noise "
                   f"(±{noise:.0%}, the capacity intervals' median half-width; twin band "
                   f"±{band:.0%}; screening within ±{self._screen_spread():.0%} of the full "
                   "trial)")
        return None

    def _note(self) -> str:
        if not self.calls:
            return "twin"
        call = self.calls[max(self.calls)]
        return f"twin: predicted {call.predicted:.3g} (band ±{call.band:.0%})"

    def _open(self, key: str) -> bool:
        return key not in self._known and key not in self._in_flight

    def _pick(self, floor: float) -> tuple[str, twin_model.Prediction] | None:
        """The open candidate with the best prediction under the current factors, checked
        with the full trial; None when no candidate can exceed ``floor`` (its bound —
        estimate, screening's spread, and how far the factors moved since — says so).

        Lazy: a candidate is re-screened or checked only when its bound reaches the top.
        After :data:`_MAX_CHECKS` checks the best checked one is returned if it exceeds
        ``floor``; otherwise checking goes on, so that a stop is never decided on a
        screening alone."""
        twin = self.twin
        heap: list[tuple[float, str]] = []
        for key, entry in self._entries.items():
            if self._open(key):
                heap.append((-self._bound(entry), key))
        heapq.heapify(heap)
        checked: list[tuple[float, str]] = []
        while heap:
            bound, key = heapq.heappop(heap)
            if -bound <= floor:
                break  # neither this nor anything below it can win
            entry = self._entries[key]
            fresh = entry.prediction is not None and entry.factors == twin.factors
            if not fresh:
                entry.prediction, entry.factors = twin.predict(entry.params), twin.factors
            elif entry.prediction is not None and not entry.prediction.full:
                screened = entry.prediction.objective
                entry.prediction = twin.predict(entry.params, full=True)
                self._learn_screen_bias(screened, entry.prediction.objective)
                checked.append((entry.prediction.objective, key))
                if len(checked) >= _MAX_CHECKS and max(checked)[0] > floor:
                    break
            else:
                assert entry.prediction is not None
                checked.append((entry.prediction.objective, key))
                break
            heapq.heappush(heap, (-self._bound(entry), key))
        if not checked or max(checked)[0] <= floor:
            return None
        best = max(checked)[1]
        prediction = self._entries[best].prediction
        assert prediction is not None
        return best, prediction

    def _learn_screen_bias(self, screened: float, full: float) -> None:
        """Screening's own error against the full virtual trial (fewer requests per probe
        see a smaller p99): the screened values are scaled by its median ratio."""
        if screened > 0 and full > 0:
            self._screen_ratios.append(full / screened)

    def _bound(self, entry: _Entry) -> float:
        prediction = entry.prediction
        if prediction is None or entry.factors is None:
            return math.inf
        moved = entry.factors.moved_from(self.twin.factors)
        spread = 0.0 if prediction.full else self._screen_spread()
        return self._estimate(prediction) * (1 + spread) * float(moved ** _BOUND_EXPONENT)

    def _screen_spread(self) -> float:
        """How far a screening can sit from its check, after the median bias is taken
        out: the largest relative deviation seen (±50% before any check)."""
        if len(self._screen_ratios) < 2:
            return twin_model.PRIOR_BAND
        middle = statistics.median(self._screen_ratios)
        return max(abs(r / middle - 1) for r in self._screen_ratios)

    def _estimate(self, prediction: twin_model.Prediction) -> float:
        """What the twin expects: a check as is, a screening scaled by screening's median
        ratio to the checks so far (short probes read capacity high)."""
        if prediction.full or not self._screen_ratios:
            return prediction.objective
        return prediction.objective * statistics.median(self._screen_ratios)

    def expected(self, params: Mapping[str, KnobValue]) -> float:
        """The twin's current estimate of a configuration's objective (screened now if it
        never was, or under older factors)."""
        cached = self._entries.get(params_key(params))
        if cached is not None and cached.prediction is not None and cached.prediction.full \
                and cached.factors == self.twin.factors:
            return cached.prediction.objective  # checked under the current factors
        return self._estimate(self.twin.predict(params))

    def _best_measured(self) -> float | None:
        values = [r.objective for r in self._known.values() if r.status == "ok"]
        return max(values, default=None)

    def _unit(self) -> str:
        return "req/s/GPU" if self.space.mode == "capacity" else "req/s of goodput"

    # --- learning ------------------------------------------------------------------

    def _observe(self, proposal: Proposal, result: TrialResult) -> None:
        call = self.calls.get(proposal.number)
        if call is not None:
            call.measured, call.status = result.objective, result.status
            call.measured_failure = result.failure
            call.measured_low, call.measured_high = _interval_objectives(result)
            if result.failure == "oom" and call.failure is None:
                self.memory_misses += 1
        self._check_engine_version(result)
        self._refit()

    def restore(self, results: Iterable[tuple[Mapping[str, KnobValue], TrialResult]]) -> None:
        results = list(results)
        super().restore(results)
        for _, result in results:
            self._check_engine_version(result)
        self._refit()

    def _check_engine_version(self, result: TrialResult) -> None:
        version = result.engine.engine_version
        if version is None or self.engine_version is not None:
            return
        self.engine_version = version
        if self.warm_start and self.warm_version and self.warm_version != version:
            self.notes.append(
                f"engine version {version} differs from the warm start's {self.warm_version}: "
                "the twin starts afresh from the shipped calibration")
            self.twin.factors = self.twin.start = TwinFactors()
            self.warm_start = None

    def observe_repeat(self, params: Mapping[str, KnobValue], result: TrialResult) -> None:
        # One more measurement of the engine: the calibration a later sweep starts from
        # is fitted on it too (a repeat differs from its first run by the world's noise).
        self._repeats.append((dict(params), result))
        self._refit()

    def _refit(self) -> None:
        measured = [(params, result) for params, result in self._measured()
                    if result.status == "ok"]
        if len(measured) <= self._fitted_on:
            return  # a failure adds no probe to fit
        self._fitted_on = len(measured)
        self.twin.fit(measured)

    def _measured(self) -> list[tuple[dict[str, KnobValue], TrialResult]]:
        return [*((_params_of(key), result) for key, result in self._known.items()),
                *self._repeats]

    # --- what it shows -------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The twin's work, for the sweep's progress, the report and the dashboard."""
        twin = self.twin
        ranking = sorted(
            ((self._estimate(entry.prediction), entry) for key, entry in self._entries.items()
             if key not in self._known and entry.prediction is not None),
            key=lambda item: -item[0])[:_RANKING_SHOWN]
        last = twin.fits[-1] if twin.fits else None
        booted = [c for c in self.calls.values() if c.measured is not None]
        return {
            "candidates": self.candidates,
            "screened": sum(1 for e in self._entries.values() if e.prediction is not None),
            "booted": len(booted),
            "band": round(self.band, 4),
            "noise": round(self.noise, 4),
            "gpu": twin.gpu,
            "factors": twin.factors.as_dict(),
            "start_factors": twin.start.as_dict(),
            "warm_start": self.warm_start,
            "engine_version": self.engine_version,
            "notes": list(self.notes),
            "fit": None if last is None else {
                "residual": round(last.residual, 4), "trials": list(last.trials),
                "probes": last.probes, "fitted": list(last.fitted)},
            "screen_cpu_s": round(twin.screen_s, 2),
            "memory_misses": self.memory_misses,
            "calls": [c.as_dict() for c in sorted(self.calls.values(), key=lambda c: c.number)],
            "ranking": [{"params": e.params, "predicted": round(v, 4),
                         "predicted_failure": e.prediction.failure if e.prediction else None}
                        for v, e in ranking],
        }


def _interval_objectives(result: TrialResult) -> tuple[float | None, float | None]:
    """The objective at the capacity interval's two ends (None where it has none)."""
    if not result.capacity or not result.objective:
        return None, None
    per_rate = result.objective / result.capacity  # 1 / the replica's GPUs
    low = result.capacity_low
    high = result.capacity_high
    return (None if low is None else low * per_rate,
            None if high is None else high * per_rate)


def measured_noise(results: Iterable[TrialResult]) -> float:
    """The noise the measurements show: the median half-width of their capacity
    intervals (``(high / low − 1) / 2``), at least :data:`NOISE_TOLERANCE` — what two
    configurations must differ by before a measurement can tell them apart."""
    widths = [(r.capacity_high / r.capacity_low - 1.0) / 2.0 for r in results
              if r.status == "ok" and r.capacity_low and r.capacity_high]
    return max(NOISE_TOLERANCE, statistics.median(widths)) if widths else NOISE_TOLERANCE


def _params_of(key: str) -> dict[str, KnobValue]:
    loaded: dict[str, KnobValue] = json.loads(key)  # params_key's JSON
    return loaded


def _sample(space: SearchSpace, n: int, seed: int | None) -> list[dict[str, KnobValue]]:
    """``n`` random configurations of a space too large to screen whole (no repeats)."""
    rng = random.Random(seed)
    seen: dict[str, dict[str, KnobValue]] = {}
    distributions = space.distributions()
    for _ in range(n * 4):
        if len(seen) >= n:
            break
        params = {name: _draw(rng, dist) for name, dist in distributions.items()}
        seen.setdefault(params_key(params), params)
    return list(seen.values())


def _draw(rng: random.Random, dist: optuna.distributions.BaseDistribution) -> KnobValue:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        value: KnobValue = rng.choice(list(dist.choices))
        return value
    if isinstance(dist, optuna.distributions.IntDistribution):
        if dist.log:
            return round(math.exp(rng.uniform(math.log(dist.low), math.log(dist.high))))
        return rng.randrange(dist.low, dist.high + 1, dist.step)
    if isinstance(dist, optuna.distributions.FloatDistribution):
        if dist.log:
            return math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
        return rng.uniform(dist.low, dist.high)
    raise TypeError(f"unknown distribution {dist!r}")
