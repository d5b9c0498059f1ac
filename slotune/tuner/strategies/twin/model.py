"""The twin: the simulated engine with learned factors, predicting any configuration.

The twin runs the same simulator the virtual executor runs (``slotune/workers/sim``), with the
shipped calibration of the GPU as its prior times :class:`TwinFactors` learned from the
sweep's own measurements. It never reads ``SLOTUNE_SIM_CALIBRATION`` — the truth of a
virtual sweep — and knows the real engine only through what the real engine measured.

Three costs shape it:

* **screening** predicts a configuration with a short virtual trial
  (:data:`SCREEN_PROMPTS` requests per probe, a looser bracket), milliseconds to a
  second of CPU; predictions are cached per (configuration, factors);
* **checking** re-predicts the configuration about to boot with the full virtual trial
  (the space's own workload and capacity search, so the prediction is of the measurement
  itself, bracket and all): that is the prediction recorded against the measurement;
* **fitting** re-simulates, per measured trial, the probes nearest its capacity (or its
  one run, in goodput mode) and matches the median and p99 TTFT and TPOT the real engine
  saw there: Gauss-Newton in log space on the factors the data moves (a factor no probe
  is sensitive to stays where it was), bounded, and pulled gently toward its start.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies._base import params_key
from slotune.tuner.strategies._ranking import NOISE_TOLERANCE
from slotune.tuner.strategies.twin.factors import TwinFactors
from slotune.workers.contracts import KnobValue, TrialResult, TrialSpec
from slotune.workers.sim.calibration import RooflineCalibration, shipped_calibration
from slotune.workers.sim.catalog import UnknownCatalogEntry, get_gpu, get_model
from slotune.workers.trial.capacity import probe_medians, probe_workload

__all__ = ["FitReport", "Prediction", "Twin", "TwinUnavailable"]

SCREEN_PROMPTS = 80
"""Requests per probe when screening: enough for a p99 of the right size, 4-10× cheaper."""
SCREEN_TOLERANCE = 0.1
"""Capacity bracket of a screening prediction: it ranks, the check measures."""
SCREEN_PROBES = 6
FIT_PROMPTS = 320
"""Requests per re-simulated probe when fitting (the first ones of the probe the engine
ran). For conversations these are mostly sessions' first turns, lighter than the steady
state the probe measured: the fit is re-simulated hundreds of times, and a whole steady
probe of conversations costs a second each."""
PRIOR_BAND = 0.5
"""The twin's error band before it has been checked against two measurements: users
report estimate-only tools off by ~45% on TTFT."""
MIN_BAND = NOISE_TOLERANCE
"""The narrowest band: what the search treats as run-to-run noise anyway."""
_RIDGE = 0.02
"""Pull of each log-factor toward where the sweep started it (keeps unseen ones put)."""
_RATIO_CAP = 4.0
"""p99/target beyond this says only "far over": clipped so a saturated probe cannot dominate."""
_STEP = 0.1
"""Finite-difference step of the fit, in log-factor units."""
_P99_WEIGHT = 0.5
"""Weight of a p99 residual beside a median's: the p99 of a short probe is noisier."""
_PROBES_PER_TRIAL = 3
"""Probes of each trial the fit re-simulates (the nearest to its capacity)."""
_GOOD_FIT = 0.1
"""RMS log-ratio residual below which a fit is not second-guessed."""
_LATTICE = 0.5
"""Log-offset of the restart lattice's corners (×0.6 and ×1.65 of the start)."""
_MIN_SENSITIVITY = 0.05
"""A factor whose 10% change moves no residual by this much is not determined by the data."""


class TwinUnavailable(ValueError):
    """The twin cannot model this space (its model or GPU is unknown to the simulator)."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the twin expects a configuration to measure."""

    objective: float
    capacity: float | None
    failure: str | None
    """The failure class the twin expects (``oom``, ``invalid_config``, …), else None."""
    full: bool
    """True: from the full virtual trial; False: from the screening one."""


@dataclass(frozen=True, slots=True)
class FitReport:
    """One refit: the factors, how well they explain the data, and what they came from."""

    factors: TwinFactors
    residual: float
    """RMS of the log p99 ratios (simulated vs measured) over the fitted probes."""
    trials: tuple[str, ...]
    """The measured trials it was fitted to, by their ``run_id``."""
    probes: int
    fitted: tuple[str, ...]
    """The factors the data determined (the others kept their value)."""
    seconds: float


@dataclass(slots=True)
class _Point:
    spec: TrialSpec
    rate: float
    index: int
    observed: Mapping[str, float]
    """p99 ÷ target per SLO metric."""
    medians_ms: Mapping[str, float]
    """Median TTFT / TPOT (ms): smooth where a short probe's p99 is one request."""


