"""One trial, end to end: boot the engine, warm up, measure against the SLO, tear down.

``run_trial`` is the unit of work of the whole service. Whatever happens — a refused
configuration, an OOM, an engine that dies mid-measurement, a cancelled task — the
engine's process group is gone when it returns, and the answer is a
:class:`~workers.contracts.TrialResult`: failures are results with a class, not
exceptions. Two modes:

* ``goodput``: one run at the workload's rate; objective = request goodput when the SLO
  gate holds, else 0;
* ``capacity``: on the one booted engine, the highest request rate at which the gate
  holds (bracket by doubling, then bisect). Each probe draws fresh prompts (the workload's
  seed advanced by the probe's number), so no probe is served from an earlier probe's
  prefix cache: vLLM serves ``/reset_prefix_cache`` only in its dev mode, so the reset
  asked for between probes is a courtesy, not what the measurement relies on. Each probe
  records the prefix-cache hits the engine counted during it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import platform
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from workers.contracts import (
    CapacityProbe,
    EngineFacts,
    FailureClass,
    PhaseTimings,
    TrialResult,
    TrialSpec,
)
from workers.engines import EngineAdapter, EngineFailure, classify_failure, make_engine
from workers.gpu import GPUProbe
from workers.loadgen import BenchmarkRun, Score, build_result, diagnose, run_benchmark, score
from workers.loadgen.symptoms import with_symptoms
from workers.sim.catalog import UnknownCatalogEntry, get_gpu

log = logging.getLogger(__name__)

FITS = "fits"
"""The constraint every result carries: ≤ 0 when the configuration booted."""
PROBE_SEED_STRIDE = 7919
"""Capacity probe ``i`` samples with the workload's seed + i × this: its own prompts."""
PREFIX_HITS = "vllm:prefix_cache_hits_total"


