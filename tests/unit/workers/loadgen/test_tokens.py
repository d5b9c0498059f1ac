"""The token pool: word ids become token ids the server's own tokenizer produces."""

from __future__ import annotations

import asyncio
import json

import httpx

from slotune.workers.loadgen.generate.datasets import VOCABULARY
from slotune.workers.loadgen.generate.tokens import MAX_POOL, TokenPool, fetch_token_pool


def _tokenizer(max_words: int | None = None, status: int = 200) -> httpx.MockTransport:
    """A /tokenize that gives each word its vocabulary index × 3 (and refuses long texts)."""
    index = {w: i for i, w in enumerate(VOCABULARY)}

    def handle(request: httpx.Request) -> httpx.Response:
        if status != 200:
            return httpx.Response(status, json={"detail": "Not Found"})
        words = json.loads(request.content)["prompt"].split()
        if max_words is not None and len(words) > max_words:
            return httpx.Response(400, json={"error": {"message": "prompt too long"}})
        return httpx.Response(200, json={"tokens": [index[w] * 3 for w in words]})

    return httpx.MockTransport(handle)


def _fetch(transport: httpx.MockTransport) -> TokenPool | None:
    async def go() -> TokenPool | None:
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as client:
            return await fetch_token_pool(client, "m")

    return asyncio.run(go())


def test_pool_holds_distinct_ids_in_order_and_maps_word_ids_stably() -> None:
    pool = _fetch(_tokenizer())
    assert pool is not None and len(pool.ids) == MAX_POOL
    assert pool.ids[:3] == (0, 3, 6)
    ids = pool.token_ids([5, 6, 5, MAX_POOL + 5])
    assert ids == [15, 18, 15, 15]  # same word id, same token id: shared prefixes stay shared


def test_a_server_that_refuses_long_texts_is_asked_in_smaller_pieces() -> None:
    pool = _fetch(_tokenizer(max_words=40))
    assert pool is not None and len(pool.ids) > 500


def test_a_server_without_tokenize_gets_text() -> None:
    assert _fetch(_tokenizer(status=404)) is None
