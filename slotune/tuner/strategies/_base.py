"""The strategy contract: what to try next, on top of an Optuna study (ask/tell).

A strategy wraps one Optuna study (direction ``maximize``) and one search space.

* :meth:`Strategy.ask` returns a :class:`Proposal` — knob values and the Optuna trial
  number — or ``None``. ``None`` means "nothing to propose right now": either the
  strategy is :attr:`~Strategy.done` (then :attr:`~Strategy.stop_reason` says why) or
  it waits for results it has handed out (guided waits for a sweep to come back).
* Several proposals may be outstanding at once (parallel workers); results may come
  back in any order. Every proposal must be told back exactly once with
  :meth:`Strategy.tell`; telling an unknown or already-told proposal raises
  :class:`StrategyError`.
* A proposal with ``preset`` set must **not** be evaluated: the strategy already knows
  its result (a configuration that breaks a rule of the space — ``infeasible``, never
  booted). The caller records it and tells ``preset`` back like any other result.
* Every result is told to Optuna as a completed trial: the objective (0 for failures
  and infeasible configs) plus named constraints (``trial.set_constraint``) —
  ``fits`` (> 0: would not boot), ``rule`` (> 0: broke a rule) and one per SLO target
  (observed/target − 1) — so TPE learns where the feasible region is.
* A configuration already measured is not measured again (zero noise makes a rerun
  pointless; :func:`~slotune.tuner.strategies.confirm` is where repeats belong), nor told to
  Optuna again (the study holds its measurement once; a second copy would double its
  weight in the sampler and show a measurement that never ran): the sampler's repeat is
  failed in Optuna with the user attribute ``slotune_duplicate_of`` and the strategy
  proposes something else.
* Strategies are not thread-safe: one coordinator thread calls ask and tell.
"""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import optuna

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies._cards import ExperimentCard
from slotune.workers.contracts import SLO_METRICS, KnobValue, TrialResult

__all__ = [
    "CONSTRAINT_KEYS",
    "Proposal",
    "Strategy",
    "StrategyError",
    "constraint_values",
    "infeasible_result",
    "params_key",
    "unplaceable_result",
]

CONSTRAINT_KEYS: tuple[str, ...] = ("fits", "rule", *SLO_METRICS, "quality")
_CONSTRAINT_CLIP = 10.0
"""SLO constraints are clipped: TPE only needs the sign and a rough size."""
DUPLICATE_ATTR = "slotune_duplicate_of"
"""On an Optuna trial failed as a repeat of a measured configuration: the trial number
that measured it (-1: measured before a restart)."""
_MAX_REDRAWS = 64
"""Attempts to find a configuration not measured yet before calling the space exhausted."""


