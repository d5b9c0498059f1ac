"""Everything a trial learned, failures included: its status and failure class, phase
timings, engine facts, capacity probes and their evidence, the quality verdict, and
:class:`TrialResult`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import (
    Field,
    model_validator,
)

from slotune.workers.contracts._base import RUN_ID_ALIASES, _Strict

TrialStatus = Literal["ok", "infeasible", "failed"]
FailureClass = Literal["invalid_config", "oom", "startup_timeout", "crashed", "hung",
                       "benchmark_errors", "worker_lost", "client_bound", "input_error"]
"""Why a trial failed. ``hung``: the engine stayed alive but stopped answering during the
measurement (a deadlock, a stopped process). ``worker_lost`` and ``client_bound`` (the
load generator fell behind its schedule, so the measurement is invalid) are the
machine's fault, not the configuration's: the coordinator runs the same configuration
again. ``input_error``: a file the workload names could not be read as its dataset (it
changed after it was checked at submit) — neither the configuration's fault nor the
machine's, and the same on every attempt: the coordinator stops the sweep with the file's
message instead of running it again."""
FAILURE_CLASSES: tuple[FailureClass, ...] = get_args(FailureClass)
TRANSIENT_FAILURES: tuple[FailureClass, ...] = ("worker_lost", "client_bound")
INPUT_FAILURES: tuple[FailureClass, ...] = ("input_error",)
"""Failures that stop the sweep: its input, not a configuration, is wrong."""


class PhaseTimings(_Strict):
    """Where a trial's wall time went, seconds (None: the phase did not run).

    ``boot_s`` is split by what the engine's start-up log said
    (:func:`slotune.workers.engines.boot_phases`); each part is None where the log did not say,
    and rows stored before the split have none of them.
    """

    boot_s: float | None = None
    warmup_s: float | None = None
    measure_s: float | None = None
    teardown_s: float | None = None
    total_s: float = 0.0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    boot_turn_wait_s: float | None = None
    """Waiting for another boot of the same configuration on the node to finish first
    (the shared compile cache's turn), before this engine started."""
    boot_weights_s: float | None = None
    """Building the model and loading its weights."""
    boot_compile_s: float | None = None
    """torch.compile (or loading its cached result)."""
    boot_graph_capture_s: float | None = None
    """CUDA graph capture."""
    boot_kv_cache_s: float | None = None
    """Memory profiling, KV-cache allocation and warm-up, less compile and graph capture."""
    boot_server_ready_s: float | None = None
    """The rest of ``boot_s``: interpreter start, API server, until ``/health`` answered."""


BOOT_PHASES: tuple[str, ...] = tuple(
    name for name in PhaseTimings.model_fields if name.startswith("boot_") and name != "boot_s")
"""The parts of ``PhaseTimings.boot_s``, in the order a boot runs them."""


class EngineFacts(_Strict):
    """What the engine said about itself (start-up log, /v1/models) and its GPUs."""

    argv: tuple[str, ...] = ()
    """The command line as run, secrets redacted."""
    engine_version: str | None = None
    gpu_name: str | None = None
    gpu_driver: str | None = None
    """The GPU driver's version (NVML), where there is one."""
    model_revision: str | None = None
    """Which weights: ``--revision``, or the Hugging Face snapshot a local path points at."""
    gpu_memory_bytes: int | None = None
    gpu_ids: tuple[str, ...] = ()
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    startup_phases_s: dict[str, float] = Field(default_factory=dict)
    """Phase → seconds where the log says so (weights loading, graph capturing)."""
    resolved_config: dict[str, Any] = Field(default_factory=dict)


ProbeVerdict = Literal["pass", "fail", "overload", "undecided", "client_bound"]
"""What a capacity probe showed (:mod:`slotune.workers.loadgen.score.verdict`)."""


class TailEvidence(_Strict):
    """What one SLO target's values said of its percentile at the probe's confidence."""

    n: int
    """Values the percentile is over (a failed request is one, infinitely slow)."""
    exceeding: int
    """Of those, over the target."""
    allowed: int
    """The most exceedances a pass tolerates at this ``n`` (−1: ``n`` too small)."""
    fail_at: int
    """The fewest exceedances that fail at this ``n``."""
    upper_ms: float | None = None
    """The percentile's upper confidence bound (an order statistic), ms."""
    lower_ms: float | None = None
    """The percentile's lower confidence bound, ms."""


class CapacityProbe(_Strict):
    """One rate tried in capacity mode and what it showed."""

    request_rate: float
    gate_passed: bool
    """Whether the probe passed (``verdict == "pass"``; probes stored before verdicts:
    the sample's own percentile within target)."""
    request_goodput: float
    ratios: dict[str, float] = Field(default_factory=dict)
    """observed / target per SLO metric (the sample's own percentile)."""
    verdict: ProbeVerdict | None = None
    """What the probe showed at ``confidence`` (None: stored before verdicts)."""
    confidence: float | None = None
    tails: dict[str, TailEvidence] = Field(default_factory=dict)
    """Per SLO target, what its values said of the percentile (the verdict's evidence)."""
    runs: int = 1
    """Measured runs the probe pooled: its first, and the extensions an undecided verdict
    asked for (each with fresh requests at the same rate)."""
    offered_rate: float | None = None
    """Requests that arrived per second over the probe's steady window."""
    completed_rate: float | None = None
    """What the engine got through there: the offered rate less the growth of requests in
    flight (:class:`slotune.workers.loadgen.score.verdict.SteadyState`)."""
    queue_growth: float | None = None
    """How fast requests in flight grew over the steady window, req/s."""
    waiting_growth: float | None = None
    """How fast the engine's waiting queue grew, req/s (None: not scraped)."""
    steady_window_s: float | None = None
    """The steady window the rates are over, engine seconds (0: too short to judge)."""
    queue_growth_se: float | None = None
    """The growth's standard error, req/s (what a window this long can resolve)."""
    prefix_cache_hit_tokens: float | None = None
    """Prompt tokens served from the prefix cache during this probe (the engine's counter;
    None when its metrics were not scraped)."""
    in_session_hit_tokens: float | None = None
    """Of those, the hits on context a conversation re-sent within its own session: the
    workload's own reuse, not carried over from another probe (``multi_turn`` only;
    attributed as :mod:`slotune.workers.loadgen.generate.sessions` says)."""
    medians_ms: dict[str, float] = Field(default_factory=dict)
    """Median TTFT and TPOT (ms) of the probe's completed requests. Smooth in the engine's
    speed where a short probe's p99 is one request's luck: the twin fits both."""
    # What the probe measured, kept so any SLO of the same percentile family can be scored
    # from the stored probes later (slotune.tuner.planning.rescore). Rows stored before these fields
    # have none of them (None / empty): they read as before and rescore as "not measured".
    percentiles_ms: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    """Metric (``ttft``, ``tpot``, ``itl``, ``e2el``) → ``"p50"``, ``"p90"``, ``"p95"``,
    ``"p99"``, ``"p99.9"`` (and the SLO's own percentile) → ms, over the values the gate
    reads: a failed request counts as infinitely slow, written null (the gate breaks)."""
    num_requests: int | None = None
    failed_requests: int | None = None
    """Requests that errored (the error budget, ``max_error_rate``, is over these)."""
    duration_s: float | None = None
    request_throughput: float | None = None
    """Completed requests per second over the probe's runs (engine time, drains included,
    as ``vllm bench serve`` counts it)."""
    output_throughput: float | None = None
    """Output tokens per second of the completed requests (the whole replica)."""
    total_token_throughput: float | None = None
    """Prompt + output tokens per second of the completed requests."""
    send_lag_p99_ms: float | None = None
    """How late the client sent its requests (p99, engine ms): a client that fell behind
    distorts what the probe measured."""
    client_bound: bool | None = None
    early_abort: str | None = None
    """Why the probe stopped measuring early (its SLO's bound was already over target);
    its percentiles then cover only the requests that finished before."""
    early_abort_metric: str | None = None
    """The metric whose breakers stopped it."""


class QualityVerdict(_Strict):
    """What the quality gate found for a lossy configuration."""

    checked: bool
    """False: not checked (``allow_lossy``), or the check could not run (``detail``)."""
    method: Literal["golden", "command"] | None = None
    lossy: tuple[str, ...] = ()
    agreement: float | None = None
    """golden: the share of compared tokens equal to the baseline's (0 … 1)."""
    score: float | None = None
    """command: the score the command printed."""
    threshold: float | None = None
    passed: bool | None = None
    """None when not checked and allowed (``allow_lossy``); False when it could not run."""
    detail: str | None = None
    seconds: float | None = None
    """What the check cost, the baseline's boot included."""
    answers: tuple[tuple[int, ...], ...] | None = None
    """golden: this configuration's own greedy answers (token ids per prompt), so two
    boots of it — a search run and its repeats — can be compared, not only scored."""


class TrialResult(_Strict):
    """Everything one trial learned. ``objective`` is the number the search maximises."""

    run_id: str = Field(validation_alias=RUN_ID_ALIASES)
    """The run's name, as its spec's :attr:`TrialSpec.run_id`."""
    status: TrialStatus
    failure: FailureClass | None = None
    failure_message: str | None = None
    log_tail: str | None = None
    objective: float = 0.0
    """goodput mode: request_goodput when the gate holds, else 0; capacity mode: the
    capacity per GPU of the replica (req/s ÷ TP × PP × DP; ``capacity`` is per replica)."""
    request_goodput: float | None = None
    gate_passed: bool = False
    constraints: dict[str, float] = Field(default_factory=dict)
    """For Optuna: key → observed/target − 1 (≤ 0 feasible); ``fits`` for boot failures."""
    slo_margins: dict[str, float] = Field(default_factory=dict)
    """target − observed per SLO metric, ms (negative: broken)."""
    headroom: float | None = None
    """The worst observed/target ratio (smaller = more headroom): the tie-breaker."""
    metrics: dict[str, Any] = Field(default_factory=dict)
    """The measurement, in ``vllm bench serve --save-result`` field names plus ours."""
    diagnosis: dict[str, Any] | None = None
    early_abort: str | None = None
    capacity: float | None = None
    """capacity mode: what one replica carries under the SLO, req/s — the centre of the
    measured interval (:attr:`capacity_low` … :attr:`capacity_high`, geometric); 0 when no
    rate passed. Rows stored before intervals: the highest rate that held."""
    capacity_low: float | None = None
    """capacity mode: the highest rate shown to pass (what a fleet is sized from)."""
    capacity_high: float | None = None
    """capacity mode: the lowest rate shown to fail (or, none failing, the highest left
    undecided); None: the search's ceiling passed."""
    capacity_requests: int | None = None
    """Requests the interval rests on: the probes at its two ends."""
    capacity_probes: tuple[CapacityProbe, ...] = ()
    engine: EngineFacts = Field(default_factory=EngineFacts)
    timings: PhaseTimings = Field(default_factory=PhaseTimings)
    violated_rule: str | None = None
    """For ``infeasible``: the known constraint of the space that the config broke."""
    quality: QualityVerdict | None = None
    """For a lossy configuration: the quality gate's verdict (None: lossless)."""
    golden_answers: tuple[tuple[int, ...], ...] | None = None
    """For a quality baseline (``TrialSpec.golden_reference``): its greedy answers to the
    golden prompts, in token ids."""
    node: str | None = None
    """The Ray node id the trial ran on, set by the Ray task (None elsewhere, and for a
    ``worker_lost`` result): where the model's weights are now warm."""

    @model_validator(mode="after")
    def _failure_needs_a_class(self) -> TrialResult:
        if self.status == "failed" and self.failure is None:
            raise ValueError("a failed trial needs a failure class: "
                             + ", ".join(FAILURE_CLASSES))
        if self.status != "failed" and self.failure is not None:
            raise ValueError(f"status {self.status!r} cannot carry failure {self.failure!r}")
        return self
