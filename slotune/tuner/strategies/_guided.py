"""Guided: the seed's closed tuning loop, automated, one experiment card per step.

baseline (the engine's defaults) → read the binding wall from the result's diagnosis →
vary the one knob that moves that wall (the seed's table) with every other knob at the
incumbent → keep the best value only if it beats the incumbent beyond noise →
re-diagnose → … → stop when a full round of knobs brings nothing (plateau), or when the
wall is the queue (a capacity problem: add replicas, tuning won't help).

A knob with ordered (numeric) values is line-searched rather than swept: one step to
each side of the incumbent, then further only in a direction while every step beats the
one before (the trials past a worse step are the ones a sweep wastes). Where the wall
fixes the side a knob can help from — a full KV pool needs more memory, never less —
only that side is tried. A categorical knob tries each of its other values at once.

Each step is an :class:`ExperimentCard` — symptom, evidence, hypothesis, the one
variable, the values tried, the expected direction, the result, the verdict and the
rollback — so a person can audit the search like a lab notebook.

``then="tpe"`` hands what budget remains after the plateau to multivariate TPE, which
starts from everything the loop measured (the incumbent's neighbourhood included).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import optuna

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies._base import (
    Proposal,
    Strategy,
    StrategyError,
    StudySource,
    params_key,
)
from slotune.tuner.strategies._cards import ExperimentCard
from slotune.tuner.strategies._ranking import NOISE_TOLERANCE
from slotune.workers.contracts import KnobValue, TrialResult

__all__ = ["WALL_KNOBS", "GuidedStrategy", "GuidedTPEStrategy"]

WALL_KNOBS: dict[str, tuple[str, ...]] = {
    # the seed's table: which knob moves which wall, in the order they are tried. A pool
    # that fills at run time grows with memory and with fewer bytes per token; a paged
    # engine sizes no pool by max_model_len (it only decides at start-up whether one
    # longest request fits, and rejects longer ones), so that knob comes last here and
    # first when start-up itself failed for memory (_STARTUP_KV_KNOBS)
    "prefill": ("max_num_batched_tokens", "enable_prefix_caching"),
    "decode": ("max_num_seqs", "quantization", "speculative_config"),
    "kv": ("gpu_memory_utilization", "kv_cache_dtype", "max_model_len"),
}
_STARTUP_KV_KNOBS: tuple[str, ...] = ("max_model_len", "gpu_memory_utilization",
                                      "kv_cache_dtype")
_SIDE: dict[str, dict[str, int]] = {
    # the only side of the incumbent (+1 up, -1 down) from which a knob can move its own
    # wall; a knob not listed, or swept for another wall, is tried on both sides
    "kv": {"gpu_memory_utilization": +1, "max_model_len": -1},
}
_EXPECTED: dict[str, str] = {
    "max_num_batched_tokens": "smaller chunks lower TTFT (decode interleaves sooner); larger "
                              "ones raise prefill throughput",
    "enable_prefix_caching": "reusing shared prefixes skips repeated prefill: TTFT down",
    "max_num_seqs": "a wider batch raises throughput until TPOT and KV pressure bite",
    "quantization": "fewer weight bytes per token: faster decode, more KV room",
    "speculative_config": "fewer forward passes when decode is memory-bound",
    "gpu_memory_utilization": "a bigger KV pool: more concurrency before preemption",
    "max_model_len": "a smaller per-request cap: more sequences fit",
    "kv_cache_dtype": "fp8 KV halves KV bytes: twice the tokens in the pool",
}
_CONTINUOUS_POINTS = 5
_MAX_LINE_POINTS = 9
"""An ordered knob with more values is line-searched on this many, evenly spaced."""


def _better(new: TrialResult, old: TrialResult, tolerance: float) -> bool:
    """``new`` beats ``old`` beyond noise (or, both at zero, is clearly nearer the SLO)."""
    if old.objective > 0:
        if new.objective > old.objective * (1.0 + tolerance):
            return True
        within = new.objective >= old.objective * (1.0 - tolerance)
        return within and _headroom(new) < _headroom(old) * (1.0 - 5 * tolerance)
    if new.objective > 0:
        return True
    # both fail the gate: moving the binding ratio clearly towards the target counts
    return _headroom(new) < _headroom(old) * 0.8


def _headroom(result: TrialResult) -> float:
    if result.status != "ok" or result.headroom is None:
        return float("inf")
    return result.headroom


class GuidedStrategy(Strategy):
    """The seed's loop: diagnose the wall, vary the knob that moves it, keep real gains."""

    name = "guided"

    def __init__(self, space: SearchSpace, study: StudySource = None, *,
                 seed: int | None = None, tolerance: float = NOISE_TOLERANCE,
                 then: Literal["stop", "tpe"] = "stop") -> None:
        if then not in ("stop", "tpe"):
            raise StrategyError(f"guided: then={then!r}; valid: stop, tpe")
        self.then = then
        super().__init__(space, study, seed=seed)
        self.tolerance = tolerance
        self._cards: list[ExperimentCard] = []
        self.incumbent: dict[str, KnobValue] = space.defaults()
        self.incumbent_result: TrialResult | None = None
        self._queue: deque[dict[str, KnobValue]] = deque([dict(self.incumbent)])
        self._awaiting: set[int] = set()
        self._sweep: list[tuple[Proposal, TrialResult]] = []
        self._card: ExperimentCard | None = None
        self._lines: list[_Line] = []
        self._tried: set[str] = set()
        self._handed_to_tpe = False
        self._step_note = "baseline: the engine's defaults"

    @property
    def cards(self) -> Sequence[ExperimentCard]:
        return self._cards

    def _make_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        if self.then == "tpe":
            return optuna.samplers.TPESampler(
                multivariate=True, constant_liar=True, n_startup_trials=0,
                seed=seed)  # Optuna 5 reads the constraints set with trial.set_constraint
        return optuna.samplers.RandomSampler(seed=seed)

    def _note(self) -> str:
        return self._step_note

    # --- proposing ---------------------------------------------------------------------

    def _next(self) -> optuna.trial.Trial | None:
        if self._handed_to_tpe:
            if self.space.is_finite() and len(self._known) >= self.space.grid_size():
                self._stop("every configuration of the space was tried")
                return None
            return self._ask_sampled()
        while self._queue:
            params = self._queue.popleft()
            known = self.known(params)
            if known is not None:  # measured in an earlier step: reuse, don't rerun
                self._sweep.append((Proposal(-1, params), known))
                continue
            trial = self._ask_params(params)
            self._awaiting.add(trial.number)
            return trial
        if not self._awaiting and not self.done:
            self._round_done()  # every value of the round is known already
            return self._next() if self._queue or self._handed_to_tpe else None
        return None

    def _observe(self, proposal: Proposal, result: TrialResult) -> None:
        if proposal.number not in self._awaiting:
            return
        self._awaiting.discard(proposal.number)
        self._sweep.append((proposal, result))
        if not self._awaiting and not self._queue:
            self._round_done()

    # --- the loop ----------------------------------------------------------------------

    def _round_done(self) -> None:
        """A round's results are all in: go on along a line, or close the step."""
        card = self._card
        if card is not None and self._lines:
            line = self._lines[0]
            found = {params_key(p.params): r for p, r in self._sweep}
            result = found[params_key({**self.incumbent, card.variable: line.head})]
            if _better(result, line.behind, self.tolerance):
                # one-peaked along a line: the peak lies this way, the other side can't win
                self._lines = [line] if line.ahead else []
                if line.ahead:
                    line.behind, line.head = result, line.ahead.pop(0)
            else:
                # a first step that loses: try the other side; a later one: past the peak
                self._lines = self._lines[1:] if line.behind is self.incumbent_result else []
            if self._lines:
                card.values.append(self._lines[0].head)
                self._queue.append({**self.incumbent, card.variable: self._lines[0].head})
                return
        self._advance()

    def _advance(self) -> None:
        """A step's results are all in: judge it, then plan the next step (or stop)."""
        sweep, self._sweep = self._sweep, []
        if self.incumbent_result is None:
            self.incumbent_result = sweep[0][1] if sweep else None
        else:
            self._judge(sweep)
        self._plan()

    def _judge(self, sweep: list[tuple[Proposal, TrialResult]]) -> None:
        card = self._card
        assert card is not None and self.incumbent_result is not None
        old = self.incumbent_result
        best: tuple[dict[str, KnobValue], TrialResult] | None = None
        for proposal, result in sweep:
            card.results.append({
                "value": proposal.params[card.variable], "status": result.status,
                "objective": result.objective,
                "p99_ttft_ms": result.metrics.get("p99_ttft_ms"),
                "p99_tpot_ms": result.metrics.get("p99_tpot_ms"),
                "headroom": result.headroom,
                "failure": result.failure or result.violated_rule,
            })
            if _better(result, best[1] if best else old, self.tolerance):
                best = (proposal.params, result)
        tried: dict[str, KnobValue] = {}
        for row in card.results:  # every value the step measured, each once, as tried
            tried.setdefault(params_key({"value": row["value"]}), row["value"])
        card.values = list(tried.values())
        measured = [r for _, r in sweep if r.status == "ok"]
        restore = dict(self.incumbent)
        check = (f"re-measure it: objective {old.objective:.3g} within "
                 f"{self.tolerance:.0%} (its confirmation run checks it again at the end)")
        if best is not None:
            value = best[0][card.variable]
            card.verdict = "supported"
            card.result = (f"{card.variable}={value!r}: objective {old.objective:.3g} → "
                           f"{best[1].objective:.3g}, headroom {_fmt(old.headroom)} → "
                           f"{_fmt(best[1].headroom)}")
            card.rollback = {"to": f"{card.variable}={card.baseline_value!r}",
                             "config": restore, "check": check, "applied": False}
            self.incumbent, self.incumbent_result = dict(best[0]), best[1]
            self._tried = {card.variable}
        elif not measured:
            card.verdict = "inconclusive"
            card.result = "no value produced a measurement (refused, OOM or infeasible)"
            card.rollback = {"to": f"{card.variable}={card.baseline_value!r}",
                             "config": restore, "check": check, "applied": True}
        else:
            top = max(r.objective for r in measured)
            within = old.objective > 0 and top >= old.objective * (1.0 - self.tolerance)
            # Within the noise band on one run each: the evidence is too thin to call it
            # either way (the playbook's "inconclusive"); clearly below it: rejected.
            card.verdict = "inconclusive" if within else "rejected"
            card.result = (f"best objective {top:.3g} vs incumbent {old.objective:.3g}: "
                           + (f"within the noise band (±{self.tolerance:.0%}) on a single run "
                              "each — no gain shown, none ruled out" if within else
                              f"no gain beyond noise ({self.tolerance:.0%})"))
            card.rollback = {"to": f"{card.variable}={card.baseline_value!r}",
                             "config": restore, "check": check, "applied": True}

    def _plan(self) -> None:
        result = self.incumbent_result
        if result is None:
            self._stop("the baseline produced no result")
            return
        wall, symptom, evidence = _wall_of(result)
        if wall == "queue" and result.capacity is None:
            # in capacity mode the queue at the knee is what the rate search found; only at
            # a fixed rate does a deep queue mean "more replicas, not more tuning"
            self._finish("queue-bound at the incumbent: past the knee, a capacity problem — "
                         "add replicas (tuning won't move it)")
            return
        own = _STARTUP_KV_KNOBS if wall == "kv" and result.status == "failed" else \
            WALL_KNOBS.get(wall, ())
        order = [k for k in own if k in self.space.knobs]
        order += [k for ks in WALL_KNOBS.values() for k in ks if k in self.space.knobs]
        order += list(self.space.knobs)
        for knob in dict.fromkeys(order):
            if knob in self._tried:
                continue
            self._tried.add(knob)
            in_wall = knob in own
            lines, values = self._lines_for(knob, _SIDE.get(wall, {}).get(knob, 0)
                                            if in_wall else 0)
            if not lines and not values:
                continue  # nothing on the side that could help: no experiment to run
            break
        else:
            self._finish("plateau: a full round of knobs brought no gain beyond noise")
            return
        self._lines = lines
        values += [lines[0].head] if lines else []
        self._card = ExperimentCard(
            step=len(self._cards) + 1, symptom=symptom, evidence=evidence,
            hypothesis=(f"{knob} moves the {wall} wall" if in_wall else
                        f"the {wall} wall's own knobs are spent; {knob} may still help"),
            variable=knob, baseline_value=self.incumbent.get(knob), values=values,
            expected=_EXPECTED.get(knob, "unknown: measure it"),
            controls=self._controls(knob, result, lines=bool(lines)),
            stop_condition=_stop_condition(self.space),
        )
        self._cards.append(self._card)
        verb = "line-search" if lines else "sweep"
        self._step_note = f"step {self._card.step}: {verb} {knob} ({symptom})"
        self._queue.extend({**self.incumbent, knob: v} for v in values)

    def _controls(self, knob: str, incumbent: TrialResult, *, lines: bool) -> dict[str, Any]:
        """What the card holds fixed while ``knob`` moves (the playbook's controls)."""
        space = self.space
        workload = space.resolve_workload()
        return {
            "model": space.model, "gpu": space.gpu, "engine": space.engine,
            "engine_version": incumbent.engine.engine_version,
            "workload": workload.name, "workload_seed": workload.seed,
            "request_rate": workload.arrivals.request_rate,
            "slo": space.resolve_slo().model_dump(exclude_none=True),
            "held_fixed": {k: v for k, v in self.incumbent.items() if k != knob},
            "order": ("the incumbent first, then one value at a time outward from it, "
                      "nearest first" if lines else
                      "the incumbent first, then each value once, in the space's order"),
        }

    def _lines_for(self, knob: str, side: int) -> tuple[list[_Line], list[KnobValue]]:
        """How to vary ``knob``: lines from the incumbent (ordered) or values to sweep."""
        current = self.incumbent.get(knob)
        values = [v for v in self._values(knob) if v != current]
        at = None if current is None else _number(current)
        numbers = [(x, v) for v in values if (x := _number(v)) is not None]
        if at is None or len(numbers) < len(values):
            return [], values
        below = [v for _, v in sorted((p for p in numbers if p[0] < at), key=lambda p: -p[0])]
        above = [v for _, v in sorted((p for p in numbers if p[0] > at), key=lambda p: p[0])]
        assert self.incumbent_result is not None
        lines = [_Line(ahead[1:], ahead[0], self.incumbent_result)
                 for d, ahead in ((-1, below), (+1, above)) if ahead and side in (0, d)]
        # the side holding more of the range first: a priori the likelier home of the peak
        return sorted(lines, key=lambda line: -len(line.ahead)), []

    def _finish(self, reason: str) -> None:
        if self.then == "tpe":
            self._handed_to_tpe = True
            self._step_note = f"TPE after the guided loop ({reason})"
            self.guided_stop_reason = reason
        else:
            self._stop(reason)

    def _values(self, knob: str) -> list[KnobValue]:
        values = self.space.choices(knob)
        if values is not None:
            if len(values) > _MAX_LINE_POINTS and all(_number(v) is not None for v in values):
                n = _MAX_LINE_POINTS
                return [values[round(i * (len(values) - 1) / (n - 1))] for i in range(n)]
            return values
        spec = self.space.knobs[knob]
        low, high = float(spec.low), float(spec.high)  # type: ignore[union-attr]
        n = _CONTINUOUS_POINTS
        if spec.type == "log":
            return [low * (high / low) ** (i / (n - 1)) for i in range(n)]
        return [low + (high - low) * i / (n - 1) for i in range(n)]


