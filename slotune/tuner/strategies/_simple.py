"""The baseline strategies: grid (one knob, or the full grid like vLLM's auto_tune) and random."""

from __future__ import annotations

from collections.abc import Iterator

import optuna

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies._base import Strategy, StrategyError, StudySource
from slotune.workers.contracts import KnobValue

__all__ = ["GridStrategy", "RandomStrategy"]


class GridStrategy(Strategy):
    """Every configuration in the space's natural order (last knob fastest).

    With ``knob``: the seed's ``slo_tune.py`` — sweep that one knob over its values with
    every other knob at its default. Without: the full grid, as vLLM's auto_tune walks it.
    """

    name = "grid"

    def __init__(self, space: SearchSpace, study: StudySource = None, *,
                 seed: int | None = None, knob: str | None = None) -> None:
        super().__init__(space, study, seed=seed)
        if knob is not None and knob not in space.knobs:
            raise StrategyError(f"grid knob {knob!r} is not in space {space.name!r}; "
                                f"valid: {', '.join(space.knobs)}")
        self.knob = knob
        self._configs: Iterator[dict[str, KnobValue]] = (
            self._one_knob(knob) if knob is not None else space.grid())

    def _one_knob(self, knob: str) -> Iterator[dict[str, KnobValue]]:
        values = self.space.choices(knob)
        if values is None:
            raise StrategyError(f"grid knob {knob!r} is continuous; give it values or a step")
        base = self.space.defaults()
        for value in values:
            yield {**base, knob: value}

    def _next(self) -> optuna.trial.Trial | None:
        params = next(self._configs, None)
        if params is None:
            self._stop("grid exhausted")
            return None
        return self._ask_params(params)


class RandomStrategy(Strategy):
    """Uniform random configurations (without repeats), Optuna's RandomSampler."""

    name = "random"

    def _next(self) -> optuna.trial.Trial | None:
        if self.space.is_finite() and len(self._known) + self.pending >= self.space.grid_size():
            self._stop("every configuration of the space was tried")
            return None
        return self._ask_sampled()
