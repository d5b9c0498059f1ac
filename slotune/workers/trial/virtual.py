"""A trial in virtual time: the simulated engine runs the workload in milliseconds.

``run_virtual_trial(spec)`` answers what the live worker would answer for
``engine="sim"`` — same requests (the load generator's own samplers and arrival
schedule, same seed), same scoring (:func:`slotune.workers.loadgen.score`), same diagnosis and
result fields — without starting a server. Search-quality benchmarks and pre-screening
use it; its timings are *engine* seconds, i.e. what the trial would cost on a GPU:

* ``boot_s`` — modelled weight loading + CUDA graph capture (a refused start-up costs
  the time vLLM takes to refuse: process start, and weights loaded for an OOM), split
  into the ``boot_*_s`` phases from the phases the simulated server prints
  (:func:`slotune.workers.sim.config.startup_phases`), as a live trial's from vLLM's log;
* ``measure_s`` — the simulated measurement, cut at the early-abort point when the
  gate could no longer hold (the live runner stops there too).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from itertools import pairwise
from typing import Any

from pydantic import TypeAdapter

from slotune.workers.contracts import (
    SLO,
    DatasetConfig,
    EngineFacts,
    GoldenCheck,
    KnobValue,
    MultiTurnDataset,
    QualityGate,
    TrialResult,
    TrialSpec,
    Workload,
)
from slotune.workers.engines import EngineFailure
from slotune.workers.engines.sim import SIM_ARGS, sim_options
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.generate.arrivals import arrival_offsets
from slotune.workers.loadgen.generate.datasets import sample_requests
from slotune.workers.loadgen.generate.sessions import group_sessions, session_offsets
from slotune.workers.loadgen.runner import AbortMonitor, BenchmarkRun, EarlyAbort, SendLag
from slotune.workers.loadgen.score.scoring import Score, score
from slotune.workers.loadgen.scrape import HistogramDelta, ScrapeSummary
from slotune.workers.sim import tokenizer
from slotune.workers.sim.calibration import RooflineCalibration
from slotune.workers.sim.catalog import UnknownCatalogEntry
from slotune.workers.sim.config import (
    EngineConfig,
    EngineConfigError,
    MemoryPlan,
    build_config,
    graph_capture_seconds,
    load_seconds,
    plan_memory,
    startup_phases,
    weight_bytes,
)
from slotune.workers.sim.core import EngineCore, RequestRejected, SimRequest
from slotune.workers.sim.numerics import greedy_answer
from slotune.workers.sim.virtual_time import (
    RequestTiming,
    SimRequestSpec,
    SimulationResult,
    simulate,
)
from slotune.workers.trial.backend import Measured
from slotune.workers.trial.pipeline import run_pipeline
from slotune.workers.trial.quality import QualityUnavailable

__all__ = [
    "PROCESS_START_S",
    "SCRAPE_INTERVAL_S",
    "ProbeRun",
    "VirtualBackend",
    "engine_config",
    "golden_answers",
    "run_virtual_trial",
]

PROCESS_START_S = 5.0
"""Engine seconds before vLLM gets to its own checks (interpreter, imports, arg parsing)."""
SCRAPE_INTERVAL_S = 0.5
"""The live runner's default ``/metrics`` interval, engine time: gauges are sampled so."""




def engine_config(spec: TrialSpec, *, seed: int | None = None,
                  calibration: RooflineCalibration | None = None) -> EngineConfig:
    """The simulated engine's config for ``spec``; raises ``EngineConfigError`` as vLLM would.

    ``calibration`` replaces the engine's own roofline factors (the twin's predictions)."""
    kwargs: dict[str, Any] = {}
    for name, value in spec.engine_flags.items():
        if name in spec.allowed_extra_args and name not in SIM_ARGS:
            continue  # declared acceptable by the space; the simulator has no use for it
        if name not in SIM_ARGS:
            raise EngineConfigError(
                f"unrecognized arguments: --{name.replace('_', '-')} (valid: "
                f"{', '.join(sorted(SIM_ARGS))}, or list it in allowed_extra_args)"
            )
        kwargs[name] = _flag_value(name, value)  # build_config takes vLLM's argument names
    sim = sim_options(spec)
    try:
        config = build_config(
            spec.model, sim_gpu=spec.gpu, sim_seed=sim.seed if seed is None else seed,
            sim_noise=sim.noise, sim_cost_model=sim.cost_model, **kwargs,
        )
    except UnknownCatalogEntry as exc:
        raise EngineConfigError(str(exc)) from exc
    return config if calibration is None else replace(config, calibration=calibration)