class StrategyError(ValueError):
    """Misuse of a strategy (unknown proposal, bad option, unknown strategy name)."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """One configuration to try: knob values and the Optuna trial that carries them."""

    number: int
    params: dict[str, KnobValue]
    preset: TrialResult | None = None
    """Already known (infeasible by a rule): do not evaluate, tell it back as is."""
    note: str = ""
    """Why it was proposed (guided: the experiment step)."""

    @property
    def run_id(self) -> str:
        """The name of its run outside a sweep (a sweep names it ``s3-t7-a1``)."""
        return f"optuna-{self.number}"


def params_key(params: Mapping[str, KnobValue]) -> str:
    """A stable identity for a configuration (dict order and int/float spelling aside)."""
    return json.dumps({k: params[k] for k in sorted(params)}, sort_keys=True, default=str)


def infeasible_result(run_id: str, rule: str) -> TrialResult:
    """The result of a configuration that breaks ``rule``: never booted, objective 0."""
    return TrialResult(run_id=run_id, status="infeasible", objective=0.0,
                       constraints={"rule": 1.0}, violated_rule=rule,
                       failure_message=f"breaks the space's rule: {rule}")


def unplaceable_result(run_id: str, reason: str) -> TrialResult:
    """The result of a configuration no node can ever hold (more GPUs than any offers):
    never booted, objective 0, ``fits`` violated so the sampler steers away from it."""
    return TrialResult(run_id=run_id, status="infeasible", objective=0.0,
                       constraints={"fits": 1.0},
                       failure_message=f"can never be placed: {reason}")


def constraint_values(result: TrialResult) -> dict[str, float]:
    """The named constraints told to Optuna for ``result`` (≤ 0 feasible)."""
    out = {key: 0.0 for key in CONSTRAINT_KEYS}
    for key, value in result.constraints.items():
        if key in out:
            out[key] = max(-1.0, min(_CONSTRAINT_CLIP, value))
    if result.status == "failed" and out["fits"] <= 0:
        out["fits"] = 1.0  # a trial that did not produce a measurement is not feasible
    return out


def constraints_from_trial(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    """``constraints_func`` for Optuna samplers: the vector in :data:`CONSTRAINT_KEYS` order."""
    return [trial.constraints.get(key, 0.0) for key in CONSTRAINT_KEYS]


@dataclass(slots=True)
class _Pending:
    trial: optuna.trial.Trial
    proposal: Proposal


@dataclass(slots=True)
class Observation:
    """One told result with the proposal it answers."""

    proposal: Proposal
    result: TrialResult
    extra: dict[str, Any] = field(default_factory=dict)


StudyOpener = Callable[[optuna.samplers.BaseSampler], optuna.Study]
"""Opens (or finds again) a persistent study with the strategy's own sampler."""
StudySource = optuna.Study | StudyOpener | None
"""A strategy's study: given, opened with its sampler, or (None) a fresh in-memory one."""