@dataclass
class Twin:
    """The calibrated simulator of one space (model, GPU, workload, SLO)."""

    space: SearchSpace
    factors: TwinFactors = field(default_factory=TwinFactors)
    start: TwinFactors = field(init=False)
    prior: RooflineCalibration = field(init=False)
    gpu: str = field(init=False)
    fits: list[FitReport] = field(default_factory=list)
    screen_s: float = 0.0
    """CPU seconds spent predicting (screening and checks)."""
    _cache: dict[tuple[str, TwinFactors, bool], Prediction] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.start = self.factors
        try:
            get_model(self.space.model)
            self.gpu = get_gpu(self.space.gpu).name
        except UnknownCatalogEntry as exc:
            raise TwinUnavailable(
                f"the twin cannot model space {self.space.name!r}: {exc}") from None
        self.prior = shipped_calibration(self.gpu)

    # --- predicting ----------------------------------------------------------------

    def spec(self, params: Mapping[str, KnobValue]) -> TrialSpec:
        """The trial spec a sweep's search gives ``params`` (its ranking probes in
        capacity mode; no quality gate: the twin predicts load behaviour, a lossy value's
        quality is the gate's to measure)."""
        search = self.space.capacity.for_ranking() if self.space.mode == "capacity" else None
        return self.space.to_trial_spec(dict(params), "twin", quality=None, capacity=search)

    def predict(self, params: Mapping[str, KnobValue], *, full: bool = False) -> Prediction:
        key = (params_key(params), self.factors, full)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        from slotune.workers.trial.virtual import (
            run_virtual_trial,  # the engine loads at the first ask
        )

        started = time.process_time()
        spec = self.spec(params)
        result = run_virtual_trial(spec if full else _screening(spec), per_request=False,
                                   calibration=self.factors.apply(self.prior))
        self.screen_s += time.process_time() - started
        prediction = Prediction(
            objective=result.objective if result.status == "ok" else 0.0,
            capacity=result.capacity, full=full,
            failure=result.failure if result.status == "failed" else None)
        self._cache[key] = prediction
        return prediction

    # --- learning ------------------------------------------------------------------

    def fit(self, measured: Sequence[tuple[Mapping[str, KnobValue], TrialResult]]
            ) -> FitReport | None:
        """Refit the factors to the measured trials; None when nothing measured can teach."""
        started = time.process_time()
        points: list[_Point] = []
        trials: list[str] = []
        for params, result in measured:
            found = _points(self.spec(params), result)
            if found:
                points.extend(found)
                trials.append(result.run_id)
        if not points:
            return None
        anchor = np.array(self.start.as_log())
        theta, r, fitted = self._gauss_newton(points, np.array(self.factors.as_log()), anchor)
        if _rms(r) > _GOOD_FIT:
            # Stuck (the p99 of a finite run is not smooth in the factors): restart from
            # the best corners of a coarse lattice around the start, keep the best end.
            lattice = sorted(
                (_loss(self._residuals(points, anchor + np.array(offset)),
                       anchor + np.array(offset), anchor), offset)
                for offset in itertools.product((-_LATTICE, 0.0, _LATTICE), repeat=3))
            for _, offset in lattice[:2]:
                t2, r2, f2 = self._gauss_newton(points, anchor + np.array(offset), anchor)
                if _loss(r2, t2, anchor) < _loss(r, theta, anchor):
                    theta, r, fitted = t2, r2, f2
        self.factors = TwinFactors.from_log(list(theta))
        names = ("compute", "memory", "overhead")
        report = FitReport(self.factors, _rms(r), tuple(trials),
                           len(points), tuple(names[j] for j in sorted(fitted)),
                           time.process_time() - started)
        self.fits.append(report)
        return report

    def _gauss_newton(self, points: Sequence[_Point], theta: np.ndarray, anchor: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, set[int]]:
        """Damped Gauss-Newton from ``theta``, ridge-pulled toward ``anchor``; returns the
        end point, its residuals and the factors the data moved."""
        theta = np.array(TwinFactors.from_log(list(theta)).as_log())
        r = self._residuals(points, theta)
        loss = _loss(r, theta, anchor)
        fitted: set[int] = set()
        damping = 1e-3
        for _ in range(6):
            jac = np.empty((len(r), 3))
            for j in range(3):
                step = theta.copy()
                step[j] += _STEP
                jac[:, j] = (self._residuals(points, step) - r) / _STEP
            free = [j for j in range(3) if np.max(np.abs(jac[:, j])) * _STEP >= _MIN_SENSITIVITY]
            if not free:
                break
            fitted.update(free)
            J = jac[:, free]
            gradient = J.T @ r + _RIDGE * (theta[free] - anchor[free])
            hessian = J.T @ J + (_RIDGE + damping) * np.eye(len(free))
            move = np.zeros(3)
            move[free] = -np.linalg.solve(hessian, gradient)
            candidate = np.array(TwinFactors.from_log(list(theta + move)).as_log())
            r_new = self._residuals(points, candidate)
            loss_new = _loss(r_new, candidate, anchor)
            if loss_new < loss:
                improved = loss - loss_new
                theta, r, loss = candidate, r_new, loss_new
                damping = max(damping / 3, 1e-4)
                if improved < 1e-4:
                    break
            else:
                damping *= 10
                if damping > 10:
                    break
        return theta, r, fitted

    def _residuals(self, points: Sequence[_Point], theta: np.ndarray) -> np.ndarray:
        calibration = TwinFactors.from_log(list(theta)).apply(self.prior)
        out: list[float] = []
        for point in points:
            ratios, medians = _simulated(point, calibration)
            for metric, observed in point.observed.items():
                out.append(_P99_WEIGHT * (_log_ratio(ratios.get(metric))
                                          - _log_ratio(observed)))
            for metric, median in point.medians_ms.items():
                simulated = medians.get(metric)
                out.append(math.log(simulated / median) if simulated else math.log(_RATIO_CAP))
        return np.array(out)