def _flag_value(name: str, value: KnobValue) -> Any:
    if name == "speculative_config" and isinstance(value, dict):
        return json.dumps(value)  # the CLI takes JSON; so does build_config
    if name == "quantization" and isinstance(value, str) and value.lower() in {"none", ""}:
        return None
    return value


def golden_answers(config: EngineConfig, check: GoldenCheck) -> tuple[tuple[int, ...], ...]:
    """What the simulated engine answers the golden prompts, in its token ids — the
    server's greedy answer (:func:`~slotune.workers.sim.numerics.greedy_answer`), lossy numerics
    included, tokenized as its ``/tokenize`` would."""
    vocab = config.model.vocab_size
    return tuple(
        tuple(tokenizer.word_to_id(w, vocab) for w in greedy_answer(
            tokenizer.encode(prompt, vocab), config.flip_rate, check.max_tokens))
        for prompt in check.prompts)


# --- one measured run ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeRun:
    """One simulated measurement at one rate: what the live runner would have recorded."""

    run: BenchmarkRun
    score: Score
    sim: SimulationResult
    measure_s: float
    """Engine seconds charged: to the early-abort point, else the whole run."""


def _requests(workload: Workload, config: EngineConfig, n: int,
              ) -> tuple[list[SimRequestSpec], list[RequestRecord], _Conversations | None]:
    """The workload's requests (the load generator's samplers), the ones vLLM rejects, and
    for conversations the driver of their later turns (only first turns are in the list)."""
    prompts = _tokenized(workload.dataset.model_dump_json(), n, workload.seed,
                         config.model.vocab_size, workload.token_seed)
    checker = _Admission(config)
    if isinstance(workload.dataset, MultiTurnDataset):
        offsets = session_offsets(prompts, workload.dataset, workload.arrivals, workload.seed)
        conversations = _Conversations(prompts, checker, config.model.vocab_size)
        return ([s for s in (conversations.first(group, offset) for group, offset
                             in zip(group_sessions(prompts), offsets, strict=True)) if s],
                conversations.rejected, conversations)
    offsets = arrival_offsets(len(prompts), workload.arrivals, workload.seed,
                              [p.arrival_offset_s for p in prompts])
    sims: list[SimRequestSpec] = []
    rejected: list[RequestRecord] = []
    for i, (prompt, offset) in enumerate(zip(prompts, offsets, strict=True)):
        error = checker.error(len(prompt.ids), prompt.output_len)
        if error is not None:  # the server answers 400 at once: a failed row, not a crash
            rejected.append(_rejected(i, prompt.prompt_len, prompt.output_len, offset, error))
            continue
        sims.append(SimRequestSpec(offset, prompt.ids, prompt.output_len, request_id=str(i)))
    return sims, rejected, None


def _rejected(index: int, prompt_len: int, output_len: int, at: float, error: str,
              **session: Any) -> RequestRecord:
    t = RequestTimings(target=at, ready=at, start=at, end=at)
    return RequestRecord(index, prompt_len, output_len, t, error=f"HTTP 400: {error}", **session)


@dataclass(frozen=True, slots=True)
class _Prompt:
    ids: tuple[int, ...]
    prompt_len: int
    output_len: int
    arrival_offset_s: float | None
    session: int | None = None
    turn: int = 1
    think_time_s: float = 0.0