class _EngineDied(Exception):
    """The engine process exited while it was being measured."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"engine exited with code {exit_code} during measurement")
        self.exit_code = exit_code


def run_trial(spec: TrialSpec, *, gpu_ids: Sequence[str] = (), workdir: Path | None = None,
              probe: GPUProbe | None = None) -> TrialResult:
    """Run one trial to completion (blocking)."""
    return asyncio.run(run_trial_async(spec, gpu_ids=gpu_ids, workdir=workdir, probe=probe))


async def run_trial_async(spec: TrialSpec, *, gpu_ids: Sequence[str] = (),
                          workdir: Path | None = None,
                          probe: GPUProbe | None = None) -> TrialResult:
    started = time.perf_counter()
    started_at = datetime.now(UTC)
    workdir = workdir or Path(tempfile.mkdtemp(prefix=f"slotune-{_safe(spec.trial_id)}-"))
    engine = make_engine(spec, workdir, gpu_ids)
    probe = probe if probe is not None else GPUProbe()
    try:
        result = await _run_phases(spec, engine, probe, gpu_ids, started)
    finally:
        # Every path ends here, cancellation included: the engine's group is gone after.
        teardown_start = time.perf_counter()
        engine.stop()
        teardown_s = time.perf_counter() - teardown_start
        leftover = probe.busy(gpu_ids) if spec.engine == "vllm" else []
        if leftover:
            log.error("trial %s: GPUs not free after teardown: %s", spec.trial_id, leftover)
    timings = result.timings.model_copy(update={
        "teardown_s": teardown_s if engine.proc is not None else None,
        "total_s": time.perf_counter() - started,
        "started_at": started_at, "finished_at": datetime.now(UTC)})
    return result.model_copy(update={"timings": timings})


async def _run_phases(spec: TrialSpec, engine: EngineAdapter, probe: GPUProbe,
                      gpu_ids: Sequence[str], started: float) -> TrialResult:
    timings: dict[str, float | None] = {}
    facts = EngineFacts()
    try:
        engine.check_args()
        busy = probe.busy(gpu_ids) if spec.engine == "vllm" else []
        if busy:
            return _failed(spec, "worker_lost", "GPUs not free before boot: " + "; ".join(busy),
                           timings, started, facts)
        boot_start = time.perf_counter()
        engine.start()
        await engine.wait_ready(spec.timeouts.startup_s)
        timings["boot_s"] = time.perf_counter() - boot_start
        facts = _facts(spec, engine, probe)
        version = await _server_version(engine)
        if version:
            facts = facts.model_copy(update={"engine_version": version})
        if spec.mode == "capacity":
            return await _capacity(spec, engine, facts, timings, started)
        return await _goodput(spec, engine, facts, timings, started)
    except EngineFailure as exc:
        return _failed(spec, exc.failure, exc.message, timings, started,
                       facts if facts.argv else _facts(spec, engine, probe),
                       log_tail=exc.log_tail)


async def _measure(spec: TrialSpec, engine: EngineAdapter, *, request_rate: float | None = None,
                   num_prompts: int | None = None,
                   probe: int = 0) -> tuple[BenchmarkRun, float, float]:
    """One benchmark run under a watchdog; returns (run, warmup wall s, measure wall s).

    ``probe`` > 0 draws that probe's own prompts (a capacity search's later probes).
    """
    workload = spec.workload
    if request_rate is not None or num_prompts is not None or probe:
        data = workload.model_dump()
        if request_rate is not None:
            data["arrivals"]["request_rate"] = float(request_rate)
        if num_prompts is not None:
            data["num_prompts"] = num_prompts
        data["seed"] = workload.seed + PROBE_SEED_STRIDE * probe
        workload = type(workload).model_validate(data)
    scale = spec.sim.time_scale if spec.engine == "sim" else 1.0
    begin = time.perf_counter()
    bench = asyncio.create_task(run_benchmark(
        engine.base_url, spec.served_model, workload, spec.slo, time_scale=scale,
        early_abort=spec.early_abort))
    watchdog = asyncio.create_task(engine.wait_exit())
    try:
        done, _ = await asyncio.wait({bench, watchdog}, return_when=asyncio.FIRST_COMPLETED,
                                     timeout=spec.timeouts.measure_s)
        if watchdog in done:
            raise _EngineDied(watchdog.result())
        if bench not in done:
            raise EngineFailure("crashed", f"measurement exceeded {spec.timeouts.measure_s:g} s",
                                log_tail=engine.log_tail())
        run = bench.result()
        # A dying engine fails its requests fast, so the run can end before the process
        # does (the server drains its connections first): ask it how it is.
        if not await _healthy(engine):
            with contextlib.suppress(TimeoutError):
                raise _EngineDied(await asyncio.wait_for(
                    engine.wait_exit(), spec.timeouts.teardown_grace_s))
    finally:
        for task in (bench, watchdog):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    total = time.perf_counter() - begin
    ends = [r.timings.end for r in run.warmup_records if r.timings.end is not None]
    starts = [r.timings.start for r in run.warmup_records if r.timings.start is not None]
    warmup_s = (max(ends) - min(starts)) / scale if ends and starts else 0.0
    return run, warmup_s, max(0.0, total - warmup_s)


async def _goodput(spec: TrialSpec, engine: EngineAdapter, facts: EngineFacts,
                   timings: dict[str, float | None], started: float) -> TrialResult:
    try:
        run, timings["warmup_s"], timings["measure_s"] = await _measure(spec, engine)
    except _EngineDied as exc:
        return _died(spec, engine, exc, facts, timings, started)
    aborted = run.early_abort.reason if run.early_abort else None
    sc = score(run.records, run.duration_s, spec.slo, aborted=aborted)
    if sc.num_requests and sc.failed / sc.num_requests > spec.max_error_rate:
        errors = sorted({r.error for r in run.records if r.error})[:3]
        return _failed(spec, "benchmark_errors",
                       f"{sc.failed} of {sc.num_requests} requests failed "
                       f"(bound {spec.max_error_rate:.0%}): {'; '.join(errors)}",
                       timings, started, facts, log_tail=engine.log_tail())
    return _scored(spec, engine, run, sc, facts, timings, started)


async def _capacity(spec: TrialSpec, engine: EngineAdapter, facts: EngineFacts,
                    timings: dict[str, float | None], started: float) -> TrialResult:
    """Bracket the highest passing rate by doubling, then bisect (geometrically)."""
    search = spec.capacity
    probes: list[CapacityProbe] = []
    best: tuple[BenchmarkRun, Score] | None = None
    measure_total = warm_total = 0.0

    async def probe(rate: float) -> bool:
        nonlocal best, measure_total, warm_total
        await _reset_prefix_cache(engine)
        run, warm, meas = await _measure(spec, engine, request_rate=rate,
                                         num_prompts=search.prompts_per_probe,
                                         probe=len(probes))
        warm_total += warm
        measure_total += meas
        aborted = run.early_abort.reason if run.early_abort else None
        sc = score(run.records, run.duration_s, spec.slo, aborted=aborted)
        probes.append(CapacityProbe(request_rate=rate, gate_passed=sc.gate,
                                    request_goodput=sc.request_goodput,
                                    ratios={c.metric: c.constraint + 1 for c in sc.checks},
                                    prefix_cache_hit_tokens=run.scrape.counters.get(PREFIX_HITS)))
        if sc.gate:
            best = (run, sc)
        return sc.gate

    try:
        rate = search.min_rate
        rate0 = spec.workload.arrivals.request_rate
        if math.isfinite(rate0):
            rate = min(max(rate0, search.min_rate), search.max_rate)
        low: float | None = None
        high: float | None = None
        while len(probes) < search.max_probes:
            if await probe(rate):
                low = rate
                if rate >= search.max_rate:
                    break
                rate = min(rate * 2, search.max_rate)
            else:
                high = rate
                if rate <= search.min_rate:
                    break
                rate = max(rate / 2, search.min_rate)
            if low is not None and high is not None:
                break
        while (low is not None and high is not None and len(probes) < search.max_probes
               and high / low - 1 > search.relative_tolerance):
            mid = math.sqrt(low * high)
            if await probe(mid):
                low = mid
            else:
                high = mid
    except _EngineDied as exc:
        return _died(spec, engine, exc, facts, timings, started)
    timings["warmup_s"], timings["measure_s"] = warm_total, measure_total
    capacity = low or 0.0
    if best is None:
        return _result(spec, "ok", timings, started, facts, objective=0.0, capacity=0.0,
                       capacity_probes=tuple(probes), constraints={FITS: -1.0})
    run, sc = best
    scored = _scored(spec, engine, run, sc, facts, timings, started)
    return scored.model_copy(update={"objective": capacity, "capacity": capacity,
                                     "capacity_probes": tuple(probes)})


async def _healthy(engine: EngineAdapter) -> bool:
    if not engine.alive():
        return False
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            return (await client.get(f"{engine.base_url}/health")).status_code == 200
    except httpx.HTTPError:
        return False


async def _server_version(engine: EngineAdapter) -> str | None:
    """What the server says it is (vLLM's ``GET /version``); None if it does not say."""
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"{engine.base_url}/version")
        version = response.json().get("version") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return version if isinstance(version, str) and version else None


