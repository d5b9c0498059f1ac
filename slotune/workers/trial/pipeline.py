"""One trial pipeline: (baseline) → boot → quality gate → measure (warm-up, load, early
abort, scrape) → score → result.

A :class:`~slotune.workers.trial.backend.Backend` is where the engine runs: the live engine (any
adapter, a real process; :mod:`slotune.workers.trial.live`) or the simulated engine in virtual time
(:mod:`slotune.workers.trial.virtual`). Everything else is here, once: the goodput and capacity
modes (the capacity search and its probes' verdicts: :mod:`slotune.workers.trial.capacity`), the
error budget, and every :class:`~slotune.workers.contracts.TrialResult` a trial can end with — so a
virtual trial answers what the live one would, field for field:

* ``ok``: the scored run, ``constraints`` = ``fits: -1`` plus one per SLO target,
  ``slo_margins`` for the targets with a finite observation, the vLLM-format metrics;
* ``failed``: a failure class and message (``fits: 1`` for a refusal or an OOM, which
  teaches the sampler the configuration does not fit; ``-1`` otherwise), no metrics;
* capacity mode: the interval the search showed — ``capacity_low`` the highest rate
  shown to pass (per replica), ``capacity_high`` the lowest shown to fail,
  ``capacity_requests`` what they rest on, ``capacity`` its centre — every probe with
  its verdict, and the objective ``capacity`` per GPU of the replica (TP × PP × DP);
  when no rate passes, the lowest probe's scored run with objective 0 (it says how far
  off the SLO was); a probe over the error budget does not pass, and a lowest probe over
  it fails the trial ``benchmark_errors`` (the engine could not serve, whatever the
  rate).

A lossy configuration (``spec.quality``) is checked right after boot, before any load:
golden requests compared with the lossless baseline's answers (measured first, on the
baseline booted and stopped before this configuration boots, unless the spec brings
them), or the user's command. A failed check is an ``ok`` result with objective 0, a
violated ``quality`` constraint and the verdict, never measured; a passed one is
measured as usual and carries its verdict and ``quality`` ≤ 0. A sweep measures its
baseline once, as a trial of its own (``spec.golden_reference``: boot, answer the
golden prompts, stop; the answers are the result's ``golden_answers``), and hands them to
every lossy trial as the gate's ``reference``.
"""

from __future__ import annotations

import time
from typing import Any

from slotune.workers.contracts import (
    EngineFacts,
    FailureClass,
    GoldenCheck,
    PhaseTimings,
    QualityGate,
    QualityVerdict,
    TrialResult,
    TrialSpec,
)
from slotune.workers.engines import EngineFailure, boot_phases
from slotune.workers.loadgen.diagnose.diagnosis import diagnose
from slotune.workers.loadgen.diagnose.symptoms import with_symptoms
from slotune.workers.loadgen.generate.datasets import DatasetError
from slotune.workers.loadgen.result import OURS, ResultInfo, build_result
from slotune.workers.trial.backend import Backend, Measured
from slotune.workers.trial.capacity import measure_capacity, over_error_budget
from slotune.workers.trial.quality import (
    QUALITY,
    QualityUnavailable,
    command_verdict,
    golden_verdict,
    run_command,
    verdict_constraint,
)

__all__ = ["FITS", "run_pipeline"]

FITS = "fits"
"""The constraint every result carries: ≤ 0 when the configuration booted."""


async def run_pipeline(spec: TrialSpec, backend: Backend, *, detailed: bool = True
                       ) -> TrialResult:
    """Boot, measure in the spec's mode, and build the result. ``detailed=False`` keeps no
    per-request arrays (searches that hold thousands of results)."""
    timings: dict[str, float | None] = {}
    try:
        check = _QualityCheck(spec.quality)
        await check.baseline(backend)
        try:
            await backend.boot()
        finally:
            timings["boot_s"] = backend.boot_s
        if spec.golden_reference is not None:
            return await _baseline_answers(spec, spec.golden_reference, backend, timings)
        verdict = await check.verdict(spec, backend)
        if verdict is not None and verdict.passed is False:
            return _quality_failed(spec, verdict, timings, backend.facts)
        result = await _measure(spec, backend, timings, detailed)
        if verdict is None:
            return result
        if result.status != "ok":  # it passed, then failed under load: both are facts
            return result.model_copy(update={"quality": verdict})
        return result.model_copy(update={"quality": verdict, "constraints": {
            **result.constraints, QUALITY: verdict_constraint(verdict)}})
    except EngineFailure as exc:
        return _failed(spec, exc.failure, exc.message, timings, backend.facts,
                       log_tail=exc.log_tail)
    except DatasetError as exc:  # the workload's file, not the configuration: one line
        return _failed(spec, "input_error", " ".join(str(exc).split())[:1000], timings,
                       backend.facts)