class _Conversations:
    """The live runner's sessions in virtual time: as a turn finishes, its session's next
    turn arrives after its think time, its prompt the finished turn's prompt, the answer
    the client saw, and the new message (:mod:`slotune.workers.loadgen.generate.sessions`)."""

    def __init__(self, prompts: Sequence[_Prompt], checker: _Admission, vocab: int) -> None:
        self._prompts, self._checker, self._vocab = prompts, checker, vocab
        self._next: dict[int, int] = {}
        self.context: dict[int, int] = {}
        """Index → the conversation tokens its prompt re-sends (the records' context)."""
        self.rejected: list[RequestRecord] = []

    def first(self, group: list[int], offset: float) -> SimRequestSpec | None:
        self._next.update(pairwise(group))
        return self._spec(group[0], offset, self._prompts[group[0]].ids, 0)

    def follow_up(self, req: SimRequest) -> SimRequestSpec | None:
        after = self._next.get(int(req.request_id))
        if after is None or req.finish_time is None or req.finish_reason == "abort":
            return None
        answer = tuple(tokenizer.word_to_id(w, self._vocab)
                       for w in req.output_words(0, req.num_output))
        context = (*req.prompt_ids, *answer)
        return self._spec(after, req.finish_time + self._prompts[after].think_time_s,
                          (*context, *self._prompts[after].ids), len(context))

    def _spec(self, index: int, at: float, ids: tuple[int, ...],
              context: int) -> SimRequestSpec | None:
        prompt = self._prompts[index]
        self.context[index] = context
        error = self._checker.error(len(ids), prompt.output_len)
        if error is not None:  # the conversation outgrew the context: a 400 ends it
            self.rejected.append(_rejected(index, len(ids), prompt.output_len, at, error,
                                           session=prompt.session, turn=prompt.turn,
                                           context_tokens=context))
            return None
        return SimRequestSpec(at, ids, prompt.output_len, request_id=str(index))

    def annotate(self, record: RequestRecord) -> RequestRecord:
        prompt = self._prompts[record.index]
        return replace(record, session=prompt.session, turn=prompt.turn,
                       context_tokens=self.context.get(record.index, 0))

    def unsent(self, sent: set[int], at: float) -> list[RequestRecord]:
        """Turns never sent: an earlier turn of their session failed, or the engine died."""
        return [RequestRecord(i, p.prompt_len, p.output_len,
                              RequestTimings(at, at, at, (), at), session=p.session,
                              turn=p.turn, error="not sent: an earlier turn of its session "
                              "failed")
                for i, p in enumerate(self._prompts) if i not in sent]


_DATASET: TypeAdapter[DatasetConfig] = TypeAdapter(DatasetConfig)


@lru_cache(maxsize=32)
def _tokenized(dataset_json: str, n: int, seed: int, vocab_size: int,
               token_seed: int | None) -> tuple[_Prompt, ...]:
    """The sampled prompts in the simulator's token ids. Sampling and tokenizing is most
    of a short virtual trial's cost and the same for every configuration of a workload
    (the twin screens hundreds), so it is kept: keyed by the dataset's JSON, its count,
    seeds and vocabulary."""
    specs = sample_requests(_DATASET.validate_json(dataset_json), n, seed,
                            token_seed=token_seed)
    return tuple(_Prompt(tuple(tokenizer.encode(req.prompt, vocab_size)), req.prompt_len,
                         req.output_len, req.arrival_offset_s, req.session, req.turn,
                         req.think_time_s) for req in specs)


class _Admission:
    """vLLM's per-request admission checks, asked of a real engine core when in doubt.

    Building a core sizes its block pool (tens of ms on a big GPU), so the common case —
    a prompt plus its output inside max_model_len — is let through without one.
    """

    def __init__(self, config: EngineConfig) -> None:
        self._config = config
        self._core: EngineCore | None = None

    def error(self, prompt_len: int, max_tokens: int) -> str | None:
        if prompt_len >= 1 and prompt_len + max_tokens <= self._config.max_model_len:
            return None
        if self._core is None:
            self._core = EngineCore(self._config)
        try:
            self._core.validate(prompt_len, max_tokens)
        except RequestRejected as exc:
            return str(exc)
        return None


def _record(timing: RequestTiming, crashed: str | None) -> RequestRecord:
    index = int(timing.request_id)
    start = timing.arrival_time
    chunks = tuple(sorted(set(timing.token_times)))  # one streamed chunk per engine step
    if timing.finish_time is None:
        error = f"engine died: {crashed}" if crashed else "request did not finish"
        end = max(chunks, default=start)
        t = RequestTimings(start, start, start, chunks, end)
        return RequestRecord(index, timing.prompt_tokens, timing.output_tokens, t,
                             output_tokens=timing.output_tokens, error=error)
    t = RequestTimings(start, start, start, chunks, timing.finish_time)
    return RequestRecord(index, timing.prompt_tokens, timing.output_tokens, t,
                         output_tokens=timing.output_tokens)


def _completion_time(record: RequestRecord) -> float:
    t = record.timings
    return t.end if t.end is not None else max(t.chunks, default=t.start)


def _early_abort(records: Sequence[RequestRecord], slo: SLO, n: int,
                 allowed: Mapping[str, int] | None = None,
                 ) -> tuple[EarlyAbort | None, float | None]:
    """The live runner's monitor, fed the completions in time order (after the fact)."""
    monitor = AbortMonitor(slo, n, allowed)
    for record in sorted(records, key=_completion_time):
        if monitor.observe(record):
            return monitor.tripped, _completion_time(record)
    return None, None