async def _reset_prefix_cache(engine: EngineAdapter) -> None:
    """Ask the engine to drop its prefix cache. vLLM outside dev mode answers 404: fresh
    prompts per probe make that harmless, so the answer is not needed."""
    with contextlib.suppress(httpx.HTTPError):
        async with httpx.AsyncClient(timeout=10) as client:
            await client.post(f"{engine.base_url}/reset_prefix_cache")


def _scored(spec: TrialSpec, engine: EngineAdapter, run: BenchmarkRun, sc: Score,
            facts: EngineFacts, timings: dict[str, float | None], started: float) -> TrialResult:
    phases = [timings.get(k) for k in ("boot_s", "warmup_s", "measure_s")]
    diagnosis = with_symptoms(
        diagnose(run.scrape, sc, spec.slo), run, sc, slo=spec.slo, workload=spec.workload,
        engine_flags=spec.engine_flags, boot_s=timings.get("boot_s"),
        total_s=sum(p for p in phases if p is not None))
    metrics = build_result(run=run, score=sc, workload=spec.workload, slo=spec.slo,
                           model=spec.model, endpoint=spec.workload.endpoint,
                           base_url=engine.base_url, diagnosis=diagnosis)
    margins = {c.metric: c.margin_ms for c in sc.checks if c.margin_ms is not None}
    return _result(
        spec, "ok", timings, started, facts,
        objective=sc.objective,
        request_goodput=sc.request_goodput,
        gate_passed=sc.gate,
        constraints={FITS: -1.0, **sc.constraints},
        slo_margins=margins,
        headroom=sc.worst_ratio,
        metrics=metrics,
        diagnosis=diagnosis.to_dict() if diagnosis else None,
        early_abort=run.early_abort.reason if run.early_abort else None,
    )


def _died(spec: TrialSpec, engine: EngineAdapter, exc: _EngineDied, facts: EngineFacts,
          timings: dict[str, float | None], started: float) -> TrialResult:
    text = engine.log_text()
    failure = classify_failure(text, during="measure")
    return _failed(spec, failure, f"{exc}: {engine.last_error_line(text)}", timings, started,
                   facts, log_tail=engine.log_tail())


def _failed(spec: TrialSpec, failure: FailureClass, message: str,
            timings: dict[str, float | None], started: float, facts: EngineFacts,
            log_tail: str | None = None) -> TrialResult:
    """A failure; refusals and OOMs say the configuration does not fit (teaches TPE)."""
    fits = 1.0 if failure in ("invalid_config", "oom") else -1.0
    return _result(spec, "failed", timings, started, facts, failure=failure,
                   failure_message=message, log_tail=log_tail, constraints={FITS: fits})


def _result(spec: TrialSpec, status: str, timings: dict[str, float | None], started: float,
            facts: EngineFacts, **fields: Any) -> TrialResult:
    phase = PhaseTimings(boot_s=timings.get("boot_s"), warmup_s=timings.get("warmup_s"),
                         measure_s=timings.get("measure_s"),
                         teardown_s=timings.get("teardown_s"),
                         total_s=time.perf_counter() - started)
    return TrialResult.model_validate({"trial_id": spec.trial_id, "status": status,
                                       "engine": facts, "timings": phase, **fields})


def _facts(spec: TrialSpec, engine: EngineAdapter, probe: GPUProbe) -> EngineFacts:
    facts = engine.facts()
    update: dict[str, Any] = {}
    if spec.engine == "sim":
        with contextlib.suppress(UnknownCatalogEntry):
            gpu = get_gpu(spec.sim.gpu)
            update = {"gpu_name": f"{gpu.device_name} (simulated)",
                      "gpu_memory_bytes": gpu.memory_bytes}
    elif spec.device == "cpu":
        update = {"gpu_name": f"cpu ({_cpu_model()})"}
    else:
        gpus = probe.gpus(engine.gpu_ids)
        if gpus:
            update = {"gpu_name": gpus[0].name, "gpu_memory_bytes": gpus[0].memory_total,
                      "gpu_driver": probe.driver_version()}
    return facts.model_copy(update={**update, "model_revision": spec.model_revision})


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:40]
