"""vLLM V1's scheduler, simulated: who runs in each step, preemption, and the step's effects.

Each step has a token budget (``max_num_batched_tokens``); running requests come first
(a decode token each, or their next prefill chunk), then waiting ones in FCFS order
while budget, ``max_num_seqs`` and free KV blocks allow (:mod:`slotune.workers.sim.kv_cache`
keeps the blocks). When the KV cache runs out, the most recently admitted running
request is preempted: its blocks are freed, its computed tokens reset, and it goes back
to the front of the queue to be recomputed. After the step is priced, :meth:`Scheduler.run`
applies it: every scheduled request's progress, tokens and finishes, and the metrics.

The lazy decode bookkeeping (see :mod:`slotune.workers.sim.core`) lives here: the decoders, and
the calendars of their block and finish events by step index.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections import deque

from slotune.workers.sim import tokenizer
from slotune.workers.sim.config import EngineConfig
from slotune.workers.sim.cost_model import StepCost, StepShape
from slotune.workers.sim.kv_cache import KVCacheManager
from slotune.workers.sim.metrics import EngineStats
from slotune.workers.sim.numerics import divergence
from slotune.workers.sim.request import (
    PlannedStep,
    RequestRejected,
    RequestStatus,
    SimRequest,
    StepResult,
)

__all__ = ["Scheduler"]


class Scheduler:
    """The waiting queue, the running batch and the lazy decoders of one engine."""

    def __init__(self, config: EngineConfig, kv: KVCacheManager, stats: EngineStats,
                 rng: random.Random, *, lazy_decode: bool = False) -> None:
        self.config = config
        self.kv = kv
        self.block_size = kv.block_size
        self.vocab = kv.vocab
        self.stats = stats
        self.rng = rng
        """The engine's one generator (drafts accepted here, step noise in the pricing):
        one sequence of draws, so a seed gives the same run as before the split."""
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.requests: dict[str, SimRequest] = {}
        self.num_steps = 0
        spec = config.speculative
        self.spec_tokens = spec.num_speculative_tokens if spec else 0
        self.spec_acceptance = spec.acceptance_rate if spec else 0.0
        # Lazy decode bookkeeping (see slotune.workers.sim.core's docstring); off under speculative
        # decoding, where a decoder's tokens per step are random.
        self.lazy = lazy_decode and not spec
        self.decoders: dict[SimRequest, None] = {}
        self.step_ends: list[float] = []
        self.block_due: dict[int, list[tuple[SimRequest, int]]] = {}
        self.finish_due: dict[int, list[tuple[SimRequest, int]]] = {}
        self.lazy_context = 0
        """Σ over lazy decoders of the context they attend to in the coming step."""
        self._admissions = 0

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

    def flush(self) -> None:
        """Bring every lazy decoder's fields up to date (after a run that stopped early)."""
        for req in list(self.decoders):
            self._leave_decode(req, self.num_steps)
            self.running.append(req)


    def _preempt(self, req: SimRequest) -> None:
        self.kv.free(req)
        req.num_computed = 0
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.waiting.appendleft(req)
        self.stats.num_preemptions += 1

    def schedule(self, now: float) -> PlannedStep | None:
        """Pick the batch of the step starting at ``now`` (None when idle); the engine core
        prices it (:mod:`slotune.workers.sim.pricing`) and then :meth:`run` runs it."""
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
            while not self.kv.allocate(req, n):
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
        pool, decoders = self.kv.pool, self.decoders
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
                    self.kv.register_full_blocks(req, held)
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
                hits = self.kv.cached_prefix(req)
            computed = len(hits) * self.block_size
            n = req.num_tokens - computed
            if not cfg.enable_chunked_prefill and n > budget:
                break
            n = min(n, budget)
            if not self.kv.allocate(req, n, hits):
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
                    self.kv.cache_full_blocks(req)
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
                self.kv.cache_full_blocks(req)
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
                    self.kv.cache_full_blocks(req)
                finished.append(req)

    def _accepted_drafts(self) -> int:
        accepted = 0
        while accepted < self.spec_tokens and self.rng.random() < self.spec_acceptance:
            accepted += 1
        return accepted

    def _finish(self, req: SimRequest, now: float, reason: str) -> None:
        self.kv.free(req)
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
