"""vLLM's KV cache manager, simulated: the block pool and the prefix cache over it.

:class:`BlockPool` is the pool (reference counts, the LRU free queue, the hash index);
:class:`KVCacheManager` gives requests their blocks and, with prefix caching, hashes
their full blocks by their whole prefix so a later request with the same prefix reuses
them. The scheduler (:mod:`slotune.workers.sim.scheduler`) decides who gets blocks; this module
only keeps the books. The scheduler's lazy decode path takes a block inline from
:class:`BlockPool`'s fields, once per generated block, which is why they are public.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from slotune.workers.sim import tokenizer
from slotune.workers.sim.request import SimRequest


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



class KVCacheManager:
    """Blocks for requests and the prefix cache, over one :class:`BlockPool`."""

    def __init__(self, num_blocks: int, block_size: int, vocab: int) -> None:
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.vocab = vocab

    @property
    def usage(self) -> float:
        return self.pool.usage

    def reset(self) -> bool:
        """Drop the prefix cache; refused (False) while any block is in use."""
        return self.pool.reset()

    def hash_blocks(self, req: SimRequest, num_full_blocks: int) -> None:
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

    def cached_prefix(self, req: SimRequest) -> list[int]:
        """Cached blocks matching the request's prefix (at least one token left to compute)."""
        max_blocks = (req.num_tokens - 1) // self.block_size
        self.hash_blocks(req, max_blocks)
        hits: list[int] = []
        cached = self.pool.cached
        for h in req.block_hashes[:max_blocks]:
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def allocate(self, req: SimRequest, num_new: int, hits: Sequence[int] = ()) -> bool:
        """Give the request the blocks ``num_new`` more tokens need (after the cached
        ``hits``, which it then shares); False, touching nothing, when too few are free."""
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

    def cache_full_blocks(self, req: SimRequest) -> None:
        """Index the request's blocks that filled since it was last cached."""
        full = min(req.num_computed // self.block_size, len(req.block_ids))
        if full > req.num_cached_blocks:
            self.register_full_blocks(req, full)

    def register_full_blocks(self, req: SimRequest, full: int) -> None:
        """Hash the request's first ``full`` blocks and index the new ones for reuse."""
        self.hash_blocks(req, full)
        cached, block_hash = self.pool.cached, self.pool.block_hash
        hashes, blocks = req.block_hashes, req.block_ids
        for i in range(req.num_cached_blocks, full):
            h = hashes[i]
            if h not in cached:  # BlockPool.register, inlined: once per block
                cached[h] = blocks[i]
                block_hash[blocks[i]] = h
        req.num_cached_blocks = full

    def free(self, req: SimRequest) -> None:
        """Release the request's blocks (their hashes stay cached until evicted)."""
        self.pool.release(req.block_ids)
        req.block_ids = []
        req.num_cached_blocks = 0
