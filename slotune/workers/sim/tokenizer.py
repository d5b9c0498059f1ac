"""A deterministic stand-in tokenizer: one whitespace-separated word is one token.

Token ids are a stable hash of the word (not Python's salted ``hash``), so the same text
gives the same ids in every process and identical prefixes share KV blocks. Generated
tokens are words too, so a later prompt that quotes an answer hits the cache as well.

What the simulated model "says" is a walk through a fixed, shuffled word list: a
request starts at a point given by its prompt and emits consecutive entries. Consecutive
entries make a generated block's token ids one slice of a precomputed table, which keeps
hashing generated blocks cheap in the virtual-time driver.
"""

from __future__ import annotations

import math
import random
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


@cache
def _word_walk() -> tuple[int, ...]:
    order = list(range(VOCAB_WORDS))
    random.Random(0x51_0_7E).shuffle(order)
    return tuple(order)


def output_start(request_key: int) -> int:
    """Where in the word walk a request's output begins."""
    return request_key % VOCAB_WORDS


def output_word(request_key: int, position: int) -> str:
    """The ``position``-th generated word of a request."""
    return f"w{_word_walk()[(output_start(request_key) + position) % VOCAB_WORDS]}"


@cache
def output_id_walk(vocab_size: int) -> tuple[int, ...]:
    """Token ids along the word walk, twice over, so any run of ids is one slice."""
    ids = tuple(word_to_id(f"w{w}", vocab_size) for w in _word_walk())
    return ids + ids


def output_token_ids(request_key: int, start: int, stop: int, vocab_size: int) -> tuple[int, ...]:
    """Token ids of generated positions ``start .. stop - 1`` (at most VOCAB_WORDS)."""
    first = (output_start(request_key) + start) % VOCAB_WORDS
    return output_id_walk(vocab_size)[first:first + stop - start]


def output_token_id(request_key: int, position: int, vocab_size: int) -> int:
    return output_token_ids(request_key, position, position + 1, vocab_size)[0]


def request_key(prompt_ids: Sequence[int]) -> int:
    """A stable per-prompt key that seeds what the simulated model "says".

    A function of the prompt alone, not of the engine's ``--sim-seed``: what a model
    answers under greedy decoding is a property of its weights, the same in every run and
    every confirmation repeat (the seed varies the run-to-run noise of the timings only),
    so a sweep's quality baseline answers for all of them. Python's hash of a tuple of
    ints is not salted, so the key is the same in every process (unlike a hash of strings).
    """
    return hash((0, len(prompt_ids), tuple(prompt_ids[:64]))) & 0xFFFF_FFFF


def natural_length(request_key: int) -> int:
    """Where the simulated model stops on its own (its EOS): lognormal, median ≈ 200."""
    rng = random.Random(request_key)
    return max(1, int(math.exp(rng.gauss(math.log(200.0), 0.8))))
