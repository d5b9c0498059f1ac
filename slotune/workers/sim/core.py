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

Two bookkeeping modes give identical timings. The eager mode updates every scheduled
request after every step (the real-time driver needs each request's tokens as they
come). The lazy mode, for the virtual-time driver, leaves steady decoders untouched:
a decoder emits one token per step, so its state is implied by the step counter, and
only its events — needing a new KV block, finishing, being preempted — are visited,
from a calendar keyed by step index. That keeps a step's cost independent of the batch
size; ``tests/unit/workers/sim/test_core.py`` holds the two modes to the same results.
"""

from __future__ import annotations

import enum
import math
import random
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from slotune.workers.sim import tokenizer
from slotune.workers.sim.config import EngineConfig, MemoryPlan, plan_memory, runtime_oom_tokens
from slotune.workers.sim.cost_model import CostModel, StepCost, StepShape
from slotune.workers.sim.cost_registry import make_cost_model
from slotune.workers.sim.metrics import EngineStats, Gauges
from slotune.workers.sim.numerics import Divergence, answer_words, divergence


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


class BlockPool:
    """vLLM's KV block pool: reference counts, an LRU free queue and the prefix-hash index.

    Freed blocks keep their hash and stay reusable until the free queue hands them out
    again (eviction), which is how a preempted or finished request's prefix survives.

    Its memory follows the blocks used, never the blocks it has: a tiny model on a large
    GPU has hundreds of millions of blocks (250 million for a one-layer, 8-wide model on
    an H200), and the twin builds thousands of engines a sweep. vLLM's queue starts as
    every block in order, and a freed block joins its tail, so the blocks never used yet
    always come first: they are a count (``fresh``, the next one), not entries. Reference
    counts are kept for the blocks in use only, hashes for the blocks that hold one, and
    the queue's tail holds the blocks used and freed since.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref_count: dict[int, int] = {}
        """Reference counts of the blocks in use; a block not here is free."""
        self.block_hash: dict[int, int] = {}
        """The prefix hash each block holds (in use, or freed and still cached)."""
        self.fresh = 0
        """Blocks ``fresh`` … ``num_blocks - 1`` were never used: the queue's head."""
        self.free: OrderedDict[int, None] = OrderedDict()
        """Blocks used and freed since, least recently freed first: the queue's tail."""
        self.cached: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return self.num_blocks - self.fresh + len(self.free)

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free / self.num_blocks

    def take(self, n: int) -> list[int]:
        """Hand out ``n`` free blocks, least recently freed first, evicting their hashes."""
        out = []
        free, block_hash, ref_count = self.free, self.block_hash, self.ref_count
        for _ in range(n):
            if self.fresh < self.num_blocks:
                block = self.fresh
                self.fresh += 1
                ref_count[block] = 1
                out.append(block)
                continue
            block = free.popitem(last=False)[0]
            h = block_hash.pop(block, None)
            if h is not None and self.cached.get(h) == block:
                del self.cached[h]
            ref_count[block] = 1
            out.append(block)
        return out

    def touch(self, blocks: Sequence[int]) -> None:
        ref_count = self.ref_count
        for block in blocks:
            count = ref_count.get(block, 0)
            if count == 0:
                del self.free[block]
            ref_count[block] = count + 1

    def release(self, blocks: Sequence[int]) -> None:
        # Tail blocks first, so a request's prefix is the last of it to be evicted.
        ref_count = self.ref_count
        for block in reversed(blocks):
            count = ref_count[block] - 1
            if count:
                ref_count[block] = count
            else:
                del ref_count[block]
                self.free[block] = None

    def register(self, block: int, block_hash: int) -> None:
        if block_hash not in self.cached:
            self.cached[block_hash] = block
            self.block_hash[block] = block_hash

    def reset(self) -> bool:
        """Drop every cached hash; refused (False) while any block is in use, as in vLLM."""
        if self.num_free != self.num_blocks:
            return False
        self.cached.clear()
        self.block_hash.clear()
        return True