def _scrape(sim: SimulationResult, records: Sequence[RequestRecord], until: float,
            load_end: float) -> ScrapeSummary:
    """What ``/metrics`` scrapes would have seen up to ``until`` (engine seconds)."""
    series = sim.series
    summary = ScrapeSummary(available=True, load_end_s=min(load_end, until))
    gauges: dict[str, list[tuple[float, float]]] = {
        "vllm:num_requests_running": [], "vllm:num_requests_waiting": [],
        "vllm:kv_cache_usage_perc": [],
    }
    next_sample = 0.0
    preemptions = 0
    for i, t in enumerate(series.time):
        if t > until:
            break
        preemptions = series.num_preemptions[i]
        if t >= next_sample:
            gauges["vllm:num_requests_running"].append((t, float(series.num_requests_running[i])))
            gauges["vllm:num_requests_waiting"].append((t, float(series.num_requests_waiting[i])))
            gauges["vllm:kv_cache_usage_perc"].append((t, series.kv_cache_usage_perc[i]))
            next_sample = t + SCRAPE_INTERVAL_S
    summary.gauges = {k: v for k, v in gauges.items() if v}
    summary.scrapes = len(summary.gauges.get("vllm:num_requests_running", []))
    done = {r.index for r in records if r.success}
    finished = [t for t in sim.requests
                if int(t.request_id) in done and t.first_token_time is not None
                and t.first_scheduled_time is not None and t.finish_time is not None]
    queries = float(sum(t.prompt_tokens for t in finished))
    summary.counters = {
        "vllm:num_preemptions_total": float(preemptions),
        "vllm:prompt_tokens_total": queries,
        "vllm:generation_tokens_total": float(sum(t.output_tokens for t in finished)),
        "vllm:prefix_cache_queries_total": queries,
        "vllm:prefix_cache_hits_total": float(sum(t.num_cached_tokens for t in finished)),
        "vllm:request_success_total": float(len(finished)),
    }

    def hist(values: list[float]) -> HistogramDelta:
        return HistogramDelta(float(len(values)), float(sum(values)))

    summary.histograms = {
        "vllm:request_queue_time_seconds": hist(
            [t.first_scheduled_time - t.arrival_time for t in finished]),  # type: ignore[operator]
        "vllm:request_prefill_time_seconds": hist(
            [t.first_token_time - t.first_scheduled_time for t in finished]),  # type: ignore[operator]
        "vllm:request_decode_time_seconds": hist(
            [t.finish_time - t.first_token_time for t in finished]),  # type: ignore[operator]
        "vllm:time_to_first_token_seconds": hist(
            [t.first_token_time - t.arrival_time for t in finished]),  # type: ignore[operator]
        "vllm:e2e_request_latency_seconds": hist(
            [t.finish_time - t.arrival_time for t in finished]),  # type: ignore[operator]
    }
    return summary


def measure(spec: TrialSpec, config: EngineConfig, workload: Workload,
            abort_allowed: Mapping[str, int] | None = None) -> ProbeRun:
    """Simulate ``workload`` on ``config`` and score it as the live runner + scorer would
    (``abort_allowed``: as :meth:`slotune.workers.trial.backend.Backend.measure`)."""
    sims, rejected, conversations = _requests(workload, config, workload.num_prompts)
    if conversations is None:
        n = len(sims) + len(rejected)
        sim = simulate(config, sims) if sims else _empty(config)
        records = [*(_record(t, sim.crashed) for t in sim.requests), *rejected]
    else:
        n = workload.num_prompts
        sim = simulate(config, sims, follow_up=conversations.follow_up) if sims \
            else _empty(config)
        records = [conversations.annotate(_record(t, sim.crashed)) for t in sim.requests]
        records += conversations.rejected
        records += conversations.unsent({r.index for r in records}, sim.duration)
    records.sort(key=lambda r: r.index)
    duration = max((_completion_time(r) for r in records), default=0.0)
    abort, cut = _early_abort(records, spec.slo, n, abort_allowed) if spec.early_abort \
        else (None, None)
    if cut is not None:
        # the live runner stops at the (allowed+1)-th breaker and keeps what had completed
        records = [r for r in records if _completion_time(r) <= cut]
        duration = cut
    load_end = max((r.timings.start for r in records), default=0.0)
    run = BenchmarkRun(
        started_at=datetime.now(),
        duration_s=duration,
        records=records,
        warmup_records=[],
        send_lag=SendLag.of([0.0] * len(records), 5.0),  # virtual time: sent exactly on time
        scrape=_scrape(sim, records, duration, load_end),
        time_scale=1.0,
        early_abort=abort,
    )
    s = score(records, duration, spec.slo, aborted=None if abort is None else abort.reason)
    return ProbeRun(run, s, sim, duration)