@dataclass(slots=True)
class _Line:
    """One direction of a line search: the value being tried and those further out."""

    ahead: list[KnobValue]
    head: KnobValue
    behind: TrialResult
    """The result one step back (the incumbent's for the first step)."""


def _number(value: KnobValue) -> float | None:
    """``value`` on a line (an ordered knob), or None (categorical: bool, text, null)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _stop_condition(space: SearchSpace) -> list[str]:
    """The rules that end a value's run at once (the early abort and the failure
    classifier, as they apply to this space's SLO)."""
    slo = space.resolve_slo()
    rules = [f"p{slo.percentile:g} {metric.upper()} above {target:g} ms on more requests than "
             f"a p{slo.percentile:g} can absorb: the run stops (early abort), objective 0"
             for metric, target in slo.targets.items()]
    return [*rules,
            "the engine refuses the configuration, runs out of memory or does not come up "
            "in time: that value is recorded failed (invalid_config, oom, startup_timeout), "
            "never retried",
            "requests error out, or the load generator falls behind its schedule: the run is "
            "discarded and measured again (at most twice), never scored"]


def _wall_of(result: TrialResult) -> tuple[str, str, dict[str, Any]]:
    """The binding wall of a result: its diagnosis, or what its failure implies."""
    if result.status == "failed":
        if result.failure == "oom":
            return "kv", f"start-up failed for memory: {result.failure_message}", {}
        return "none", f"the engine refused the config: {result.failure_message}", {}
    if result.status == "infeasible":
        return "none", f"infeasible: {result.violated_rule}", {}
    diagnosis = result.diagnosis or {}
    wall = str(diagnosis.get("wall", "limit"))
    symptom = f"{diagnosis.get('label', wall)}: {diagnosis.get('reason', 'no diagnosis')}"
    evidence = {k: v for k, v in (diagnosis.get("evidence") or {}).items() if v is not None}
    seen = [s.get("symptom") for s in diagnosis.get("symptoms") or [] if s.get("symptom")]
    if seen:  # the playbook's other symptoms at the incumbent, written on the card too
        evidence["also_seen"] = "; ".join(str(s) for s in seen)
    return wall, symptom, evidence


class GuidedTPEStrategy(GuidedStrategy):
    """Guided until its plateau, then TPE on everything it measured (``then="tpe"``)."""

    name = "guided+tpe"

    def __init__(self, space: SearchSpace, study: StudySource = None, *,
                 seed: int | None = None, tolerance: float = NOISE_TOLERANCE) -> None:
        super().__init__(space, study, seed=seed, tolerance=tolerance, then="tpe")