class Strategy(ABC):
    """Base of every strategy; subclasses implement :meth:`_next`."""

    name: ClassVar[str]
    report_constraints: bool = True
    dedupe: bool = True

    def __init__(self, space: SearchSpace, study: StudySource = None, *,
                 seed: int | None = None) -> None:
        self.space = space
        self.seed = seed
        if study is None:
            self.study = optuna.create_study(direction="maximize",
                                             sampler=self._make_sampler(seed),
                                             storage=optuna.storages.InMemoryStorage())
        elif isinstance(study, optuna.Study):
            self.study = study
        else:  # an opener: the strategy's own sampler on a study kept elsewhere
            self.study = study(self._make_sampler(seed))
        self.history: list[Observation] = []
        self._pending: dict[int, _Pending] = {}
        self._known: dict[str, TrialResult] = {}
        self._in_flight: set[str] = set()
        self._measured_as: dict[str, int] = {}
        """Which Optuna trial measured each known configuration (where this run saw it)."""
        self._stop_reason: str | None = None

    # --- the contract ------------------------------------------------------------------

    @property
    def cards(self) -> Sequence[ExperimentCard]:
        """The experiment cards this strategy keeps (the guided loop's; none elsewhere)."""
        return ()

    @property
    def done(self) -> bool:
        """True once the strategy will never propose again."""
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    @property
    def pending(self) -> int:
        """Proposals handed out and not told back yet."""
        return len(self._pending)

    def ask(self) -> Proposal | None:
        """The next configuration to try, or None (see the module docstring)."""
        for _ in range(_MAX_REDRAWS):
            if self.done:
                return None
            trial = self._next()
            if trial is None:
                return None
            params = dict(trial.params)
            key = params_key(params)
            known = self._known.get(key)
            if self.dedupe and known is not None:
                self._skip_duplicate(trial, key)
                continue
            if self.dedupe and key in self._in_flight:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            rule = self.space.check(params)
            preset = None if rule is None else infeasible_result(f"optuna-{trial.number}", rule)
            proposal = Proposal(trial.number, params, preset, self._note())
            self._pending[trial.number] = _Pending(trial, proposal)
            self._in_flight.add(key)
            return proposal
        self._stop("no configuration left that was not measured already (space exhausted)")
        return None

    def tell(self, proposal: Proposal, result: TrialResult) -> None:
        """Record ``result`` for ``proposal`` (in any order, exactly once).

        Optuna is told first: if its storage is unreachable the error propagates and
        nothing here has changed, so the same call can be retried once it is back.
        """
        pending = self._pending.get(proposal.number)
        if pending is None:
            raise StrategyError(f"proposal {proposal.number} is unknown or was told already")
        self._tell_optuna(pending.trial, result)
        del self._pending[proposal.number]
        key = params_key(proposal.params)
        self._in_flight.discard(key)
        self._known[key] = result
        self._measured_as[key] = proposal.number
        self.history.append(Observation(proposal, result))
        self._observe(proposal, result)

    def observe_repeat(self, params: Mapping[str, KnobValue], result: TrialResult) -> None:
        """A confirmation repeat of a configuration already told: a measurement, not a
        trial (the study never hears of it). Only a strategy that learns from every
        measurement (the twin) keeps it."""
        return None

    def withdraw(self, proposal: Proposal) -> None:
        """Forget a proposal that will never run (its coordinator lost the sweep before
        recording it): its Optuna trial is failed, not left RUNNING."""
        pending = self._pending.pop(proposal.number, None)
        if pending is None:
            return
        self._in_flight.discard(params_key(proposal.params))
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            self.study.tell(pending.trial, state=optuna.trial.TrialState.FAIL)

    # --- for subclasses ----------------------------------------------------------------

    @abstractmethod
    def _next(self) -> optuna.trial.Trial | None:
        """An asked Optuna trial carrying the next params, or None (wait, or stop)."""

    def _observe(self, proposal: Proposal, result: TrialResult) -> None:
        """Hook: a result came back (after Optuna was told)."""
        return None

    def _note(self) -> str:
        return ""

    def _make_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)

    def _stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason

    def _ask_params(self, params: Mapping[str, KnobValue]) -> optuna.trial.Trial:
        """An Optuna trial with exactly ``params`` (enqueued, so any sampler honours it)."""
        self.study.enqueue_trial(dict(params), skip_if_exists=False)
        return self.study.ask(self.space.distributions())

    def _ask_sampled(self) -> optuna.trial.Trial:
        return self.study.ask(self.space.distributions())

    def restore(self, results: Iterable[tuple[Mapping[str, KnobValue], TrialResult]]) -> None:
        """Seed results measured before a restart (from the store), so they are reused.

        Optuna's study already holds them for its sampler; this gives the strategy the
        same memory, so a resumed sweep never measures a configuration twice and guided
        replays its steps from known results without booting anything.
        """
        measured = {params_key(t.params): t.number for t in self.study.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))}
        for params, result in results:
            key = params_key(params)
            self._known[key] = result
            if key in measured:
                self._measured_as[key] = measured[key]

    def _skip_duplicate(self, trial: optuna.trial.Trial, key: str) -> None:
        trial.set_user_attr(DUPLICATE_ATTR, self._measured_as.get(key, -1))
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def known(self, params: Mapping[str, KnobValue]) -> TrialResult | None:
        return self._known.get(params_key(params))

    def _tell_optuna(self, trial: optuna.trial.Trial, result: TrialResult) -> None:
        # A retry (the database went away as it answered) of a tell whose commit did
        # land: Optuna has it already, and the rest of the bookkeeping goes on.
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            self._tell_optuna_once(trial, result)

    def _tell_optuna_once(self, trial: optuna.trial.Trial, result: TrialResult) -> None:
        if self.report_constraints:
            # A retried tell finds the constraints its first try wrote (Optuna keeps the
            # first value and warns): the values are the same, so only the missing go.
            told = trial.constraints
            for key, value in constraint_values(result).items():
                if key not in told:
                    trial.set_constraint(key, value)
            trial.set_user_attr("status", result.status)
            if result.violated_rule:
                trial.set_user_attr("violated_rule", result.violated_rule)
            if result.headroom is not None:
                trial.set_user_attr("headroom", result.headroom)
        self.study.tell(trial, result.objective)


StrategyFactory = Callable[..., Strategy]