def _empty(config: EngineConfig) -> SimulationResult:
    return simulate(config, [])


# --- the trial ----------------------------------------------------------------------------


def _boot(spec: TrialSpec, calibration: RooflineCalibration | None = None
          ) -> tuple[EngineConfig, MemoryPlan, float]:
    try:
        config = engine_config(spec, calibration=calibration)
    except EngineConfigError as exc:
        raise EngineFailure("invalid_config", str(exc), log_tail=str(exc),
                            boot_s=PROCESS_START_S) from exc
    try:
        plan = plan_memory(config)
    except EngineConfigError as exc:
        # weights were loaded before the profile run found no room
        loaded = PROCESS_START_S + min(weight_bytes(config), config.gpu.memory_bytes) / 2e9
        raise EngineFailure("oom", str(exc), log_tail=str(exc), boot_s=loaded) from exc
    boot = PROCESS_START_S + load_seconds(config, plan)
    if not config.enforce_eager:
        boot += graph_capture_seconds(config)
    return config, plan, boot


def run_virtual_trial(spec: TrialSpec, *, per_request: bool = True,
                      calibration: RooflineCalibration | None = None) -> TrialResult:
    """Run ``spec`` on the simulated engine in virtual time, through the trial pipeline.

    ``per_request=False`` drops the per-request arrays (``ttfts``, ``itls``, …) from
    ``metrics`` — benchmarks that keep thousands of results need the memory. A space
    whose engine is vLLM is simulated with the simulator's default options (the
    simulator takes vLLM's flags and knows the catalog's models). ``calibration`` runs
    the simulator with those roofline factors instead of its own (how the twin predicts
    a trial).
    """
    spec = spec.for_engine("sim")
    backend = VirtualBackend(spec, calibration=calibration)
    return asyncio.run(run_pipeline(spec, backend, detailed=per_request))


class VirtualBackend:
    """The pipeline's virtual backend: the simulated engine, measured in virtual time.

    Its seconds are engine seconds — what the trial would cost on the GPU it models.
    """

    base_url = "sim://virtual-time"

    def __init__(self, spec: TrialSpec, *,
                 calibration: RooflineCalibration | None = None) -> None:
        self.spec = spec
        self.calibration = calibration
        self.facts = EngineFacts()
        self.boot_s: float | None = None
        self._config: EngineConfig | None = None

    async def boot(self) -> None:
        spec = self.spec
        try:
            config, plan, self.boot_s = _boot(spec, self.calibration)
        except EngineFailure as refused:
            self.boot_s = refused.boot_s
            raise
        self._config = config
        self.facts = EngineFacts(
            engine_version="slotune-sim", model_revision=spec.model_revision,
            gpu_name=config.gpu.device_name,
            gpu_memory_bytes=config.gpu.memory_bytes, kv_cache_tokens=plan.kv_tokens,
            max_concurrency=plan.kv_tokens / config.max_model_len,
            startup_phases_s=startup_phases(config, plan),
            resolved_config=config.resolved(),
        )

    async def before_probe(self) -> None:
        """Every simulation starts with an empty prefix cache."""

    def log_tail(self) -> str | None:
        return None

    async def golden(self, check: GoldenCheck) -> tuple[tuple[int, ...], ...]:
        assert self._config is not None, "boot() first"
        return golden_answers(self._config, check)

    async def baseline_golden(self, gate: QualityGate) -> tuple[tuple[int, ...], ...]:
        assert gate.golden is not None
        try:
            config = _boot(self.spec.baseline(), self.calibration)[0]
        except EngineFailure as refused:
            raise QualityUnavailable(f"the baseline's start-up failed ({refused.failure}): "
                                     f"{refused.message}") from None
        return golden_answers(config, gate.golden)

    async def measure(self, workload: Workload, *,
                      abort_allowed: Mapping[str, int] | None = None) -> Measured:
        assert self._config is not None, "boot() first"
        probe = measure(self.spec, self._config, workload, abort_allowed)
        if probe.sim.crashed is not None:  # the live engine process dies of it
            raise EngineFailure("oom", probe.sim.crashed, log_tail=probe.sim.crashed)
        return Measured(probe.run, probe.score, 0.0, probe.measure_s)
