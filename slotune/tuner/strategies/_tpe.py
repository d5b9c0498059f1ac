"""TPE: Optuna's multivariate TPE with constraints and the constant liar; defaults first."""

from __future__ import annotations

import optuna

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies._base import Strategy, StudySource

__all__ = ["TPEStrategy"]


class TPEStrategy(Strategy):
    """``TPESampler(multivariate=True, constant_liar=True)`` with constraints.

    The engine's defaults are enqueued first (the baseline every user starts from).
    ``plain=True`` is the untuned baseline of the benchmark: Optuna's default
    ``TPESampler``, no constraints told, no defaults enqueued, repeats measured again.
    ``n_startup_trials`` is the random start before TPE models the space.
    """

    name = "tpe"

    def __init__(self, space: SearchSpace, study: StudySource = None, *,
                 seed: int | None = None, plain: bool = False,
                 n_startup_trials: int = 8) -> None:
        self.plain = plain
        self.n_startup_trials = n_startup_trials
        super().__init__(space, study, seed=seed)
        if plain:
            self.report_constraints = False
            self.dedupe = False
        self._defaults_pending = not plain

    def _make_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        if self.plain:
            return optuna.samplers.TPESampler(seed=seed)
        return optuna.samplers.TPESampler(
            multivariate=True, constant_liar=True, n_startup_trials=self.n_startup_trials,
            seed=seed)  # Optuna 5 reads the constraints set with trial.set_constraint

    def _next(self) -> optuna.trial.Trial | None:
        if self.space.is_finite() and len(self._known) >= self.space.grid_size():
            self._stop("every configuration of the space was tried")
            return None
        if self._defaults_pending:
            self._defaults_pending = False
            return self._ask_params(self.space.defaults())
        return self._ask_sampled()
