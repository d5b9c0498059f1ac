"""A request as the simulated engine tracks it, and what a step plans and produces.

The types the engine core's parts share (:mod:`slotune.workers.sim.scheduler`,
:mod:`slotune.workers.sim.kv_cache`, :mod:`slotune.workers.sim.pricing`), apart so that none of them
imports another for them; :mod:`slotune.workers.sim.core` re-exports them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from slotune.workers.sim import tokenizer
from slotune.workers.sim.cost_model import StepCost, StepShape
from slotune.workers.sim.numerics import Divergence, answer_words


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class RequestRejected(ValueError):
    """A request the engine refuses outright (too long for max_model_len, bad limits)."""


class EngineCrashed(RuntimeError):
    """The simulated GPU ran out of memory mid-run; the engine process would die."""


@dataclass(eq=False, slots=True)
class SimRequest:
    """One request as the engine tracks it, with the timestamps its metrics come from."""

    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    arrival_time: float
    min_tokens: int = 0
    ignore_eos: bool = False
    key: int = 0
    target_output: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_computed: int = 0
    num_output: int = 0
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0
    num_cached_tokens: int = -1
    num_preemptions: int = 0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finish_time: float | None = None
    finish_reason: str | None = None
    token_times: list[float] = field(default_factory=list)
    num_tokens: int = 0
    """Prompt plus output tokens so far (kept as a field: the scheduler reads it a lot)."""
    seq: int = 0
    """Admission order (renewed when a preempted request is re-admitted)."""
    lazy_base_step: int = -1
    """Lazy mode: the first step of its current steady decode run; -1 when not a decoder."""
    lazy_epoch: int = 0
    """Bumped whenever a decode run ends, so stale calendar entries are ignored."""
    divergence: Divergence | None = None
    """Lossy numerics: where its answer leaves the lossless one
    (:mod:`slotune.workers.sim.numerics`)."""

    def __post_init__(self) -> None:
        self.num_tokens = len(self.prompt_ids) + self.num_output

    @property
    def num_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def token_id(self, position: int, vocab_size: int) -> int:
        if position < len(self.prompt_ids):
            return self.prompt_ids[position]
        return tokenizer.output_token_id(self.key, position - len(self.prompt_ids), vocab_size)

    def token_ids(self, start: int, stop: int, vocab_size: int) -> tuple[int, ...]:
        prompt = self.prompt_ids
        if stop <= len(prompt):
            return tuple(prompt[start:stop])
        n = len(prompt)
        tail = tokenizer.output_token_ids(self.key, max(start, n) - n, stop - n, vocab_size)
        return (*prompt[start:n], *tail) if start < n else tail

    def output_words(self, start: int, stop: int) -> list[str]:
        """What it says at output positions ``start .. stop - 1`` (what the client sees;
        block hashing keeps the lossless ids, which changes no timing)."""
        return answer_words(self.key, self.divergence, start, stop)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one engine step did: its duration, shape, cost and per-request outputs."""

    start_time: float
    duration: float
    shape: StepShape
    cost: StepCost
    new_tokens: list[tuple[SimRequest, int]]
    """(request, tokens it produced this step), in schedule order; 0 for a prefill chunk."""
    finished: list[SimRequest]
    preempted: list[SimRequest]

    @property
    def end_time(self) -> float:
        return self.start_time + self.duration


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """A scheduled batch not yet run: what :meth:`EngineCore.schedule` picked."""

    scheduled: list[tuple[SimRequest, int]]
    preempted: list[SimRequest]
    shape: StepShape
