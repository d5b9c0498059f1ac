"""One live trial: the pipeline (:mod:`slotune.workers.trial.pipeline`) on an engine process, then
teardown.

``run_trial`` is the unit of work of the whole service. Whatever happens — a refused
configuration, an OOM, an engine that dies mid-measurement, a cancelled task — the
engine's process group is gone when it returns, and the answer is a
:class:`~slotune.workers.contracts.TrialResult`: failures are results with a class, not
exceptions. :class:`LiveBackend` is the pipeline's live backend: it boots the engine
adapter, measures with the load generator under a watchdog (an engine that exits
mid-run fails the trial with the class its log shows), asks the engine to drop its
prefix cache between capacity probes (a courtesy: vLLM serves that only in dev mode),
and, for a lossy configuration's quality check, boots and stops its lossless baseline
before the engine itself boots (they never share a GPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import httpx

from slotune.workers.contracts import (
    EngineFacts,
    GoldenCheck,
    QualityGate,
    TrialResult,
    TrialSpec,
    Workload,
)
from slotune.workers.engines import EngineAdapter, EngineFailure, classify_failure, make_engine
from slotune.workers.gpu import GPUProbe
from slotune.workers.loadgen import run_benchmark
from slotune.workers.loadgen.score.scoring import score
from slotune.workers.trial.backend import Measured
from slotune.workers.trial.pipeline import run_pipeline
from slotune.workers.trial.quality import QualityUnavailable, golden_outputs

__all__ = ["LiveBackend", "run_trial", "run_trial_async"]

log = logging.getLogger(__name__)

def run_trial(spec: TrialSpec, *, gpu_ids: Sequence[str] = (), workdir: Path | None = None,
              probe: GPUProbe | None = None) -> TrialResult:
    """Run one trial to completion (blocking)."""
    return asyncio.run(run_trial_async(spec, gpu_ids=gpu_ids, workdir=workdir, probe=probe))


async def run_trial_async(spec: TrialSpec, *, gpu_ids: Sequence[str] = (),
                          workdir: Path | None = None,
                          probe: GPUProbe | None = None) -> TrialResult:
    started = time.perf_counter()
    started_at = datetime.now(UTC)
    workdir = workdir or Path(tempfile.mkdtemp(prefix=f"slotune-{_safe(spec.run_id)}-"))
    engine = make_engine(spec, workdir, gpu_ids)
    probe = probe if probe is not None else GPUProbe()
    try:
        result = await run_pipeline(spec, LiveBackend(spec, engine, probe, gpu_ids, workdir))
    finally:
        # Every path ends here, cancellation included: the engine's group is gone after.
        teardown_start = time.perf_counter()
        engine.stop()
        teardown_s = time.perf_counter() - teardown_start
        leftover = probe.busy(gpu_ids) if engine.occupies_gpus else []
        if leftover:
            log.error("trial %s: GPUs not free after teardown: %s", spec.run_id, leftover)
    timings = result.timings.model_copy(update={
        "teardown_s": teardown_s if engine.proc is not None else None,
        "total_s": time.perf_counter() - started,
        "started_at": started_at, "finished_at": datetime.now(UTC)})
    return result.model_copy(update={"timings": timings})


class LiveBackend:
    """The pipeline's live backend: an engine process, measured by the load generator."""

    def __init__(self, spec: TrialSpec, engine: EngineAdapter, probe: GPUProbe,
                 gpu_ids: Sequence[str], workdir: Path) -> None:
        self.spec, self.engine, self.probe, self.gpu_ids = spec, engine, probe, gpu_ids
        self.workdir = workdir
        self.facts = EngineFacts()
        self.boot_s: float | None = None

    @property
    def base_url(self) -> str:
        """The engine's URL (its port is chosen when it starts)."""
        return self.engine.base_url

    async def boot(self) -> None:
        spec, engine = self.spec, self.engine
        try:
            engine.check_args()
            busy = self.probe.busy(self.gpu_ids) if engine.occupies_gpus else []
            if busy:
                raise EngineFailure("worker_lost", "GPUs not free before boot: " + "; ".join(busy))
            boot_start = time.perf_counter()
            # A wait for the boot slot (a boot of the same configuration on this node
            # compiling first) counts as boot time.
            await engine.boot(spec.timeouts.startup_s)
            self.boot_s = time.perf_counter() - boot_start
        finally:
            self.facts = _facts(spec, engine, self.probe)
        version = await _server_version(engine)
        if version:
            self.facts = self.facts.model_copy(update={"engine_version": version})

    async def before_probe(self) -> None:
        await _reset_prefix_cache(self.engine)

    async def golden(self, check: GoldenCheck) -> tuple[tuple[int, ...], ...]:
        try:
            return await golden_outputs(self.engine.base_url, self.spec.served_model, check)
        except QualityUnavailable:
            if not self.engine.alive():  # not a quality problem: the engine died
                text = self.engine.log_text()
                raise EngineFailure(classify_failure(text, during="measure"),
                                    "engine exited during the quality check: "
                                    f"{self.engine.last_error_line(text)}",
                                    log_tail=self.engine.log_tail()) from None
            raise

    async def baseline_golden(self, gate: QualityGate) -> tuple[tuple[int, ...], ...]:
        assert gate.golden is not None
        twin = self.spec.baseline()
        engine = make_engine(twin, self.workdir / "baseline", self.gpu_ids)
        try:
            engine.check_args()
            await engine.boot(twin.timeouts.startup_s)
            return await golden_outputs(engine.base_url, twin.served_model, gate.golden)
        except EngineFailure as exc:
            raise QualityUnavailable(f"its start-up failed ({exc.failure}): "
                                     f"{exc.message}") from None
        finally:
            engine.stop()  # before this configuration boots: they never share a GPU

    def log_tail(self) -> str | None:
        return self.engine.log_tail()

    async def measure(self, workload: Workload, *,
                      abort_allowed: Mapping[str, int] | None = None) -> Measured:
        """One benchmark run under watchdogs: the engine dying (``crashed`` …) or staying
        alive but silent for ``timeouts.unresponsive_s`` (``hung``) fails the trial."""
        spec, engine = self.spec, self.engine
        scale = engine.time_scale
        begin = time.perf_counter()
        bench = asyncio.create_task(run_benchmark(
            engine.base_url, spec.served_model, workload, spec.slo, time_scale=scale,
            early_abort=spec.early_abort, abort_allowed=abort_allowed))
        watchdog = asyncio.create_task(engine.wait_exit())
        silence = asyncio.create_task(_silent_for(engine, spec.timeouts.unresponsive_s))
        try:
            done, _ = await asyncio.wait({bench, watchdog, silence},
                                         return_when=asyncio.FIRST_COMPLETED,
                                         timeout=spec.timeouts.measure_s)
            if watchdog in done:
                raise self._died(watchdog.result())
            if silence in done and bench not in done:
                raise EngineFailure("hung", f"the engine is alive but has not answered /health "
                                    f"for {silence.result():.0f} s during the measurement",
                                    log_tail=engine.log_tail())
            if bench not in done:
                raise EngineFailure("crashed",
                                    f"measurement exceeded {spec.timeouts.measure_s:g} s",
                                    log_tail=engine.log_tail())
            run = bench.result()
            # A dying engine fails its requests fast, so the run can end before the process
            # does (the server drains its connections first): ask it how it is.
            if not await _healthy(engine):
                with contextlib.suppress(TimeoutError):
                    raise self._died(await asyncio.wait_for(
                        engine.wait_exit(), spec.timeouts.teardown_grace_s))
                # Still shutting down (vLLM stops its engine cores one by one; slow on a
                # busy machine): a log that already says why it failed is the verdict.
                if (failure := self._stopped()) is not None:
                    raise failure
        finally:
            for task in (bench, watchdog, silence):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        total = time.perf_counter() - begin
        ends = [r.timings.end for r in run.warmup_records if r.timings.end is not None]
        starts = [r.timings.start for r in run.warmup_records if r.timings.start is not None]
        warmup_s = (max(ends) - min(starts)) / scale if ends and starts else 0.0
        aborted = run.early_abort.reason if run.early_abort else None
        return Measured(run, score(run.records, run.duration_s, spec.slo, aborted=aborted),
                        warmup_s, max(0.0, total - warmup_s))

    def _stopped(self) -> EngineFailure | None:
        """An engine that stopped serving and has not exited yet: its failure, where its
        log names one for certain (out of memory, a path the build does not implement);
        None where it does not (a slow answer to /health is not a failure)."""
        failure = self._from_log("the engine stopped serving during measurement")
        return None if failure.failure == "crashed" else failure

    def _died(self, exit_code: int) -> EngineFailure:
        return self._from_log(f"engine exited with code {exit_code} during measurement",
                              exit_code=exit_code)

    def _from_log(self, what: str, exit_code: int | None = None) -> EngineFailure:
        """The failure the engine's log shows, ``what`` happened and the log's error line."""
        text = self.engine.log_text()
        return EngineFailure(classify_failure(text, during="measure"),
                             f"{what}: {self.engine.last_error_line(text)}",
                             exit_code=exit_code, log_tail=self.engine.log_tail())


HEALTH_PROBE_S = 5.0
"""How often the hang watchdog asks ``/health``, and how long each answer may take."""


async def _silent_for(engine: EngineAdapter, limit_s: float) -> float:
    """Return (the seconds of silence) once the engine has answered no ``/health`` for
    ``limit_s``; never while it answers. Its death is the other watchdog's."""
    last_answer = time.monotonic()
    while True:
        await asyncio.sleep(HEALTH_PROBE_S)
        if await _healthy(engine, timeout_s=HEALTH_PROBE_S):
            last_answer = time.monotonic()
        elif time.monotonic() - last_answer >= limit_s:
            return time.monotonic() - last_answer


async def _healthy(engine: EngineAdapter, timeout_s: float = 5.0) -> bool:
    if not engine.alive():
        return False
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
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


def _facts(spec: TrialSpec, engine: EngineAdapter, probe: GPUProbe) -> EngineFacts:
    return engine.facts().model_copy(update={**engine.hardware_facts(probe),
                                             "model_revision": spec.model_revision})


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:40]