async def _measure(spec: TrialSpec, backend: Backend, timings: dict[str, float | None],
                   detailed: bool) -> TrialResult:
    if spec.mode == "capacity":
        return await _capacity(spec, backend, timings, detailed)
    measured = await backend.measure(spec.workload)
    timings["warmup_s"], timings["measure_s"] = measured.warmup_s, measured.measure_s
    errors = _over_budget(spec, measured)
    if errors:
        return _failed(spec, "benchmark_errors", errors, timings, backend.facts,
                       log_tail=backend.log_tail())
    return _scored(spec, backend, measured, timings, detailed)


async def _baseline_answers(spec: TrialSpec, check: GoldenCheck, backend: Backend,
                            timings: dict[str, float | None]) -> TrialResult:
    """A quality baseline's result: its answers to the golden prompts, nothing measured.
    An engine that boots but cannot answer is a failed baseline (``crashed``), so every
    lossy trial waiting on it learns why its check cannot run."""
    started = time.perf_counter()
    try:
        answers = await backend.golden(check)
    except QualityUnavailable as exc:
        raise EngineFailure("crashed", f"the baseline booted but did not answer the golden "
                            f"prompts: {exc}", log_tail=backend.log_tail()) from None
    timings["measure_s"] = time.perf_counter() - started
    return _result(spec, "ok", timings, backend.facts, golden_answers=answers)


class _QualityCheck:
    """The quality gate of one trial: the baseline's answers before boot, the verdict
    after (before any load, so a configuration that fails is not measured at all)."""

    def __init__(self, gate: QualityGate | None) -> None:
        self.gate = gate
        self.reference = gate.reference if gate is not None else None
        self.unavailable = gate.reference_unavailable if gate is not None else None
        self.seconds = 0.0

    async def baseline(self, backend: Backend) -> None:
        gate = self.gate
        if gate is None or not gate.awaits_reference:
            return
        started = time.perf_counter()
        try:
            self.reference = await backend.baseline_golden(gate)
        except QualityUnavailable as exc:
            self.unavailable = f"the lossless baseline could not be measured: {exc}"
        self.seconds += time.perf_counter() - started

    async def verdict(self, spec: TrialSpec, backend: Backend) -> QualityVerdict | None:
        gate = self.gate
        if gate is None:
            return None
        method = "golden" if gate.golden is not None else "command"
        if gate.allow_lossy:
            return QualityVerdict(checked=False, method=method, lossy=gate.lossy,
                                  detail="not checked: lossy values allowed (--allow-lossy)")
        started = time.perf_counter()

        def seconds() -> float:  # the baseline's share, measured before boot, included
            return self.seconds + time.perf_counter() - started

        try:
            if self.unavailable is not None:
                raise QualityUnavailable(self.unavailable)
            if gate.golden is not None:
                assert self.reference is not None
                answers = await backend.golden(gate.golden)
                return golden_verdict(gate, self.reference, answers, seconds())
            assert gate.command is not None
            score = await run_command(gate.command, backend.base_url, spec.served_model)
            return command_verdict(gate, score, seconds())
        except QualityUnavailable as exc:
            return QualityVerdict(
                checked=False, method=method, lossy=gate.lossy, passed=False,
                seconds=seconds(),
                detail=f"{exc}; a lossy configuration scores only after its check passes "
                       "(fix the check, or allow lossy values with --allow-lossy)")


def _quality_failed(spec: TrialSpec, verdict: QualityVerdict,
                    timings: dict[str, float | None], facts: EngineFacts) -> TrialResult:
    """A lossy configuration that failed its quality check: objective 0 and a violated
    ``quality`` constraint, so the sampler learns; it was never put under load."""
    return _result(spec, "ok", timings, facts, objective=0.0, gate_passed=False,
                   constraints={FITS: -1.0, QUALITY: verdict_constraint(verdict)},
                   quality=verdict,
                   capacity=0.0 if spec.mode == "capacity" else None)