class EngineCore:
    """One simulated engine: waiting queue, running batch, KV pool, cost model, stats."""

    def __init__(self, config: EngineConfig, cost_model: CostModel | None = None,
                 plan: MemoryPlan | None = None, *, lazy_decode: bool = False) -> None:
        self.config = config
        self.plan = plan or plan_memory(config)
        self.cost_model = cost_model or make_cost_model(config.cost_model, config.hardware,
                                                          config.calibration)
        self.block_size = config.block_size
        self.pool = BlockPool(self.plan.num_blocks)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.requests: dict[str, SimRequest] = {}
        self.stats = EngineStats()
        self.rng = random.Random(config.seed)
        self.vocab = config.model.vocab_size
        self.oom_tokens = runtime_oom_tokens(config)
        self.num_steps = 0
        spec = config.speculative
        self.spec_tokens = spec.num_speculative_tokens if spec else 0
        self.spec_acceptance = spec.acceptance_rate if spec else 0.0
        self.spec_draft_cost = spec.draft_cost_fraction if spec else 0.0
        # Lazy decode bookkeeping (see the module docstring); off under speculative decoding,
        # where a decoder's tokens per step are random.
        self.lazy = lazy_decode and not spec
        self.decoders: dict[SimRequest, None] = {}
        self.step_ends: list[float] = []
        self.block_due: dict[int, list[tuple[SimRequest, int]]] = {}
        self.finish_due: dict[int, list[tuple[SimRequest, int]]] = {}
        self.lazy_context = 0
        """Σ over lazy decoders of the context they attend to in the coming step."""
        self._admissions = 0

    # ---- requests ---------------------------------------------------------------------

    def validate(self, num_prompt: int, max_tokens: int | None) -> int:
        """vLLM's admission checks; returns the effective max_tokens."""
        limit = self.config.max_model_len
        if num_prompt < 1:
            raise RequestRejected("The prompt is empty; it must contain at least one token.")
        if num_prompt >= limit and (max_tokens is None or max_tokens > 0):
            raise RequestRejected(
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {num_prompt} input tokens. Please reduce the length of the "
                "input messages."
            )
        if max_tokens is None:
            return limit - num_prompt
        if max_tokens < 1:
            raise RequestRejected(f"max_tokens must be at least 1, got {max_tokens}.")
        if num_prompt + max_tokens > limit:
            raise RequestRejected(
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has "
                f"{num_prompt} input tokens ({max_tokens} > {limit} - {num_prompt})."
            )
        return max_tokens

    def add_request(self, request_id: str, prompt_ids: list[int], max_tokens: int | None,
                    arrival_time: float, *, min_tokens: int = 0,
                    ignore_eos: bool = False) -> SimRequest:
        if request_id in self.requests:
            raise RequestRejected(f"duplicate request id {request_id!r}")
        limit = self.validate(len(prompt_ids), max_tokens)
        if min_tokens < 0 or min_tokens > limit:
            raise RequestRejected(
                f"min_tokens must be between 0 and max_tokens ({limit}), got {min_tokens}."
            )
        key = tokenizer.request_key(prompt_ids)
        target = limit if ignore_eos else max(min_tokens, min(limit, tokenizer.natural_length(key)))
        req = SimRequest(request_id, list(prompt_ids), limit, arrival_time,
                         min_tokens=min_tokens, ignore_eos=ignore_eos, key=key,
                         target_output=target,
                         divergence=divergence(prompt_ids, self.config.flip_rate))
        self.requests[request_id] = req
        self.waiting.append(req)
        return req

    def abort(self, request_id: str, now: float) -> None:
        req = self.requests.get(request_id)
        if req is None or req.finished:
            return
        if req in self.decoders:
            self._leave_decode(req, self.num_steps)
        elif req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._finish(req, now, "abort")

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.decoders)

    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.decoders)

    def gauges(self) -> Gauges:
        return Gauges(self.num_running, len(self.waiting), self.pool.usage)

    def flush(self) -> None:
        """Bring every lazy decoder's fields up to date (after a run that stopped early)."""
        for req in list(self.decoders):
            self._leave_decode(req, self.num_steps)
            self.running.append(req)

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset()

    # ---- KV cache ---------------------------------------------------------------------

    def _hash_blocks(self, req: SimRequest, num_full_blocks: int) -> None:
        """Extend the request's chain of block hashes (each covers its whole prefix)."""
        bs, hashes = self.block_size, req.block_hashes
        parent = hashes[-1] if hashes else 0
        first = len(hashes)
        prompt = req.prompt_ids
        # Blocks wholly inside the prompt hash straight from its slice (the common case).
        prompt_blocks = min(num_full_blocks, len(prompt) // bs)
        for start in range(first * bs, prompt_blocks * bs, bs):
            parent = hash((parent, tuple(prompt[start:start + bs])))
            hashes.append(parent)
        if num_full_blocks <= prompt_blocks:
            return
        key, n, vocab = req.key, len(prompt), self.vocab
        walk = tokenizer.output_id_walk(vocab)
        offset = tokenizer.output_start(key) - n
        for start in range(max(first, prompt_blocks) * bs, num_full_blocks * bs, bs):
            if start >= n:  # wholly generated: one slice of the word walk
                first_word = (offset + start) % tokenizer.VOCAB_WORDS
                chunk = walk[first_word:first_word + bs]
            else:
                chunk = req.token_ids(start, start + bs, vocab)
            parent = hash((parent, chunk))
            hashes.append(parent)

    def _cached_prefix(self, req: SimRequest) -> list[int]:
        """Cached blocks matching the request's prefix (at least one token left to compute)."""
        max_blocks = (req.num_tokens - 1) // self.block_size
        self._hash_blocks(req, max_blocks)
        hits: list[int] = []
        cached = self.pool.cached
        for h in req.block_hashes[:max_blocks]:
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def _allocate(self, req: SimRequest, num_new: int, hits: Sequence[int] = ()) -> bool:
        bs = self.block_size
        needed = -(-(req.num_computed + len(hits) * bs + num_new) // bs)
        new_blocks = needed - len(req.block_ids) - len(hits)
        in_use = self.pool.ref_count
        evictable_hits = sum(1 for b in hits if b not in in_use)
        if new_blocks > self.pool.num_free - evictable_hits:
            return False
        if hits:
            self.pool.touch(hits)
            req.block_ids.extend(hits)
            req.num_cached_blocks = len(hits)
        if new_blocks > 0:
            req.block_ids.extend(self.pool.take(new_blocks))
        return True

    def _cache_full_blocks(self, req: SimRequest) -> None:
        full = min(req.num_computed // self.block_size, len(req.block_ids))
        if full > req.num_cached_blocks:
            self._register_full_blocks(req, full)

    def _register_full_blocks(self, req: SimRequest, full: int) -> None:
        """Hash the request's first ``full`` blocks and index the new ones for reuse."""
        self._hash_blocks(req, full)
        cached, block_hash = self.pool.cached, self.pool.block_hash
        hashes, blocks = req.block_hashes, req.block_ids
        for i in range(req.num_cached_blocks, full):
            h = hashes[i]
            if h not in cached:  # BlockPool.register, inlined: once per block
                cached[h] = blocks[i]
                block_hash[blocks[i]] = h
        req.num_cached_blocks = full

    def _free(self, req: SimRequest) -> None:
        self.pool.release(req.block_ids)
        req.block_ids = []
        req.num_cached_blocks = 0

    def _preempt(self, req: SimRequest) -> None:
        self._free(req)
        req.num_computed = 0
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.waiting.appendleft(req)
        self.stats.num_preemptions += 1

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
        if not self.running and not self.waiting and not self.decoders:
            return None
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[SimRequest, int]] = []
        preempted: list[SimRequest] = []
        spec = self.spec_tokens
        max_len = cfg.max_model_len

        if self.decoders:
            # Decoders come first in the running order; each takes one token of budget.
            self._lazy_block_events(preempted)
            budget -= len(self.decoders)

        i = 0
        running = self.running
        while i < len(running) and budget > 0:
            req = running[i]
            remaining = req.num_tokens - req.num_computed
            if spec and remaining == 1:
                remaining = min(1 + spec, max_len - req.num_computed)
            n = min(remaining, budget)
            if req.num_computed + n <= len(req.block_ids) * self.block_size:
                scheduled.append((req, n))  # fits in the blocks it holds
                budget -= n
                i += 1
                continue
            while not self._allocate(req, n):
                victim = self._preempt_tail()
                preempted.append(victim)
                if victim is req:
                    break
            else:
                scheduled.append((req, n))
                budget -= n
                i += 1

        if not preempted:
            self._admit_waiting(now, budget, scheduled)

        if not scheduled and not self.decoders:
            return None
        return PlannedStep(scheduled, preempted, self._shape(scheduled))

    def _preempt_tail(self) -> SimRequest:
        """Preempt the most recently admitted running request (the tail of the order)."""
        if self.running:
            victim = self.running.pop()
        else:
            victim = next(reversed(self.decoders))
            self._leave_decode(victim, self.num_steps)
        self._preempt(victim)
        return victim

    def _lazy_block_events(self, preempted: list[SimRequest]) -> None:
        """Give this step's decoders that cross into a new block their block (or preempt)."""
        step = self.num_steps
        due = self.block_due.pop(step, None)
        if not due:
            return
        due.sort(key=lambda entry: entry[0].seq)
        caching = self.config.enable_prefix_caching
        pool, decoders = self.pool, self.decoders
        free, block_hash, ref_count, cached = pool.free, pool.block_hash, pool.ref_count, \
            pool.cached
        bs = self.block_size
        next_due = self.block_due.setdefault(step + bs, [])
        walk, words = tokenizer.output_id_walk(self.vocab), tokenizer.VOCAB_WORDS
        for req, epoch in due:
            if req.lazy_epoch != epoch or req not in decoders:
                continue  # preempted (or finished) since the entry was made
            blocks = req.block_ids
            # Every block it holds is full now; the eager mode cached them as they filled.
            held = len(blocks)
            if caching and held > req.num_cached_blocks:
                hashes = req.block_hashes
                start = (held - 1) * bs
                if req.num_cached_blocks == len(hashes) == held - 1 and start >= len(
                        req.prompt_ids):
                    # One wholly generated block: _register_full_blocks, inlined.
                    first = (req.key % words - len(req.prompt_ids) + start) % words
                    new_hash = hash((hashes[-1] if hashes else 0, walk[first:first + bs]))
                    hashes.append(new_hash)
                    if new_hash not in cached:
                        cached[new_hash] = blocks[-1]
                        block_hash[blocks[-1]] = new_hash
                    req.num_cached_blocks = held
                else:
                    self._register_full_blocks(req, held)
            while not free and pool.fresh == pool.num_blocks:
                victim = self._preempt_tail()
                preempted.append(victim)
                if victim is req:
                    break
            else:
                # BlockPool.take(1), inlined: this runs once per generated block.
                if pool.fresh < pool.num_blocks:
                    block = pool.fresh
                    pool.fresh += 1
                else:
                    block = free.popitem(last=False)[0]
                    evicted = block_hash.pop(block, None)
                    if evicted is not None and cached.get(evicted) == block:
                        del cached[evicted]
                ref_count[block] = 1
                blocks.append(block)
                next_due.append((req, epoch))

    def _enter_decode(self, req: SimRequest, next_step: int) -> None:
        """Lazy mode: from ``next_step`` on, the request decodes one token per step."""
        req.lazy_base_step = next_step
        self.decoders[req] = None
        self.lazy_context += req.num_computed + 1
        capacity = len(req.block_ids) * self.block_size
        self.block_due.setdefault(next_step + capacity - req.num_computed, []).append(
            (req, req.lazy_epoch))
        last = next_step + req.target_output - req.num_output - 1
        self.finish_due.setdefault(last, []).append((req, req.lazy_epoch))

    def _sync_decoder(self, req: SimRequest, upto_step: int) -> None:
        """Apply the lazy steps ``lazy_base_step .. upto_step - 1`` to the request's fields."""
        done = upto_step - req.lazy_base_step
        if done <= 0:
            return
        base = req.lazy_base_step
        req.num_output += done
        req.num_tokens += done
        req.num_computed += done
        req.token_times.extend(self.step_ends[base:upto_step])
        req.last_token_time = self.step_ends[upto_step - 1]
        req.lazy_base_step = upto_step

    def _leave_decode(self, req: SimRequest, upto_step: int) -> None:
        """End a lazy decode run after ``upto_step - 1``; fields become exact again."""
        self.lazy_context -= req.num_computed + 1 + (upto_step - req.lazy_base_step)
        self._sync_decoder(req, upto_step)
        del self.decoders[req]
        req.lazy_base_step = -1
        req.lazy_epoch += 1

    def _admit_waiting(self, now: float, budget: int,
                       scheduled: list[tuple[SimRequest, int]]) -> None:
        cfg = self.config
        waiting, running = self.waiting, self.running
        while waiting and budget > 0 and len(running) + len(self.decoders) < cfg.max_num_seqs:
            req = waiting[0]
            if req.arrival_time > now:
                break  # the real-time driver can run behind the wall clock: not here yet
            hits: list[int] = []
            if cfg.enable_prefix_caching:
                hits = self._cached_prefix(req)
            computed = len(hits) * self.block_size
            n = req.num_tokens - computed
            if not cfg.enable_chunked_prefill and n > budget:
                break
            n = min(n, budget)
            if not self._allocate(req, n, hits):
                if hits:
                    req.num_cached_blocks = 0
                break
            if cfg.enable_prefix_caching:
                self.stats.prefix_cache_queries += req.num_tokens
                self.stats.prefix_cache_hits += computed
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = computed
            waiting.popleft()
            req.num_computed = computed
            req.status = RequestStatus.RUNNING
            self._admissions += 1
            req.seq = self._admissions
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
            running.append(req)
            scheduled.append((req, n))
            budget -= n

    def _shape(self, scheduled: list[tuple[SimRequest, int]]) -> StepShape:
        prefill_tokens = prefill_seqs = prefill_context = 0
        pairs = 0.0
        decode_seqs = decode_context = 0
        for req, n in scheduled:
            if req.num_output > 0 and req.num_computed + 1 == req.num_tokens:
                decode_seqs += 1
                decode_context += req.num_computed + 1
            else:
                prefill_tokens += n
                prefill_seqs += 1
                pairs += n * (req.num_computed + n / 2)
                prefill_context += req.num_computed + n
        return StepShape(
            prefill_tokens=prefill_tokens, prefill_seqs=prefill_seqs,
            prefill_attention_pairs=pairs, prefill_context=prefill_context,
            decode_seqs=decode_seqs + len(self.decoders),
            decode_context=decode_context + self.lazy_context,
            decode_query_tokens=1 + self.spec_tokens,
        )

    def price(self, planned: PlannedStep) -> tuple[StepCost, float]:
        """The planned step's modelled cost and its duration with this rank's noise;
        raises :class:`EngineCrashed` for a batch the memory left outside the KV cache
        cannot hold."""
        shape = planned.shape
        tokens = shape.num_tokens
        if self.oom_tokens is not None and tokens >= self.oom_tokens:
            raise EngineCrashed(
                f"torch.OutOfMemoryError: CUDA out of memory while running a batch of {tokens} "
                f"tokens: gpu_memory_utilization={self.config.gpu_memory_utilization} leaves "
                "too little memory outside the KV cache for this step's activations. Lower "
                "--gpu-memory-utilization or --max-num-batched-tokens."
            )
        cost = self.cost_model.step_cost(shape)
        duration = cost.total_s
        if shape.decode_seqs and self.spec_draft_cost:
            duration *= 1.0 + self.spec_draft_cost
        noise = self.config.noise
        if noise > 0:
            duration *= math.exp(self.rng.gauss(0.0, noise) - noise * noise / 2)
        return cost, duration

    def run(self, now: float, planned: PlannedStep, cost: StepCost,
            duration: float) -> StepResult:
        """Run the planned step from ``now`` for ``duration``: every scheduled request's
        progress, tokens, finishes."""
        scheduled, preempted, shape = planned.scheduled, planned.preempted, planned.shape
        tokens = shape.num_tokens
        end = now + duration
        step = self.num_steps
        self.num_steps += 1
        stats = self.stats
        stats.iteration_tokens.observe(tokens)
        finished: list[SimRequest] = []
        if self.lazy:
            self.step_ends.append(end)
            if self.decoders:
                self._lazy_execute(step, end, finished)

        new_tokens: list[tuple[SimRequest, int]] = []
        max_len = self.config.max_model_len
        caching = self.config.enable_prefix_caching
        itl = stats.inter_token_latency
        itl_bounds, itl_counts = itl.bounds, itl.counts
        bs = self.block_size
        lazified: list[SimRequest] = []
        for req, n in scheduled:
            decoding = req.num_output > 0 and req.num_computed + 1 == req.num_tokens
            req.num_computed += n
            if req.num_computed < req.num_tokens:
                if caching and req.num_computed // bs > req.num_cached_blocks:
                    self._cache_full_blocks(req)
                new_tokens.append((req, 0))
                continue
            produced = 1
            if self.spec_tokens and decoding:
                produced += self._accepted_drafts()
            produced = min(produced, req.target_output - req.num_output, max_len - req.num_tokens)
            first = req.num_output == 0
            req.num_output += produced
            req.num_tokens += produced
            req.num_computed = req.num_tokens - 1
            if produced == 1:
                req.token_times.append(end)
            else:
                req.token_times.extend([end] * produced)
            stats.generation_tokens += produced
            if first:
                req.first_token_time = end
                stats.prompt_tokens += req.num_prompt
                stats.ttft.observe(end - req.arrival_time)
            else:
                # Inlined Histogram.observe: this runs once per token.
                gap = end - req.last_token_time  # type: ignore[operator]
                itl_counts[bisect_left(itl_bounds, gap)] += 1
                itl.total += gap
                itl.count += 1
            req.last_token_time = end
            if caching and req.num_computed // bs > req.num_cached_blocks:
                self._cache_full_blocks(req)
            new_tokens.append((req, produced))
            if req.num_output >= req.target_output or req.num_tokens >= max_len:
                finished.append(req)
            elif self.lazy:
                lazified.append(req)
        if finished or lazified:
            done = set(map(id, finished)) | set(map(id, lazified))
            self.running = [r for r in self.running if id(r) not in done]
            for req in lazified:
                self._enter_decode(req, step + 1)
        if finished:
            for req in finished:
                reason = "length" if req.num_output >= req.max_tokens or \
                    req.num_tokens >= max_len else "stop"
                self._finish(req, end, reason)
        return StepResult(now, duration, shape, cost, new_tokens, finished, preempted)

    def _lazy_execute(self, step: int, end: float, finished: list[SimRequest]) -> None:
        """Account one step of every lazy decoder: a token each, then who finishes."""
        decoders = len(self.decoders)
        stats = self.stats
        stats.generation_tokens += decoders
        # Every decoder's previous token came at the previous step's end.
        gap = end - self.step_ends[step - 1]
        itl = stats.inter_token_latency
        itl.counts[bisect_left(itl.bounds, gap)] += decoders
        itl.total += gap * decoders
        itl.count += decoders
        # Contexts grow by one token for the next step; finishers then leave with theirs.
        self.lazy_context += decoders
        due = self.finish_due.pop(step, None)
        if due:
            due.sort(key=lambda entry: entry[0].seq)
            caching = self.config.enable_prefix_caching
            for req, epoch in due:
                if req.lazy_epoch != epoch or req not in self.decoders:
                    continue
                self._leave_decode(req, step + 1)
                if caching:
                    self._cache_full_blocks(req)
                finished.append(req)

    def _accepted_drafts(self) -> int:
        accepted = 0
        while accepted < self.spec_tokens and self.rng.random() < self.spec_acceptance:
            accepted += 1
        return accepted

    def _finish(self, req: SimRequest, now: float, reason: str) -> None:
        self._free(req)
        req.status = RequestStatus.FINISHED
        req.finish_time = now
        req.finish_reason = reason
        del self.requests[req.request_id]
        stats = self.stats
        stats.requests_finished[reason] = stats.requests_finished.get(reason, 0) + 1
        if req.first_token_time is None:
            return
        stats.e2e_latency.observe(now - req.arrival_time)
        stats.request_prompt_tokens.observe(req.num_prompt)
        stats.request_generation_tokens.observe(req.num_output)
        if req.first_scheduled_time is not None:
            stats.queue_time.observe(req.first_scheduled_time - req.arrival_time)
            stats.prefill_time.observe(req.first_token_time - req.first_scheduled_time)
        if req.last_token_time is not None:
            stats.decode_time.observe(req.last_token_time - req.first_token_time)
