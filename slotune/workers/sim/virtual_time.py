"""The virtual-time driver: a whole workload through the engine core without sleeping.

Used by the search-quality benchmarks and for pre-screening. Arrivals are fed in as
engine time reaches them; each step advances the clock by its modelled duration. The
result holds every request's timestamps and the metric time series a scraper would see.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from slotune.workers.sim.config import EngineConfig, MemoryPlan
from slotune.workers.sim.core import EngineCrashed, SimRequest
from slotune.workers.sim.cost_model import CostModel
from slotune.workers.sim.data_parallel import make_core
from slotune.workers.sim.metrics import EngineStats


@dataclass(frozen=True, slots=True)
class SimRequestSpec:
    """One request to simulate: when it arrives, its prompt's token ids, and its limits."""

    arrival_time: float
    prompt_ids: Sequence[int]
    max_tokens: int
    ignore_eos: bool = True
    min_tokens: int = 0
    request_id: str | None = None


FollowUp = Callable[[SimRequest], SimRequestSpec | None]
"""Given a request that just finished, the request it leads to, if any."""


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """A finished request's timestamps (engine seconds) and counts."""

    request_id: str
    arrival_time: float
    prompt_tokens: int
    output_tokens: int
    first_scheduled_time: float | None
    first_token_time: float | None
    token_times: tuple[float, ...]
    finish_time: float | None
    finish_reason: str | None
    num_preemptions: int
    num_cached_tokens: int

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def e2el(self) -> float | None:
        return None if self.finish_time is None else self.finish_time - self.arrival_time

    @property
    def tpot(self) -> float | None:
        """(E2EL − TTFT) / (output tokens − 1), as ``vllm bench serve`` defines it."""
        if self.output_tokens <= 1 or self.first_token_time is None or not self.token_times:
            return None
        return (self.token_times[-1] - self.first_token_time) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        """Gaps between successive token emissions (tokens of one step arrive together)."""
        times = sorted(set(self.token_times))
        return [b - a for a, b in pairwise(times)]


@dataclass(slots=True)
class MetricSeries:
    """Per-step samples of the engine's gauges and counters (engine time, step end)."""

    time: list[float] = field(default_factory=list)
    num_requests_running: list[int] = field(default_factory=list)
    num_requests_waiting: list[int] = field(default_factory=list)
    kv_cache_usage_perc: list[float] = field(default_factory=list)
    num_preemptions: list[int] = field(default_factory=list)
    batch_tokens: list[int] = field(default_factory=list)


@dataclass(slots=True)
class SimulationResult:
    config: EngineConfig
    memory: MemoryPlan
    requests: list[RequestTiming]
    series: MetricSeries
    stats: EngineStats
    duration: float
    """Engine seconds from the first arrival to the last step's end."""
    num_steps: int
    crashed: str | None = None
    """The engine's OOM message when the run died mid-way (then requests are partial)."""


def random_prompt(rng: random.Random, length: int, vocab_size: int = 32000,
                  prefix: Sequence[int] = ()) -> list[int]:
    """Token ids for a prompt of ``length`` tokens, starting with a shared ``prefix``."""
    body = [rng.randrange(vocab_size) for _ in range(max(0, length - len(prefix)))]
    return [*prefix, *body][:length]


def _timing(req: SimRequest) -> RequestTiming:
    return RequestTiming(
        request_id=req.request_id,
        arrival_time=req.arrival_time,
        prompt_tokens=req.num_prompt,
        output_tokens=req.num_output,
        first_scheduled_time=req.first_scheduled_time,
        first_token_time=req.first_token_time,
        token_times=tuple(req.token_times),
        finish_time=req.finish_time,
        finish_reason=req.finish_reason,
        num_preemptions=req.num_preemptions,
        num_cached_tokens=max(req.num_cached_tokens, 0),
    )


def simulate(config: EngineConfig, requests: Sequence[SimRequestSpec], *,
             cost_model: CostModel | None = None, lazy_decode: bool = True,
             follow_up: FollowUp | None = None) -> SimulationResult:
    """Run ``requests`` through a fresh engine in virtual time.

    ``follow_up`` is asked, as each request finishes, for the request it leads to (a
    conversation's next turn, arriving after its think time): closed-loop load.
    Deterministic: the same config (seed, noise) and requests give identical timings.
    Raises :class:`~slotune.workers.sim.core.RequestRejected` for a request vLLM would refuse.
    """
    core = make_core(config, cost_model, lazy_decode=lazy_decode)
    # (arrival, order, spec): arrivals in time order, ties in the order given
    pending = [(spec.arrival_time, i, spec) for i, spec in enumerate(requests)]
    heapq.heapify(pending)
    added = len(pending)
    tracked: list[SimRequest] = []
    series = MetricSeries()
    start = pending[0][0] if pending else 0.0
    now = start
    crashed: str | None = None
    while pending or core.has_work():
        while pending and pending[0][0] <= now:
            _, order, spec = heapq.heappop(pending)
            tracked.append(core.add_request(
                spec.request_id or f"req-{order}", list(spec.prompt_ids), spec.max_tokens,
                spec.arrival_time, min_tokens=spec.min_tokens, ignore_eos=spec.ignore_eos,
            ))
        if not core.has_work():
            now = pending[0][0]
            continue
        try:
            result = core.step(now)
        except EngineCrashed as exc:
            crashed = str(exc)
            core.flush()
            break
        if result is None:  # pragma: no cover - the memory plan guarantees one request fits
            raise RuntimeError("engine stalled with work queued")
        now = result.end_time
        if follow_up is not None:
            for req in result.finished:
                after = follow_up(req)
                if after is not None:
                    heapq.heappush(pending, (after.arrival_time, added, after))
                    added += 1
        gauges = core.gauges()
        series.time.append(now)
        series.num_requests_running.append(gauges.num_requests_running)
        series.num_requests_waiting.append(gauges.num_requests_waiting)
        series.kv_cache_usage_perc.append(gauges.kv_cache_usage_perc)
        series.num_preemptions.append(core.stats.num_preemptions)
        series.batch_tokens.append(result.shape.num_tokens)
    return SimulationResult(
        config=config, memory=core.plan, requests=[_timing(r) for r in tracked],
        series=series, stats=core.stats, duration=now - start, num_steps=core.num_steps,
        crashed=crashed,
    )
