"""Prompts in the server's own tokens: word ids become token ids of its tokenizer.

A synthetic prompt is a sequence of word ids (:mod:`slotune.workers.loadgen.generate.datasets`).
Sent as text, a real tokenizer splits each word into several tokens (a "512-token" prompt was 1,500
tokens to Qwen's tokenizer), so the workload measured is not the one the space names. Instead the
runner asks the server to tokenize the vocabulary once (``POST /tokenize``, which ``vllm serve`` and
the simulated engine both serve) and keeps the distinct token ids in order of first appearance: word
id ``i`` is sent as token id ``pool[i % len(pool)]``. A prompt of N word ids is then exactly N
prompt tokens on the server, identical leading word ids stay identical token prefixes (prefix
caching sees the same sharing), and every id is one the tokenizer produces from ordinary text (no
special or unused ids). A server without ``/tokenize`` gets the text, and input lengths come from
what it reports (``usage.prompt_tokens``).

Text datasets (ShareGPT, custom JSONL) are counted, and templated, by the same server:
:class:`ServerTokenizer` asks ``/tokenize`` for a text's tokens (special tokens included,
as vLLM's client counts them) and for a chat turn through the served model's template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from slotune.workers.loadgen.generate.datasets import VOCABULARY, DatasetError

__all__ = ["ServerTokenizer", "TokenPool", "fetch_token_pool"]

MAX_POOL = 4096
"""Distinct ids kept: far more than random prompts need to never share a block by chance."""
WORDS_PER_CALL = 256
"""Words tokenized per call: stays under any server's max_model_len for one prompt."""
MIN_WORDS_PER_CALL = 8
MAX_CALLS = 40


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
    """The server's token pool, or None when it cannot tokenize (no ``/tokenize`` route).

    A server that refuses a chunk (a small ``max_model_len``) is asked again with half as
    many words, down to a few.
    """
    seen: dict[int, None] = {}
    words_per_call, start, calls = WORDS_PER_CALL, 0, 0
    while start < len(VOCABULARY) and len(seen) < MAX_POOL and calls < MAX_CALLS:
        chunk = VOCABULARY[start:start + words_per_call]
        calls += 1
        try:
            tokens = await _tokenize(client, model, " ".join(chunk))
        except _NoTokenizer:
            return None
        if tokens is None:  # refused this much text at once
            if words_per_call <= MIN_WORDS_PER_CALL:
                return _pool(seen)
            words_per_call //= 2
            continue
        for token in tokens:
            seen.setdefault(token, None)
        start += len(chunk)
    return _pool(seen)


class _NoTokenizer(Exception):
    """The server has no usable ``/tokenize`` (no such route, or it does not answer)."""


async def _tokenize(client: httpx.AsyncClient, model: str, text: str) -> list[int] | None:
    """The text's token ids; None when the server refused this text (too long, …)."""
    try:
        response = await client.post(
            "/tokenize", timeout=30.0,
            json={"model": model, "prompt": text, "add_special_tokens": False})
    except httpx.HTTPError as exc:
        raise _NoTokenizer from exc
    if response.status_code in (404, 405, 501):
        raise _NoTokenizer
    if response.status_code != 200:
        return None
    try:
        tokens = response.json().get("tokens")
    except (ValueError, AttributeError):
        raise _NoTokenizer from None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise _NoTokenizer
    return [int(t) for t in tokens]


def _pool(seen: dict[int, None]) -> TokenPool | None:
    ids = tuple(seen)[:MAX_POOL]
    return TokenPool(ids) if ids else None


class ServerTokenizer:
    """A :class:`~slotune.workers.loadgen.generate.datasets.TextTokenizer` that asks the
    server (``/tokenize``).

    Blocking: the runner samples a text dataset in a worker thread before measuring.
    """

    def __init__(self, base_url: str, model: str, headers: Mapping[str, str] | None = None,
                 *, verify: bool = True) -> None:
        self._client = httpx.Client(base_url=base_url, headers=dict(headers or {}),
                                    timeout=30.0, verify=verify)
        self._model = model

    def close(self) -> None:
        self._client.close()

    def _tokens(self, body: dict[str, Any], what: str) -> list[int]:
        try:
            response = self._client.post("/tokenize", json={"model": self._model, **body})
        except httpx.HTTPError as exc:
            raise DatasetError(f"cannot count {what}: the server's /tokenize did not answer "
                               f"({type(exc).__name__})") from exc
        if response.status_code in (404, 405, 501):
            raise DatasetError(f"cannot count {what}: the server has no /tokenize (vLLM's "
                               "route); this dataset needs the server's tokenizer")
        if response.status_code != 200:
            detail = response.text[:300].strip()
            raise DatasetError(f"cannot count {what}: /tokenize answered HTTP "
                               f"{response.status_code}: {detail}")
        tokens = response.json().get("tokens") if response.headers.get(
            "content-type", "").startswith("application/json") else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise DatasetError(f"cannot count {what}: /tokenize returned no token list")
        return [int(t) for t in tokens]

    def count(self, text: str) -> int:
        return len(self._tokens({"prompt": text}, "a prompt's tokens"))

    def chat_prompt(self, text: str, template_kwargs: dict[str, Any] | None) -> list[int]:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}],
                                "add_generation_prompt": True}
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        return self._tokens(body, "a prompt through the chat template (pass "
                                  "--skip-chat-template if the model has none)")
