"""A deterministic stand-in tokenizer: one whitespace-separated word is one token.

Token ids are a stable hash of the word (not Python's salted ``hash``), so the same text
gives the same ids in every process and identical prefixes share KV blocks. Generated
tokens are words too, so a later prompt that quotes an answer hits the cache as well.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import cache

VOCAB_WORDS = 32000
"""Size of the simulator's output vocabulary (the model's real vocab only sizes memory)."""


def word_to_id(word: str, vocab_size: int) -> int:
    return zlib.crc32(word.encode("utf-8")) % vocab_size


def encode(text: str, vocab_size: int) -> list[int]:
    """Token ids of a text: one id per whitespace-separated word."""
    return [zlib.crc32(w.encode("utf-8")) % vocab_size for w in text.split()]


def output_word(request_key: int, position: int) -> str:
    """The ``position``-th generated word of a request: deterministic, varied, readable."""
    return f"w{output_word_index(request_key, position)}"


def output_word_index(request_key: int, position: int) -> int:
    return (request_key * 1_000_003 + position * 7_919) % VOCAB_WORDS


@cache
def output_id_table(vocab_size: int) -> tuple[int, ...]:
    """Token id of every output word, so generated blocks hash without re-encoding text."""
    return tuple(word_to_id(f"w{i}", vocab_size) for i in range(VOCAB_WORDS))


def output_token_id(request_key: int, position: int, vocab_size: int) -> int:
    return output_id_table(vocab_size)[output_word_index(request_key, position)]


def request_key(prompt_ids: Sequence[int], seed: int) -> int:
    """A stable per-prompt key that seeds what the simulated model "says"."""
    return zlib.crc32(bytes(str((seed, len(prompt_ids), tuple(prompt_ids[:64]))), "ascii"))