async def _capacity(spec: TrialSpec, backend: Backend, timings: dict[str, float | None],
                    detailed: bool) -> TrialResult:
    outcome = await measure_capacity(spec, backend)
    timings["warmup_s"], timings["measure_s"] = outcome.warmup_s, outcome.measure_s
    interval = outcome.interval
    found = {"capacity_probes": outcome.probes, "capacity": interval.centre or 0.0,
             "capacity_low": interval.low, "capacity_high": interval.high,
             "capacity_requests": outcome.requests}
    if interval.low is None:  # not even the lowest rate holds: the lowest probe says why
        lowest = outcome.measured[min(outcome.measured)]
        errors = _over_budget(spec, lowest)
        if errors:
            failed = _failed(spec, "benchmark_errors", errors, timings, backend.facts,
                             log_tail=backend.log_tail())
            return failed.model_copy(update=found)
        scored = _scored(spec, backend, lowest, timings, detailed)
        return scored.model_copy(update={**found, "objective": 0.0, "gate_passed": False})
    # The metrics are the highest passing probe's. The objective is what one GPU of the
    # replica carries: a search over tensor parallelism must not simply prefer more GPUs
    # (two TP-4 replicas may carry more than one TP-8). The per-replica capacity, what
    # the planner divides by, stays.
    scored = _scored(spec, backend, outcome.measured[interval.low], timings, detailed)
    return scored.model_copy(update={**found, "objective": (interval.centre or 0.0)
                                     / spec.gpus, "gate_passed": True})


def _over_budget(spec: TrialSpec, measured: Measured) -> str | None:
    """Why the run failed too many requests to be scored, or None."""
    return over_error_budget(spec, measured.score, measured.run.records)


def _scored(spec: TrialSpec, backend: Backend, measured: Measured,
            timings: dict[str, float | None], detailed: bool) -> TrialResult:
    run, sc = measured.run, measured.score
    phases = [timings.get(k) for k in ("boot_s", "warmup_s", "measure_s")]
    diagnosis = with_symptoms(
        diagnose(run.scrape, sc, spec.slo), run, sc, slo=spec.slo, workload=spec.workload,
        engine_flags=spec.engine_flags, boot_s=timings.get("boot_s"),
        total_s=sum(p for p in phases if p is not None))
    metrics = build_result(run=run, score=sc, workload=spec.workload, slo=spec.slo,
                           model=spec.model, endpoint=spec.workload.endpoint,
                           base_url=backend.base_url, diagnosis=diagnosis,
                           info=ResultInfo(detailed=detailed))
    if not detailed:  # a search's trials keep no per-request arrays at all
        for key in ("latencies", "queue_times"):
            metrics.pop(key)
        metrics[OURS]["metrics_scrape"] = {"available": run.scrape.available}
    return _result(
        spec, "ok", timings, backend.facts,
        objective=sc.objective,
        request_goodput=sc.request_goodput,
        gate_passed=sc.gate,
        constraints={FITS: -1.0, **sc.constraints},
        slo_margins={c.metric: c.margin_ms for c in sc.checks if c.margin_ms is not None},
        headroom=sc.worst_ratio,
        metrics=metrics,
        diagnosis=diagnosis.to_dict() if diagnosis else None,
        early_abort=run.early_abort.reason if run.early_abort else None,
    )


def _failed(spec: TrialSpec, failure: FailureClass, message: str,
            timings: dict[str, float | None], facts: EngineFacts,
            log_tail: str | None = None) -> TrialResult:
    """A failure; refusals and OOMs say the configuration does not fit (teaches TPE)."""
    fits = 1.0 if failure in ("invalid_config", "oom") else -1.0
    return _result(spec, "failed", timings, facts, failure=failure, failure_message=message,
                   log_tail=log_tail, constraints={FITS: fits})


def _result(spec: TrialSpec, status: str, timings: dict[str, float | None],
            facts: EngineFacts, **fields: Any) -> TrialResult:
    phases = {k: timings.get(k) for k in ("boot_s", "warmup_s", "measure_s")}
    total = sum(v for v in phases.values() if v is not None)
    # The boot split by what the engine said while starting, failed boots included.
    boot = boot_phases(facts.startup_phases_s, phases["boot_s"])
    return TrialResult.model_validate({
        "run_id": spec.run_id, "status": status, "engine": facts,
        "timings": PhaseTimings(**phases, **boot, total_s=total), **fields})
