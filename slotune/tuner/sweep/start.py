"""Where a sweep starts each trial's capacity search: a prediction of its capacity.

A start saves probes and cannot move the interval (:mod:`slotune.workers.trial.capacity`), so it
pays to start close. Where the simulator can model the space (its model and GPU known), the twin's
shipped prior screens the configuration in virtual time (a fraction of a CPU second) and the
prediction is scaled by what the sweep measured so far against what the prior predicted for the same
configurations — the median ratio, so one odd configuration does not steer every start: the real
engine is often 15-25% slower than the shipped calibration, and that difference is learned from the
measurements alone. Elsewhere (an uncatalogued model or GPU) the start is the best capacity per GPU
so far on this replica's GPUs, and the workload's rate for the first trial.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
from collections.abc import Mapping

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies.twin.model import Twin, TwinUnavailable
from slotune.workers.contracts import KnobValue, TrialResult

__all__ = ["StartPredictor"]

log = logging.getLogger(__name__)


class StartPredictor:
    """Predicts a configuration's per-replica capacity for its search to start from."""

    def __init__(self, space: SearchSpace) -> None:
        self._twin: Twin | None = None
        with contextlib.suppress(TwinUnavailable):  # a space the simulator cannot model
            self._twin = Twin(space)
        self._ratios: list[float] = []

    def observe(self, params: Mapping[str, KnobValue], result: TrialResult) -> None:
        """A measured search result: how far the prior was off for it."""
        predicted = self._prior(params)
        measured = result.capacity if result.status == "ok" else None
        if predicted and measured:
            self._ratios.append(measured / predicted)

    def predict(self, params: Mapping[str, KnobValue]) -> float | None:
        """The capacity to start from (None: no prediction; the caller's fallback)."""
        predicted = self._prior(params)
        if not predicted:
            return None
        return predicted * (statistics.median(self._ratios) if self._ratios else 1.0)

    def _prior(self, params: Mapping[str, KnobValue]) -> float | None:
        if self._twin is None:
            return None
        try:
            prediction = self._twin.predict(params)
        except Exception as exc:  # a prediction is an optimisation: never fail a sweep on it
            log.warning("no start prediction for %s: %s", dict(params), exc)
            return None
        return prediction.capacity if prediction.failure is None else None