def _rms(r: np.ndarray) -> float:
    return float(math.sqrt(np.mean(r**2))) if len(r) else 0.0


def _loss(r: np.ndarray, theta: np.ndarray, anchor: np.ndarray) -> float:
    return float(0.5 * r @ r + 0.5 * _RIDGE * np.sum((theta - anchor) ** 2))


def _log_ratio(ratio: float | None) -> float:
    if ratio is None or not math.isfinite(ratio):
        return math.log(_RATIO_CAP)
    return math.log(min(_RATIO_CAP, max(ratio, 1 / _RATIO_CAP)))


def _screening(spec: TrialSpec) -> TrialSpec:
    """The cheap version of ``spec``: short probes read at their own percentile
    (confidence 0.5: a prediction ranks, it is not a measurement), a looser bracket."""
    workload = spec.workload.model_copy(update={
        "num_prompts": min(spec.workload.num_prompts, SCREEN_PROMPTS), "warmup_requests": 0})
    search = spec.capacity
    capacity = search.model_copy(update={
        "prompts_per_probe": min(search.prompts_per_probe or SCREEN_PROMPTS, SCREEN_PROMPTS),
        "confidence": 0.5, "extensions": 0, "resolve_undecided": False,
        "min_probe_s": None,
        "relative_tolerance": max(search.relative_tolerance, SCREEN_TOLERANCE),
        "max_probes": min(search.max_probes, SCREEN_PROBES), "session_spans": 0.0})
    return spec.model_copy(update={"workload": workload, "capacity": capacity})


def _points(spec: TrialSpec, result: TrialResult) -> list[_Point]:
    """The measurements of ``result`` the fit matches: the probes nearest its capacity
    (the ones that just held and just broke tell the most; the farther ones pin down the
    factors the nearest cannot separate), or its one goodput run."""
    if result.status != "ok":
        return []
    if spec.mode == "capacity":
        probes = [(i, p) for i, p in enumerate(result.capacity_probes) if p.ratios]
        centre = result.capacity or min((p.request_rate for _, p in probes), default=1.0)
        nearest = sorted(probes, key=lambda ip: abs(math.log(ip[1].request_rate / centre)))
        return [_Point(spec, p.request_rate, i, dict(p.ratios), dict(p.medians_ms))
                for i, p in nearest[:_PROBES_PER_TRIAL]]
    observed: dict[str, float] = {
        k: v + 1.0 for k, v in result.constraints.items() if k in spec.slo.targets}
    if not observed:
        return []
    medians = {k: result.metrics[f"median_{k}_ms"] for k in ("ttft", "tpot")
               if isinstance(result.metrics.get(f"median_{k}_ms"), int | float)
               and result.metrics[f"median_{k}_ms"] > 0}
    return [_Point(spec, spec.workload.arrivals.request_rate, 0, observed, medians)]


def _simulated(point: _Point, calibration: RooflineCalibration
               ) -> tuple[dict[str, float], dict[str, float]]:
    """The probe re-simulated with ``calibration``: p99 ÷ target, and medians (ms)."""
    from slotune.workers.trial.virtual import engine_config, measure

    workload = probe_workload(point.spec, point.rate, point.index)
    workload = workload.model_copy(update={
        "num_prompts": min(workload.num_prompts, FIT_PROMPTS), "warmup_requests": 0})
    config = engine_config(point.spec, calibration=calibration)
    score = measure(point.spec, config, workload).score
    ratios: dict[str, float] = {
        c.metric: (c.observed_ms / c.target_ms if c.observed_ms is not None else math.inf)
        for c in score.checks}
    return ratios, probe_medians(score)
