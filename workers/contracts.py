"""The contracts between slotune's control plane and its workers (pydantic, JSON-serialisable).

:class:`Workload` says what traffic looks like (dataset + arrivals + counts + seed) and
:class:`SLO` says what "fast enough" means. :class:`TrialSpec` is one configuration to
boot and measure; :class:`TrialResult` is everything a trial learned, failures included.
All are stored as JSON and compared across runs, so they are strict: unknown fields are
errors, and every error names its field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar, get_args

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from workers.binomial import min_requests_to_pass
from workers.engine_options import EngineOptions, lift_engine_options, options_model
from workers.trust import trust_of

__all__ = [
    "BOOT_PHASES",
    "FAILURE_CLASSES",
    "FILE_DATASETS",
    "GOLDEN_PROMPTS",
    "INPUT_FAILURES",
    "MIN_RELATIVE_TOLERANCE",
    "PROBE_EXTENSIONS",
    "RUN_ID_ALIASES",
    "SLO",
    "SLO_METRICS",
    "TRANSIENT_FAILURES",
    "Arrivals",
    "CapacityProbe",
    "CapacitySearch",
    "CommandCheck",
    "CustomDataset",
    "DatasetConfig",
    "EngineChoice",
    "EngineFacts",
    "EngineOptions",
    "FailureClass",
    "GoldenCheck",
    "KnobValue",
    "MooncakeTraceDataset",
    "MultiTurnDataset",
    "ObjectiveMode",
    "PhaseTimings",
    "PrefixRepetitionDataset",
    "ProbeVerdict",
    "QualityGate",
    "QualityVerdict",
    "RampUp",
    "RandomDataset",
    "RankingProbes",
    "SLOMetric",
    "ShareGPTDataset",
    "ShareGPTLikeDataset",
    "TailEvidence",
    "TraceDataset",
    "TraceFields",
    "TrialResult",
    "TrialSpec",
    "TrialStatus",
    "TrialTimeouts",
    "Workload",
    "engine_flags",
    "engine_kind",
    "lift_sim_gpu",
    "options_for",
    "replica_gpus",
]

SLOMetric = Literal["ttft", "tpot", "itl", "e2el"]
SLO_METRICS: tuple[SLOMetric, ...] = ("ttft", "tpot", "itl", "e2el")
MAX_TOKENS = 10_000_000
"""Upper bound of any token length in a dataset: past every model's context window."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


RUN_ID_ALIASES = AliasChoices("run_id", "trial_id")
"""A run's name is read as ``run_id``, or as ``trial_id`` (its name until issue 27, still
in JSON stored or written before: specs and results in old rows, files, saved reports)."""


# --- datasets (a tagged union on ``kind``) -------------------------------------------------


class RandomDataset(_Strict):
    """``vllm bench serve --dataset-name random``: lengths uniform in [len·(1−r), len·(1+r)].

    ``prefix_len`` tokens, the same for every request, are prepended to each prompt.
    """

    kind: Literal["random"] = "random"
    input_len: int = Field(1024, ge=1, le=MAX_TOKENS)
    output_len: int = Field(128, ge=1, le=MAX_TOKENS)
    range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    prefix_len: int = Field(0, ge=0, le=MAX_TOKENS)


