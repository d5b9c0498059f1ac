"""Prompts in the server's own tokens: word ids become token ids of its tokenizer.

A synthetic prompt is a sequence of word ids (:mod:`workers.loadgen.datasets`). Sent as
text, a real tokenizer splits each word into several tokens (a "512-token" prompt was
1,500 tokens to Qwen's tokenizer), so the workload measured is not the one the space
names. Instead the runner asks the server to tokenize the vocabulary once
(``POST /tokenize``, which ``vllm serve`` and the simulated engine both serve) and keeps
the distinct token ids in order of first appearance: word id ``i`` is sent as token id
``pool[i % len(pool)]``. A prompt of N word ids is then exactly N prompt tokens on the
server, identical leading word ids stay identical token prefixes (prefix caching sees the
same sharing), and every id is one the tokenizer produces from ordinary text (no special
or unused ids). A server without ``/tokenize`` gets the text, and input lengths come from
what it reports (``usage.prompt_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from workers.loadgen.datasets import VOCABULARY

__all__ = ["TokenPool", "fetch_token_pool"]

MAX_POOL = 4096
"""Distinct ids kept: far more than random prompts need to never share a block by chance."""
WORDS_PER_CALL = 256
"""Words tokenized per call: stays under any server's max_model_len for one prompt."""
MAX_CALLS = 25


@dataclass(frozen=True, slots=True)
class TokenPool:
    """Distinct token ids of the server's tokenizer, indexed by word id."""

    ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.ids:
            raise ValueError("a token pool needs at least one token id")

    def token_ids(self, word_ids: Sequence[int]) -> list[int]:
        pool, n = self.ids, len(self.ids)
        return [pool[i % n] for i in word_ids]


async def fetch_token_pool(client: httpx.AsyncClient, model: str) -> TokenPool | None:
    """The server's token pool, or None when it cannot tokenize (no ``/tokenize`` route)."""
    seen: dict[int, None] = {}
    for call in range(MAX_CALLS):
        chunk = VOCABULARY[call * WORDS_PER_CALL:(call + 1) * WORDS_PER_CALL]
        if not chunk or len(seen) >= MAX_POOL:
            break
        try:
            response = await client.post(
                "/tokenize", timeout=30.0,
                json={"model": model, "prompt": " ".join(chunk), "add_special_tokens": False})
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            tokens = response.json().get("tokens")
        except ValueError:
            return None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        for token in tokens:
            seen.setdefault(int(token), None)
    ids = tuple(seen)[:MAX_POOL]
    return TokenPool(ids) if ids else None
