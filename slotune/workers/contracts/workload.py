"""What traffic looks like: the datasets (a tagged union on ``kind``), arrivals and ramps, and
the :class:`Workload` that binds them with counts and a seed."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from slotune.workers.contracts._base import MAX_TOKENS, _Strict

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
    (:func:`slotune.workers.loadgen.generate.arrivals.arrival_offsets`; a capacity probe's rate, for
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
    permutation drawn from this seed (:func:`slotune.workers.loadgen.generate.datasets.relabel`) —
    the sample's lengths, arrivals and shared prefixes stay the seed's. A capacity probe's own (so
    no probe is served from another's prefix cache); None: the seed's tokens."""
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