class ShareGPTLikeDataset(_Strict):
    """Synthetic chat-like lengths: lognormal input and output lengths, clipped.

    Each length is ``round(exp(N(ln(median), sigma)))`` clipped to ``[min, max]``; the
    defaults approximate ShareGPT's conversation turns (median ~ 250 in / 200 out,
    long right tail) without shipping the data set.
    """

    kind: Literal["sharegpt-like"] = "sharegpt-like"
    input_median: float = Field(250.0, gt=0)
    input_sigma: float = Field(1.0, ge=0)
    input_min: int = Field(4, ge=1)
    input_max: int = Field(4096, ge=1)
    output_median: float = Field(200.0, gt=0)
    output_sigma: float = Field(0.9, ge=0)
    output_min: int = Field(1, ge=1)
    output_max: int = Field(2048, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> ShareGPTLikeDataset:
        if self.input_min > self.input_max:
            raise ValueError(
                f"input_min ({self.input_min}) must be <= input_max ({self.input_max})"
            )
        if self.output_min > self.output_max:
            raise ValueError(
                f"output_min ({self.output_min}) must be <= output_max ({self.output_max})"
            )
        return self


class PrefixRepetitionDataset(_Strict):
    """vLLM's ``prefix_repetition``: ``num_prefixes`` shared prefixes, random suffixes.

    Each request picks one prefix. ``popularity: uniform`` (the default, vLLM's) picks
    each prefix equally often; ``zipf`` picks the prefix of rank ``k`` (1-based) with
    probability ∝ ``1 / k ** zipf_s`` — a few hot documents or agent system prompts and
    a long cold tail, the shape RAG and agent traffic has (slotune's extension; with
    the default the requests are exactly vLLM's for the same seed).
    """

    kind: Literal["prefix_repetition"] = "prefix_repetition"
    num_prefixes: int = Field(10, ge=1)
    prefix_len: int = Field(256, ge=0)
    suffix_len: int = Field(256, ge=0)
    output_len: int = Field(128, ge=1)
    popularity: Literal["uniform", "zipf"] = "uniform"
    zipf_s: float = Field(1.1, gt=0, le=20)
    """The Zipf exponent ``s`` (> 0; larger is more skewed), used when popularity is zipf."""

    @model_validator(mode="after")
    def _non_empty(self) -> PrefixRepetitionDataset:
        if self.prefix_len + self.suffix_len < 1:
            raise ValueError("prefix_len + suffix_len must be at least 1 (an empty prompt)")
        return self


class TraceDataset(_Strict):
    """A JSONL trace: one request a line, ``{"offset_s", "prompt" | "prompt_len", "output_len"}``.

    ``offset_s`` is the arrival time from the start of the run (seconds, engine time);
    a trace's arrivals replace the workload's arrival process: replayed as recorded
    while ``arrivals.request_rate`` is ``inf`` (the default), rescaled to a finite one
    (:func:`workers.loadgen.arrivals.arrival_offsets`; a capacity probe's rate, for
    one). A relative ``path`` is resolved against the workload file's directory.
    """

    kind: Literal["trace"] = "trace"
    path: str = Field(min_length=1)
    use_trace_arrivals: bool = True


class MultiTurnDataset(_Strict):
    """Conversations: each session's every turn re-sends the conversation so far.

    A session has a number of turns drawn uniformly from ``[min_turns, max_turns]``. Turn
    1's prompt is the shared system prompt (``system_prompt_len`` tokens, the same for
    every session) and a user message; turn ``k``'s is turn ``k − 1``'s prompt, the
    model's answer to it, and a new user message — so a prefix cache can serve everything
    but the new message. User messages and answers have random lengths in
    ``[len·(1−r), len·(1+r)]`` (``random``'s rule). Between an answer and the next turn
    the user thinks ``think_time_s`` (engine seconds): exponential with that mean, or
    ``constant``.

    Or real conversations: ``path`` names a ShareGPT-format JSON file, and each session
    is one of its conversations (shuffled with the seed, as ``sharegpt`` is): its human
    turns are the user messages, in order, each the length in tokens of the reply that
    followed it as that turn's output length; turns past ``max_turns`` are dropped and
    conversations with fewer than ``min_turns`` human turns skipped (the length fields
    then go unused, the system prompt does not). The text is sent as it is.

    Sessions, not requests, arrive by the workload's process: at ``request_rate`` ÷ the
    mean turns per session, so the run's ``num_prompts`` requests arrive at
    ``request_rate`` on average. The last session is cut to make ``num_prompts`` requests.
    """

    kind: Literal["multi_turn"] = "multi_turn"
    path: str | None = Field(None, min_length=1)
    """A ShareGPT-format JSON file of real conversations (None: synthetic turns)."""
    min_turns: int = Field(2, ge=1, le=1000)
    max_turns: int = Field(6, ge=1, le=1000)
    system_prompt_len: int = Field(0, ge=0, le=MAX_TOKENS)
    input_len: int = Field(128, ge=1, le=MAX_TOKENS)
    """Tokens of each user message."""
    output_len: int = Field(128, ge=1, le=MAX_TOKENS)
    """Tokens of each answer."""
    range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    think_time_s: float = Field(1.0, ge=0.0, le=3600.0)
    think_time: Literal["exponential", "constant"] = "exponential"

    @model_validator(mode="after")
    def _turns(self) -> MultiTurnDataset:
        if self.min_turns > self.max_turns:
            raise ValueError(f"min_turns ({self.min_turns}) must be <= max_turns "
                             f"({self.max_turns})")
        return self

    @property
    def mean_turns(self) -> float:
        return (self.min_turns + self.max_turns) / 2


class TraceFields(_Strict):
    """The JSON keys a :class:`MooncakeTraceDataset` line is read with (vLLM's
    ``--timed-trace-label-*``); Mooncake's own names by default."""

    timestamp: str = Field("timestamp", min_length=1)
    input_length: str = Field("input_length", min_length=1)
    output_length: str = Field("output_length", min_length=1)
    hash_ids: str = Field("hash_ids", min_length=1)


class MooncakeTraceDataset(_Strict):
    """A Mooncake-format trace (FAST'25): JSONL, one request a line, with its block structure.

    ``{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47,
    …]}``: ``timestamp`` is the arrival from the trace's start, in units of
    ``timestamp_s`` seconds (Mooncake's are milliseconds: 0.001); ``hash_ids`` name the
    prompt's successive blocks of ``block_size`` tokens (Mooncake's 512), so two requests
    that share a hash id share that block's tokens exactly, and a prefix cache sees the
    trace's reuse. The prompt is ``input_length`` tokens: every block in full but the
    last, which is cut to what is left — the format's rule, ``len(hash_ids) =
    ceil(input_length / block_size)`` (AIPerf's "(num_hash_ids − 1) · block_size +
    final_block_size"; vLLM's timed_trace cuts the same way). A line whose length
    disagrees with its hash ids is an error; a line without hash ids gets a prompt of
    its own (no reuse).

    Arrivals: with ``use_trace_arrivals`` (the default) the trace's timestamps are the
    schedule — as recorded while the workload's ``arrivals.request_rate`` is ``inf``;
    rescaled to a finite rate so the mean rate is that rate and the bursts keep their
    shape (every gap times one factor). The capacity search sets each probe's rate, so
    each probe replays the trace compressed or stretched to that rate. Without it the
    timestamps are ignored and the workload's arrival process applies (vLLM's
    ``--no-self-timed``). ``fields`` renames the keys (vLLM's ``--timed-trace-label-*``).

    A block's tokens are drawn from ``(seed, hash_id)``: a capacity probe (its own seed)
    gets fresh blocks, so no probe is served from an earlier probe's cache, while the
    reuse inside a run is the trace's.
    """

    kind: Literal["mooncake_trace"] = "mooncake_trace"
    path: str = Field(min_length=1)
    block_size: int = Field(512, ge=1, le=1_000_000)
    timestamp_s: float = Field(0.001, gt=0)
    """Seconds per timestamp unit: 0.001 for Mooncake's milliseconds, 1 for seconds."""
    use_trace_arrivals: bool = True
    fields: TraceFields = Field(default_factory=TraceFields)


class ShareGPTDataset(_Strict):
    """``vllm bench serve --dataset-name sharegpt``: a ShareGPT-format JSON file.

    The file is a list of ``{"conversations": [{"value": prompt}, {"value": reply}, …]}``;
    entries with fewer than two turns are dropped, the rest shuffled with Python's
    ``random`` seeded by the workload's seed (unless ``shuffle`` is off), exactly as
    vLLM does, so both tools send the same prompts in the same order. A prompt's output
    length is its reply's length in tokens, unless ``output_len`` is set; vLLM's pruning
    applies (prompt ≥ 4 tokens, reply ≥ 4 unless ``output_len`` is set, prompt ≤ 1024,
    prompt + output ≤ 2048). Too few entries are topped up by drawing with replacement,
    unless ``oversample`` is off. A relative ``path`` resolves as a trace's does.
    """

    kind: Literal["sharegpt"] = "sharegpt"
    path: str = Field(min_length=1)
    output_len: int | None = Field(None, ge=1, le=MAX_TOKENS)
    shuffle: bool = True
    oversample: bool = True


class CustomDataset(_Strict):
    """``vllm bench serve --dataset-name custom``: a JSONL file, one ``{"prompt": …}`` a line.

    Each prompt goes through the served model's chat template (as a single user turn,
    with the generation prompt) unless ``skip_chat_template``; ``output_len`` tokens are
    asked of each request, or, with ``output_len: -1``, the line's own
    ``output_tokens``. Shuffling and oversampling as for :class:`ShareGPTDataset`.
    """

    kind: Literal["custom"] = "custom"
    path: str = Field(min_length=1)
    output_len: int = Field(256, ge=-1, le=MAX_TOKENS)
    skip_chat_template: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    shuffle: bool = True
    oversample: bool = True

    @field_validator("output_len")
    @classmethod
    def _positive_or_from_file(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be >= 1, or -1 to take each line's 'output_tokens'")
        return value


DatasetConfig = Annotated[
    RandomDataset | ShareGPTLikeDataset | PrefixRepetitionDataset | TraceDataset
    | MooncakeTraceDataset | ShareGPTDataset | CustomDataset | MultiTurnDataset,
    Field(discriminator="kind"),
]
FILE_DATASETS = (TraceDataset, MooncakeTraceDataset, ShareGPTDataset, CustomDataset,
                 MultiTurnDataset)
"""Datasets read from a file named by ``path`` (one rule for where it may live)."""


class RampUp(_Strict):
    """``vllm bench serve --ramp-up-strategy``: the rate climbs from ``start_rps`` to ``end_rps``.

    Request ``i`` of ``n`` arrives at rate ``start + (end − start)·i/(n−1)`` (linear) or
    ``start·(end/start)^(i/(n−1))`` (exponential), its gap drawn as for
    :class:`Arrivals` at that rate.
    """

    strategy: Literal["linear", "exponential"]
    start_rps: int = Field(ge=0, le=1_000_000)
    end_rps: int = Field(ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _climbs(self) -> RampUp:
        if self.start_rps > self.end_rps:
            raise ValueError(f"start_rps ({self.start_rps}) must be <= end_rps "
                             f"({self.end_rps}): a ramp-up climbs")
        if self.start_rps == 0:
            raise ValueError("start_rps must be >= 1: at 0 req/s the first request would "
                             "never be sent")
        return self

    def rate(self, index: int, total: int) -> float:
        """The rate request ``index`` of ``total`` arrives at."""
        progress = index / max(total - 1, 1)
        if self.strategy == "linear":
            return self.start_rps + (self.end_rps - self.start_rps) * progress
        return float(self.start_rps * (self.end_rps / self.start_rps) ** progress)


class Arrivals(_Strict):
    """When requests start: gamma gaps (vLLM's ``--request-rate``/``--burstiness``) or constant.

    ``request_rate`` is req/s or ``inf`` (everything at once). ``burstiness`` is the gamma
    shape (1 = Poisson, < 1 burstier, > 1 more regular); the scale is
    ``1 / (request_rate * burstiness)``, vLLM's choice, so the mean rate is kept.
    """

    process: Literal["gamma", "constant"] = "gamma"
    request_rate: float = Field(math.inf, gt=0)
    burstiness: float = Field(1.0, gt=0)
    max_concurrency: int | None = Field(None, ge=1, le=1_000_000)
    ramp_up: RampUp | None = None
    """A climbing rate instead of ``request_rate`` (which must then stay ``inf``)."""

    @model_validator(mode="after")
    def _one_rate(self) -> Arrivals:
        if self.ramp_up is not None and not math.isinf(self.request_rate):
            raise ValueError(
                f"give either request_rate ({self.request_rate:g}) or ramp_up, not both: "
                "a ramp-up sets the rate of every request")
        return self

    @field_validator("request_rate", mode="before")
    @classmethod
    def _parse_inf(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in {"inf", "infinity"}:
            return math.inf
        return value

    @field_serializer("request_rate", when_used="json")
    def _dump_inf(self, value: float) -> float | str:
        return "inf" if math.isinf(value) else value  # JSON has no infinity


class Workload(_Strict):
    """What traffic looks like. The same seed gives the same requests in the same order."""

    name: str = Field("custom", min_length=1)
    description: str = ""
    dataset: DatasetConfig = Field(default_factory=RandomDataset)
    arrivals: Arrivals = Field(default_factory=Arrivals)
    num_prompts: int = Field(1000, ge=1, le=1_000_000)
    """Measured requests; at most a million (a run that long is a mistake, not a sweep)."""
    warmup_requests: int = Field(0, ge=0, le=100_000)
    seed: int = 0
    token_seed: int | None = None
    """Other tokens for the same requests: the synthetic prompts' word ids relabelled by a
    permutation drawn from this seed (:func:`workers.loadgen.datasets.relabel`) — the
    sample's lengths, arrivals and shared prefixes stay the seed's. A capacity probe's
    own (so no probe is served from another's prefix cache); None: the seed's tokens."""
    endpoint: Literal["completions", "chat"] = "completions"
    request_timeout_s: float = Field(600.0, gt=0)
    """Deadline of one request, engine time; a request past it is recorded as failed."""

    @model_serializer(mode="wrap")
    def _no_token_seed_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A workload as users write and store it has no token_seed: leave the unset one
        # out, so stored workloads and specs read the same to every version.
        data = handler(self)
        if isinstance(data, dict) and self.token_seed is None:
            data.pop("token_seed", None)
        return data


# --- SLO -----------------------------------------------------------------------------------


class SLO(_Strict):
    """Latency targets (ms) at a percentile: ``SLO(percentile=99, ttft=300, tpot=50)``."""

    percentile: float = Field(99.0, gt=0, le=100)
    ttft: float | None = Field(None, gt=0)
    tpot: float | None = Field(None, gt=0)
    itl: float | None = Field(None, gt=0)
    e2el: float | None = Field(None, gt=0)

    @property
    def targets(self) -> dict[SLOMetric, float]:
        """Targeted metrics and their limits in ms, in the canonical metric order."""
        out: dict[SLOMetric, float] = {}
        for metric in SLO_METRICS:
            value = getattr(self, metric)
            if value is not None:
                out[metric] = float(value)
        return out

    @classmethod
    def parse(cls, text: str | list[str], percentile: float = 99.0) -> SLO:
        """Parse ``"ttft:300,tpot:50"`` (or vLLM's ``--goodput ttft:300 tpot:50`` list).

        ``p:95`` (or ``percentile:95``) sets the percentile. Raises ``ValueError`` with
        the offending item and the valid names.
        """
        items = text if isinstance(text, list) else [text]
        pieces = [p.strip() for item in items for p in item.split(",") if p.strip()]
        values: dict[str, float] = {"percentile": percentile}
        for piece in pieces:
            key, sep, raw = piece.partition(":")
            key = key.strip().lower()
            if not sep:
                raise ValueError(f"SLO item {piece!r} is not 'metric:milliseconds' (e.g. ttft:300)")
            if key in {"p", "percentile"}:
                key = "percentile"
            elif key not in SLO_METRICS:
                valid = ", ".join(SLO_METRICS)
                raise ValueError(f"unknown SLO metric {key!r} in {piece!r}; valid: {valid}")
            try:
                values[key] = float(raw)
            except ValueError:
                raise ValueError(f"SLO item {piece!r}: {raw!r} is not a number") from None
        return cls.model_validate(values)

    def __str__(self) -> str:
        targets = ", ".join(f"{k} ≤ {v:g} ms" for k, v in self.targets.items())
        return f"p{self.percentile:g} {targets}" if targets else "no SLO targets"


# --- trials --------------------------------------------------------------------------------

Device = Literal["gpu", "cpu"]
ObjectiveMode = Literal["goodput", "capacity"]
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
KnobValue = bool | int | float | str | dict[str, Any] | None
"""A knob's value: vLLM flag values, or a JSON object (``speculative_config``)."""


def engine_flags(fixed: Mapping[str, KnobValue], knobs: Mapping[str, KnobValue]
                 ) -> dict[str, KnobValue]:
    """A configuration's engine flags: a space's fixed arguments overridden by the
    sampled knobs (the one place they are merged: spaces, specs, the coordinator)."""
    return {**fixed, **knobs}


class TrialTimeouts(_Strict):
    """Wall-clock limits of one trial's phases, seconds."""

    startup_s: float = Field(900.0, gt=0)
    """Until ``/health`` answers 200 (vLLM with large models takes minutes)."""
    measure_s: float = Field(3600.0, gt=0)
    unresponsive_s: float = Field(60.0, gt=0)
    """An engine alive but unanswering (``/health``) this long while it is measured is
    ``hung``: the trial fails then, not when its requests time out (10 minutes)."""
    teardown_grace_s: float = Field(10.0, gt=0)
    """Between SIGTERM and SIGKILL of the engine's process group."""


_Options = TypeVar("_Options", bound=EngineOptions)


def engine_kind(value: str) -> str:
    """``value`` if it names a registered engine; else ``ValueError`` naming the valid ones
    (one check for a spec's and a space's ``engine``)."""
    options_model(value)
    return value


def options_for(engine: str, options: EngineOptions, owner: str) -> EngineOptions:
    """``options`` if they are ``engine``'s (its registered model), else ``ValueError``
    saying whose they are: the after-check of a spec and a space (a ``model_copy`` that
    changed the engine alone, say)."""
    model = options_model(engine)
    if type(options) is not model:
        raise ValueError(f"options: {type(options).__name__} are not the options of engine "
                         f"{engine} ({model.__name__}); this {owner} needs those")
    return options


def lift_sim_gpu(data: Any) -> Any:
    """Raw fields with the GPU in its place, ``gpu``, when given as ``sim.gpu`` (where
    earlier versions kept it); both, and different, are refused."""
    if not isinstance(data, dict) or not isinstance(data.get("sim"), dict) \
            or "gpu" not in data["sim"]:
        return data
    sim = dict(data["sim"])
    gpu = sim.pop("gpu")
    if data.get("gpu") not in (None, gpu):
        raise ValueError(f"sim.gpu {gpu!r} and gpu {data['gpu']!r} disagree: give the GPU "
                         "once, as gpu")
    return {**data, "sim": sim, "gpu": gpu}


class EngineChoice(_Strict):
    """An engine and its own options: one declaration, and one check, for a trial spec and
    for the search space that makes them (:class:`tuner.spaces.SearchSpace`)."""

    owner: ClassVar[str] = "trial"
    """How messages name what carries the choice (``trial``, ``space``)."""

    engine: str = "sim"
    """The engine adapter's kind (``sim``, ``vllm``: whatever :mod:`workers.engines`
    registers)."""
    options: SerializeAsAny[EngineOptions] = Field(default_factory=EngineOptions)
    """The engine's own options, of its registered model (:mod:`workers.engine_options`):
    the simulated engine's ``seed``/``noise``/``time_scale``/``cost_model``, vLLM's
    ``engine_binary`` (None: the worker's ``SLOTUNE_VLLM_BIN``, else ``vllm`` on PATH).
    Also read as spelled before and as a space file writes them: ``sim: {…}``, and
    ``engine_binary`` at the top level."""

    @model_validator(mode="before")
    @classmethod
    def _older_shapes(cls, data: Any, info: ValidationInfo) -> Any:
        return lift_engine_options(lift_sim_gpu(data), cls.owner, "sim", cls.model_fields,
                                   info.context)

    @field_validator("engine")
    @classmethod
    def _registered_engine(cls, value: str) -> str:
        return engine_kind(value)

    @model_validator(mode="after")
    def _options_of_its_engine(self) -> Self:
        options_for(self.engine, self.options, self.owner)
        return self

    def options_of(self, model: type[_Options]) -> _Options:
        """The options as ``model``, for the adapter that reads them. Another engine's
        choice has none of ``model``'s options: their defaults (how the simulator models
        a vLLM spec)."""
        return self.options if isinstance(self.options, model) else model()


MIN_RELATIVE_TOLERANCE = 0.01
"""The finest capacity interval a search may ask for: two probes 1 % apart differ by less
than an engine's own run-to-run noise, so finite probes cannot order them."""
PROBE_EXTENSIONS = 2
"""An undecided probe is extended this many times (by its first run's size) by default."""


class RankingProbes(_Strict):
    """How a sweep's search phase probes (:meth:`CapacitySearch.for_ranking`). Its readings
    only rank configurations: the number a sweep reports for its winner comes from
    confirmation runs with the full design on fresh samples, never from these."""

    confidence: float = Field(0.5, ge=0.5, le=0.999)
    """The verdicts' confidence while ranking: 0.5 (the default) reads each probe's own
    percentile against the target, the sharpest comparison a probe of the same size
    gives; the sample is the same for every configuration, so rankings are paired."""
    relative_tolerance: float = Field(0.1, ge=MIN_RELATIVE_TOLERANCE, lt=1)
    """The interval width ranking stops at (the search's own when that is coarser)."""
    extensions: int = Field(0, ge=0, le=20)
    """Extensions of an undecided ranking probe (0: it stays undecided)."""
    prompts_per_probe: int | None = Field(None, ge=1)
    """Requests of a ranking probe (None: as many as the search's own first run sends)."""


class CapacitySearch(_Strict):
    """Capacity mode: the highest request rate at which one replica holds the SLO, as an
    interval (:mod:`workers.pipeline`): the highest rate shown to pass, the lowest shown to
    fail or left undecided, and the requests they rest on.

    Each rate is a *probe*, judged statistically (:mod:`workers.loadgen.verdict`): it
    passes only at steady state and when every SLO percentile's confidence bound is
    within target; a probe the sample cannot decide is extended with more requests at the
    same rate, up to ``max_prompts_per_probe``, and stays undecided past it — never a
    pass."""

    min_rate: float = Field(0.5, gt=0)
    max_rate: float = Field(256.0, gt=0)
    relative_tolerance: float = Field(0.05, gt=0, lt=1)
    """The interval's width at which the bisection stops (``high / low − 1``); at least
    :data:`MIN_RELATIVE_TOLERANCE`."""
    max_probes: int = Field(10, ge=2)
    """Rates probed at most (a probe's extensions are part of its probe)."""
    start_rate: float | None = Field(None, gt=0)
    """Where the bracket starts (None: the workload's rate). A sweep starts each trial
    where it predicts the capacity (the best so far, or the twin's prediction): a start
    saves probes, it cannot move the interval."""
    step: float = Field(2.0, gt=1, le=16)
    """The bracket's factor: up (or down) by this much until the verdict flips."""
    confidence: float = Field(0.95, ge=0.5, le=0.999)
    """How sure a verdict is: a probe passes when each SLO percentile's upper confidence
    bound at this level is within target (fails when its lower bound is over). 0.5 reads
    the sample's own percentile (a screening, not a measurement)."""
    prompts_per_probe: int | None = Field(None, ge=1)
    """Requests of a probe's first run (default: the workload's num_prompts); at least
    what a pass needs at ``confidence`` (p99 at 95 %: 299), and ``min_probe_s``."""
    extensions: int = Field(PROBE_EXTENSIONS, ge=0, le=20)
    """How many more runs (each of the first run's size, fresh requests) an undecided probe
    may pool before it stays undecided."""
    max_prompts_per_probe: int | None = Field(None, ge=1)
    """At most this many requests a probe (its runs together); None: no cap but
    ``extensions``."""
    min_probe_s: float | None = Field(None, gt=0, le=3600)
    """A probe at rate r sends at least r × this many requests (engine seconds of
    arrivals): a short burst above capacity ends before its queue builds up, so short
    probes overstate capacity, and more at high rates."""
    session_spans: float = Field(3.0, ge=0, le=100)
    """Conversations (``multi_turn``): a probe keeps sessions arriving for this many
    session lifetimes (:func:`workers.loadgen.sessions.steady_arrivals_s`), so that the
    server spends most of it in the steady state of its rate; 0 sends the probe's prompt
    count as it is (a screening's cheap probe, which only ranks)."""
    sample_confidence: float | None = Field(None, ge=0.5, le=0.999)
    """Probes are sized as for verdicts at this confidence (None: their own): a ranking
    reads a sample as large as a measurement's, at its own lower confidence."""
    resolve_undecided: bool = True
    """Refine on both sides of a rate left undecided, so the interval's ends are the
    highest pass and the lowest fail (a confidence interval); False: an undecided rate
    ends the interval from above (a ranking's cheaper bisection)."""
    ranking: RankingProbes = Field(default_factory=lambda: RankingProbes())
    """How a sweep's search phase probes (:meth:`for_ranking`): enough to rank the
    configurations; the sweep's answer is measured by its confirmation with this
    search's own design."""

    @field_validator("relative_tolerance")
    @classmethod
    def _resolvable(cls, value: float) -> float:
        if value < MIN_RELATIVE_TOLERANCE:
            raise ValueError(
                f"relative_tolerance {value:g} is finer than probes can resolve: two rates "
                f"closer than {MIN_RELATIVE_TOLERANCE:.0%} differ by less than an engine's "
                f"own run-to-run noise; use at least {MIN_RELATIVE_TOLERANCE:g} (0.05 is a "
                "5 % interval)")
        return value

    @model_validator(mode="after")
    def _rates_in_order(self) -> CapacitySearch:
        if self.min_rate > self.max_rate:
            raise ValueError(f"min_rate ({self.min_rate:g}) must be <= max_rate "
                             f"({self.max_rate:g})")
        return self

    def for_ranking(self) -> CapacitySearch:
        """This search as a sweep's search phase runs it: :attr:`ranking`'s confidence,
        tolerance and probe size, an undecided rate the upper end — a reading that ranks,
        not an answer."""
        ranking = self.ranking
        return self.model_copy(update={
            "confidence": ranking.confidence, "extensions": ranking.extensions,
            "prompts_per_probe": ranking.prompts_per_probe or self.prompts_per_probe,
            "sample_confidence": None if ranking.prompts_per_probe else self.confidence,
            "resolve_undecided": False,
            "relative_tolerance": max(self.relative_tolerance,
                                      ranking.relative_tolerance)})

    def unable(self, percentile: float) -> str | None:
        """Why this search could never give a verdict on an SLO at ``percentile`` (a probe
        too small for a pass at its confidence), with what would; None when it can."""
        checks = [("capacity.prompts_per_probe", self.prompts_per_probe, self.confidence),
                  ("capacity.max_prompts_per_probe", self.max_prompts_per_probe,
                   self.confidence),
                  ("capacity.ranking.prompts_per_probe", self.ranking.prompts_per_probe,
                   self.ranking.confidence)]
        for name, requests, confidence in checks:
            needed = min_requests_to_pass(percentile, confidence)
            if requests is not None and requests < needed:
                lower = min_requests_to_pass(percentile, 0.9) if confidence > 0.9 else None
                return (f"{name} {requests} cannot give a verdict: at p{percentile:g} and "
                        f"{confidence:.0%} confidence a pass needs at least {needed} "
                        "requests, none over target; give at least "
                        f"{needed}" + (f", or a lower confidence (0.9 needs {lower})"
                                       if lower is not None else ""))
        return None



# --- the quality gate (lossy knob values) --------------------------------------------------

GOLDEN_PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "Write a haiku about the ocean.",
    "def fibonacci(n):",
    "Translate to German: The weather is nice today.",
    "List three prime numbers greater than ten:",
    "Explain in one sentence why the sky is blue.",
    "Once upon a time, in a small village,",
    "SELECT name, email FROM users WHERE",
    "The three laws of thermodynamics are",
    "Summarise the plot of Hamlet in two sentences.",
    "import numpy as np\n# compute the mean of an array",
    "Q: What is 17 multiplied by 23?\nA:",
    "A good code review comment is one that",
    "The difference between TCP and UDP is",
    "Dear customer, thank you for your order.",
    "In 1969, the Apollo 11 mission",
)
"""The built-in golden requests: short, varied prompts (facts, code, maths, chat) whose
greedy continuations a lossless and a lossy configuration are compared on."""


class GoldenCheck(_Strict):
    """Golden requests: fixed prompts, greedy decoding (temperature 0), the first
    ``max_tokens`` tokens compared position by position with the lossless baseline's."""

    prompts: tuple[str, ...] = Field(GOLDEN_PROMPTS, min_length=1, max_length=1000)
    max_tokens: int = Field(32, ge=1, le=4096)
    min_agreement: float = Field(0.9, gt=0, le=1)
    """The share of compared tokens that must agree for the check to pass."""


class CommandCheck(_Strict):
    """A user's quality command (an argv list, never a shell string), e.g. an
    lm-eval-harness run. ``{base_url}`` and ``{model}`` in an argument are replaced by
    the booted engine's URL and served model name (also in ``SLOTUNE_BASE_URL`` and
    ``SLOTUNE_MODEL``); the last number it prints on stdout is its score.

    Or a command the operator registered (``SLOTUNE_QUALITY_COMMANDS``), by ``name``:
    its argv and timeout are filled in where the space is read (the only way over the
    API, :mod:`workers.trust`), and kept with the name."""

    name: str | None = None
    """The registered command this is (None: the space gave its own argv)."""
    argv: tuple[str, ...] = Field(min_length=1)
    min_score: float = Field(allow_inf_nan=False)
    """The score at or above which the check passes."""
    timeout_s: float = Field(3600.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _registered(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        return trust_of(info).quality_command(data, "quality.command")


class QualityGate(_Strict):
    """What a lossy configuration must pass before it may score: one check (golden
    requests or a command), the knob values that make it lossy, and the lossless values
    its baseline runs with."""

    lossy: tuple[str, ...] = Field(min_length=1)
    """What makes the configuration lossy, as ``flag=value`` (``quantization=fp8``)."""
    baseline: dict[str, KnobValue]
    """The lossless values of those flags: the baseline is this configuration with them."""
    golden: GoldenCheck | None = None
    command: CommandCheck | None = None
    allow_lossy: bool = False
    """Skip the check (``--allow-lossy``): the configuration scores, unchecked."""
    reference: tuple[tuple[int, ...], ...] | None = None
    """The baseline's golden outputs (token ids per prompt), when already known; None:
    the trial boots the baseline first and measures them."""
    reference_unavailable: str | None = None
    """Why the sweep's baseline could not answer (it failed to boot or to answer): the
    check cannot run, and the trial does not boot the baseline again to find out."""

    @property
    def awaits_reference(self) -> bool:
        """A golden check that is to run and knows neither the baseline's answers nor why
        there are none: the baseline must answer before this configuration is checked."""
        return (self.golden is not None and not self.allow_lossy and self.reference is None
                and self.reference_unavailable is None)

    @model_validator(mode="after")
    def _one_check(self) -> QualityGate:
        if (self.golden is None) == (self.command is None):
            raise ValueError("a quality gate needs exactly one check: golden or command")
        if self.reference is not None and self.golden is not None \
                and len(self.reference) != len(self.golden.prompts):
            raise ValueError(f"reference has {len(self.reference)} outputs for "
                             f"{len(self.golden.prompts)} golden prompts")
        return self


class TrialSpec(EngineChoice):
    """One configuration to boot, warm up, measure against the SLO and tear down."""

    run_id: str = Field(min_length=1, validation_alias=RUN_ID_ALIASES)
    """The name of this engine run (``s3-t7-a1``: sweep 3, Optuna trial 7, attempt 1;
    ``optuna-7`` outside a sweep): the engine's process, workdir and logs carry it. Not
    the trial's database id (``trial_id`` everywhere else)."""
    model: str = Field(min_length=1)
    knobs: dict[str, KnobValue] = Field(default_factory=dict)
    """The sampled knob values, by vLLM's argument name (``max_num_seqs``)."""
    engine_args: dict[str, KnobValue] = Field(default_factory=dict)
    """Fixed engine arguments of the space (not searched), same naming."""
    allowed_extra_args: tuple[str, ...] = ()
    """Argument names beyond the known vLLM flags that the space declares acceptable."""
    workload: Workload
    slo: SLO
    mode: ObjectiveMode = "goodput"
    capacity: CapacitySearch = Field(default_factory=CapacitySearch)
    timeouts: TrialTimeouts = Field(default_factory=TrialTimeouts)
    gpu: str = Field("h100-sxm", min_length=1)
    """The GPU type the trial targets: the catalogue GPU (or the absolute path of the
    device file) the simulated engine models; for a real engine the space's GPU kind (a
    typed cluster maps it to its nodes' label)."""
    device: Device = "gpu"
    """Where the engine computes: GPUs (Ray assigns them), or the CPU (vLLM's CPU build:
    the trial reserves CPUs instead, one per tensor-parallel rank)."""
    env_passthrough: tuple[str, ...] = ("HF_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                                        "NCCL_DEBUG")
    """Environment variables handed through to the engine (secrets are redacted in logs);
    an adapter adds the families its engine reads (vLLM: ``VLLM_*``, ``HF_*``, …)."""
    early_abort: bool = True
    max_error_rate: float = Field(0.05, ge=0, le=1)
    """Above this share of failed requests the trial is ``benchmark_errors``."""
    quality: QualityGate | None = None
    """Set when the configuration is lossy (the space says which values are): the check
    it must pass before it scores."""
    golden_reference: GoldenCheck | None = None
    """Set on a quality baseline: boot, answer these golden prompts greedily, stop — no
    load, no score (the answers are the result's ``golden_answers``, the reference of
    every lossy trial of the sweep)."""

    def for_engine(self, engine: str) -> TrialSpec:
        """This trial on another engine, with that engine's default options."""
        if engine == self.engine:
            return self
        return self.model_copy(update={"engine": engine_kind(engine),
                                       "options": options_model(engine)()})

    @property
    def engine_flags(self) -> dict[str, KnobValue]:
        """Fixed arguments overridden by the sampled knobs (:func:`engine_flags`)."""
        return engine_flags(self.engine_args, self.knobs)

    def baseline(self) -> TrialSpec:
        """The lossless baseline of a lossy configuration: the same trial with the quality
        gate's lossless values (what its golden answers are compared with)."""
        if self.quality is None:
            raise ValueError(f"trial {self.run_id} is lossless: it has no baseline")
        lossless = self.quality.baseline
        return self.model_copy(update={
            "run_id": f"{self.run_id}-baseline", "quality": None,
            "knobs": {**self.knobs, **{k: v for k, v in lossless.items() if k in self.knobs}},
            "engine_args": {**self.engine_args, **{k: v for k, v in lossless.items()
                                                   if k not in self.knobs}}})

    @property
    def served_model(self) -> str:
        """The model name requests must carry (``served_model_name`` when the space sets it)."""
        name = self.engine_flags.get("served_model_name")
        return name if isinstance(name, str) and name else self.model

    @property
    def model_revision(self) -> str | None:
        """Which weights: the ``revision`` flag, else the snapshot a local Hugging Face
        cache path points at (``…/snapshots/<commit>``), else None (not known here)."""
        flag = self.engine_flags.get("revision")
        if isinstance(flag, str) and flag:
            return flag
        parts = self.model.replace("\\", "/").split("/")
        if "snapshots" in parts[:-1]:
            return parts[parts.index("snapshots") + 1] or None
        return None

    @property
    def tensor_parallel_size(self) -> int:
        return _parallel_size(self.engine_flags.get("tensor_parallel_size", 1))

    @property
    def gpus(self) -> int:
        """Devices one replica of this configuration occupies (:func:`replica_gpus`)."""
        return replica_gpus(self.engine_flags)


def replica_gpus(flags: Mapping[str, Any]) -> int:
    """Devices one replica of a configuration occupies: tensor × pipeline × data parallel
    size (GPUs; CPU cores for vLLM's CPU build, one per rank). A ``vllm serve`` with
    ``--data-parallel-size N`` is one server (one API endpoint) over N engine ranks of
    TP × PP devices each, so it is one replica of N × TP × PP devices; expert parallelism
    adds none (it reuses those ranks for the experts). The one definition the
    coordinator schedules, placement checks, the stored view's ``gpus`` and the per-GPU
    objective divide by, and the capacity planner counts."""
    return (_parallel_size(flags.get("tensor_parallel_size"))
            * _parallel_size(flags.get("pipeline_parallel_size"))
            * _parallel_size(flags.get("data_parallel_size")))


def _parallel_size(value: Any) -> int:
    """A parallel size as given (unset or unreadable: 1)."""
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


class PhaseTimings(_Strict):
    """Where a trial's wall time went, seconds (None: the phase did not run).

    ``boot_s`` is split by what the engine's start-up log said
    (:func:`workers.engines.boot_phases`); each part is None where the log did not say,
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
"""What a capacity probe showed (:mod:`workers.loadgen.verdict`)."""


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
    flight (:class:`workers.loadgen.verdict.SteadyState`)."""
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
    attributed as :mod:`workers.loadgen.sessions` says)."""
    medians_ms: dict[str, float] = Field(default_factory=dict)
    """Median TTFT and TPOT (ms) of the probe's completed requests. Smooth in the engine's
    speed where a short probe's p99 is one request's luck: the twin fits both."""
    # What the probe measured, kept so any SLO of the same percentile family can be scored
    # from the stored probes later (tuner.planning.rescore). Rows stored before these fields have
    # none of them (None / empty): they read as before and rescore as "not measured".
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
