"""Data-parallel ranks behind one API server: vLLM's ``--data-parallel-size N``.

vLLM 0.32 serves ``--data-parallel-size N`` as one API server in front of N engine
cores, each a whole scheduler with its own KV cache, ``max_num_seqs`` and batch on its
TP devices. The server's load balancer (``DPLBAsyncMPClient.get_core_engine_for_request``)
sends each new request to the rank with the lowest score — its unfinished requests, plus
``6 × waiting × max(0, kv_cache_usage − 0.5)`` when requests wait on a KV-bound rank —
scanning from a start index that rotates by one per request, so ties go round-robin.
:class:`DataParallelCore` does the same with the ranks' exact counts (vLLM's are at
most 100 ms old).

A MoE model's ranks step together (vLLM runs a dummy batch on an idle rank so the
expert layers' collectives line up): each step, every rank with work schedules its own
batch, the expert layers see the group's tokens (``StepShape.group_tokens``), and the
step lasts as long as the slowest rank's. Dense models are run the same way, an
approximation (:mod:`slotune.workers.sim.moe` lists the assumptions).

:func:`make_core` builds a single :class:`~slotune.workers.sim.core.EngineCore` or this, with
the interface the drivers use (``add_request``, ``step``, ``abort``, ``gauges``, …).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import replace

from slotune.workers.sim.config import EngineConfig, MemoryPlan, plan_memory
from slotune.workers.sim.core import EngineCore, SimRequest, StepResult
from slotune.workers.sim.cost_model import CostModel, StepCost, StepShape
from slotune.workers.sim.cost_registry import make_cost_model
from slotune.workers.sim.metrics import EngineStats, Gauges

__all__ = ["DataParallelCore", "make_core"]

KV_PRESSURE_WEIGHT = 6.0
"""vLLM's penalty per waiting request at full KV cache (ramping from 50% usage)."""


def make_core(config: EngineConfig, cost_model: CostModel | None = None,
              plan: MemoryPlan | None = None, *,
              lazy_decode: bool = False) -> EngineCore | DataParallelCore:
    """The engine a driver runs: one core, or one per data-parallel rank."""
    if config.data_parallel_size == 1:
        return EngineCore(config, cost_model, plan, lazy_decode=lazy_decode)
    return DataParallelCore(config, cost_model, plan, lazy_decode=lazy_decode)


class DataParallelCore:
    """``data_parallel_size`` engine cores behind one load balancer, stepping together."""

    def __init__(self, config: EngineConfig, cost_model: CostModel | None = None,
                 plan: MemoryPlan | None = None, *, lazy_decode: bool = False) -> None:
        self.config = config
        self.plan = plan or plan_memory(config)  # every rank sizes its memory alike
        model = cost_model or make_cost_model(config.cost_model, config.hardware,
                                              config.calibration)
        self.stats = EngineStats()
        self.ranks: list[EngineCore] = []
        for rank in range(config.data_parallel_size):
            core = EngineCore(config, model, self.plan, lazy_decode=lazy_decode)
            core.stats = self.stats  # one server's /metrics: the ranks' counts together
            core.rng = random.Random(config.seed * 1_000 + rank)  # each rank its own noise
            self.ranks.append(core)
        self.num_steps = 0
        self._rank_of: dict[str, EngineCore] = {}
        self._start = 0

    # ---- requests ---------------------------------------------------------------------

    def validate(self, num_prompt: int, max_tokens: int | None) -> int:
        return self.ranks[0].validate(num_prompt, max_tokens)

    def add_request(self, request_id: str, prompt_ids: list[int], max_tokens: int | None,
                    arrival_time: float, *, min_tokens: int = 0,
                    ignore_eos: bool = False) -> SimRequest:
        rank = self._balance()
        req = rank.add_request(request_id, prompt_ids, max_tokens, arrival_time,
                               min_tokens=min_tokens, ignore_eos=ignore_eos)
        self._rank_of[request_id] = rank
        return req

    def _balance(self) -> EngineCore:
        n = len(self.ranks)
        best, best_score = self.ranks[self._start], float("inf")
        for i in range(n):
            core = self.ranks[(self._start + i) % n]
            waiting = len(core.waiting)
            score = float(waiting + core.num_running)
            if waiting:
                score += waiting * KV_PRESSURE_WEIGHT * max(0.0, core.pool.usage - 0.5)
            if score < best_score:
                best, best_score = core, score
        self._start = (self._start + 1) % n
        return best

    def abort(self, request_id: str, now: float) -> None:
        rank = self._rank_of.pop(request_id, None)
        if rank is not None:
            rank.abort(request_id, now)

    def has_work(self) -> bool:
        return any(core.has_work() for core in self.ranks)

    @property
    def num_running(self) -> int:
        return sum(core.num_running for core in self.ranks)

    def gauges(self) -> Gauges:
        usage = sum(core.pool.usage for core in self.ranks) / len(self.ranks)
        return Gauges(self.num_running, sum(len(c.waiting) for c in self.ranks), usage)

    def flush(self) -> None:
        for core in self.ranks:
            core.flush()

    def reset_prefix_cache(self) -> bool:
        # vLLM resets every rank's cache; refused while any rank holds a block in use.
        if any(c.pool.num_free != c.pool.num_blocks for c in self.ranks):
            return False
        return all([core.reset_prefix_cache() for core in self.ranks])

    # ---- the step ---------------------------------------------------------------------

    def step(self, now: float) -> StepResult | None:
        """One step of every rank with a batch, together; None when all are idle."""
        planned = [(core, p) for core in self.ranks if (p := core.schedule(now)) is not None]
        if not planned:
            return None
        group = sum(p.shape.num_tokens for _, p in planned)
        priced = []
        for core, p in planned:
            p = replace(p, shape=replace(p.shape, group_tokens=group))
            cost, duration = core.price(p)
            priced.append((core, p, cost, duration))
        duration = max(d for *_, d in priced)
        slowest: StepCost = max(priced, key=lambda entry: entry[3])[2]
        results = [core.run(now, p, cost, duration) for core, p, cost, _ in priced]
        self.num_steps += 1
        for result in results:
            for req in result.finished:
                self._rank_of.pop(req.request_id, None)
        return StepResult(
            start_time=now, duration=duration, shape=_total(r.shape for r in results),
            cost=slowest, new_tokens=[t for r in results for t in r.new_tokens],
            finished=[q for r in results for q in r.finished],
            preempted=[q for r in results for q in r.preempted])


def _total(shapes: Iterable[StepShape]) -> StepShape:
    """The group's batch: the ranks' shapes added up."""
    total = StepShape(decode_query_tokens=0)
    for shape in shapes:
        total = StepShape(
            prefill_tokens=total.prefill_tokens + shape.prefill_tokens,
            prefill_seqs=total.prefill_seqs + shape.prefill_seqs,
            prefill_attention_pairs=total.prefill_attention_pairs
            + shape.prefill_attention_pairs,
            prefill_context=total.prefill_context + shape.prefill_context,
            decode_seqs=total.decode_seqs + shape.decode_seqs,
            decode_context=total.decode_context + shape.decode_context,
            decode_query_tokens=max(total.decode_query_tokens, shape.decode_query_tokens),
            group_tokens=shape.group_tokens)
    return total
