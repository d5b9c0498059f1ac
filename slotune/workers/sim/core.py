"""The discrete-event core of the simulated engine: vLLM V1's scheduler and KV cache.

No clock and no I/O: a driver adds requests and calls :meth:`EngineCore.step` with the
current engine time; the step returns how long it takes and what each request produced.
The same core runs behind the virtual-time :func:`~slotune.workers.sim.virtual_time.simulate` and
the real-time HTTP server, so both see the same walls:

* each step has a token budget (``max_num_batched_tokens``); running requests come first
  (a decode token each, or their next prefill chunk), then waiting ones in FCFS order
  while budget, ``max_num_seqs`` and free KV blocks allow;
* when the KV cache runs out, the most recently admitted running request is preempted:
  its blocks are freed, its computed tokens reset, and it goes back to the front of the
  queue to be recomputed;
* with prefix caching, full blocks are hashed by their token prefix and reused.

As vLLM splits its engine core, the parts are modules of their own, composed here: the
scheduler with its preemption policy (:mod:`slotune.workers.sim.scheduler`), the KV cache manager
with its block pool and prefix cache (:mod:`slotune.workers.sim.kv_cache`), and the step's price
(:mod:`slotune.workers.sim.pricing`); the request types they share are
:mod:`slotune.workers.sim.request`.

Two bookkeeping modes give identical timings. The eager mode updates every scheduled
request after every step (the real-time driver needs each request's tokens as they
come). The lazy mode, for the virtual-time driver, leaves steady decoders untouched:
a decoder emits one token per step, so its state is implied by the step counter, and
only its events — needing a new KV block, finishing, being preempted — are visited,
from a calendar keyed by step index. That keeps a step's cost independent of the batch
size; ``tests/unit/workers/sim/test_core.py`` holds the two modes to the same results.
"""

from __future__ import annotations

import random
from collections import deque

from slotune.workers.sim.config import EngineConfig, MemoryPlan, plan_memory
from slotune.workers.sim.cost_model import CostModel, StepCost
from slotune.workers.sim.cost_registry import make_cost_model
from slotune.workers.sim.kv_cache import BlockPool, KVCacheManager
from slotune.workers.sim.metrics import EngineStats, Gauges
from slotune.workers.sim.pricing import StepPricer
from slotune.workers.sim.request import (
    EngineCrashed,
    PlannedStep,
    RequestRejected,
    RequestStatus,
    SimRequest,
    StepResult,
)
from slotune.workers.sim.scheduler import Scheduler

__all__ = [
    "BlockPool",
    "EngineCore",
    "EngineCrashed",
    "PlannedStep",
    "RequestRejected",
    "RequestStatus",
    "SimRequest",
    "StepResult",
]


class EngineCore:
    """One simulated engine: waiting queue, running batch, KV pool, cost model, stats.

    Composes a :class:`Scheduler`, a :class:`KVCacheManager` and a :class:`StepPricer`;
    what callers read of them (the queue, the pool, the stats, the generator a
    data-parallel rank replaces) reads through to the part that owns it.
    """

    def __init__(self, config: EngineConfig, cost_model: CostModel | None = None,
                 plan: MemoryPlan | None = None, *, lazy_decode: bool = False) -> None:
        self.config = config
        self.plan = plan or plan_memory(config)
        self.cost_model = cost_model or make_cost_model(config.cost_model, config.hardware,
                                                          config.calibration)
        self.block_size = config.block_size
        self.kv = KVCacheManager(self.plan.num_blocks, config.block_size,
                                 config.model.vocab_size)
        rng = random.Random(config.seed)
        self.pricer = StepPricer(config, self.cost_model, rng)
        self.scheduler = Scheduler(config, self.kv, EngineStats(), rng,
                                   lazy_decode=lazy_decode)

    # ---- the parts' state, where callers read it -------------------------------------

    @property
    def pool(self) -> BlockPool:
        return self.kv.pool

    @property
    def waiting(self) -> deque[SimRequest]:
        return self.scheduler.waiting

    @property
    def running(self) -> list[SimRequest]:
        return self.scheduler.running

    @property
    def requests(self) -> dict[str, SimRequest]:
        return self.scheduler.requests

    @property
    def num_steps(self) -> int:
        return self.scheduler.num_steps

    @property
    def stats(self) -> EngineStats:
        return self.scheduler.stats

    @stats.setter
    def stats(self, stats: EngineStats) -> None:
        # Data-parallel ranks share one server's stats (slotune.workers.sim.data_parallel).
        self.scheduler.stats = stats

    @property
    def rng(self) -> random.Random:
        return self.scheduler.rng

    @rng.setter
    def rng(self, rng: random.Random) -> None:
        # One generator for the step noise and the drafts, as before: a rank's own seed
        # (slotune.workers.sim.data_parallel) reaches both.
        self.scheduler.rng = self.pricer.rng = rng

    # ---- requests ---------------------------------------------------------------------

    def validate(self, num_prompt: int, max_tokens: int | None) -> int:
        """vLLM's admission checks; returns the effective max_tokens."""
        return self.scheduler.validate(num_prompt, max_tokens)

    def add_request(self, request_id: str, prompt_ids: list[int], max_tokens: int | None,
                    arrival_time: float, *, min_tokens: int = 0,
                    ignore_eos: bool = False) -> SimRequest:
        return self.scheduler.add_request(request_id, prompt_ids, max_tokens, arrival_time,
                                          min_tokens=min_tokens, ignore_eos=ignore_eos)

    def abort(self, request_id: str, now: float) -> None:
        self.scheduler.abort(request_id, now)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    @property
    def num_running(self) -> int:
        return self.scheduler.num_running

    def gauges(self) -> Gauges:
        return Gauges(self.num_running, len(self.waiting), self.pool.usage)

    def flush(self) -> None:
        """Bring every lazy decoder's fields up to date (after a run that stopped early)."""
        self.scheduler.flush()

    def reset_prefix_cache(self) -> bool:
        return self.kv.reset()

    # ---- the step ---------------------------------------------------------------------

    def step(self, now: float) -> StepResult | None:
        """Schedule and run one step starting at engine time ``now``; None when idle."""
        planned = self.schedule(now)
        if planned is None:
            return None
        cost, duration = self.price(planned)
        return self.run(now, planned, cost, duration)

    def schedule(self, now: float) -> PlannedStep | None:
        """Pick the batch of the step starting at ``now`` (None when idle). The step is
        then priced (:meth:`price`) and run (:meth:`run`); :meth:`step` does all three,
        and data-parallel ranks run one step together at their slowest rank's pace
        (:mod:`slotune.workers.sim.data_parallel`)."""
        return self.scheduler.schedule(now)

    def price(self, planned: PlannedStep) -> tuple[StepCost, float]:
        """The planned step's modelled cost and its duration with this rank's noise;
        raises :class:`EngineCrashed` for a batch the memory left outside the KV cache
        cannot hold."""
        return self.pricer.price(planned)

    def run(self, now: float, planned: PlannedStep, cost: StepCost,
            duration: float) -> StepResult:
        """Run the planned step from ``now`` for ``duration``: every scheduled request's
        progress, tokens, finishes."""
        return self.scheduler.run(now, planned, cost, duration)
