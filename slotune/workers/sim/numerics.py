"""Lossy numerics, modelled: a seeded token-flip rate per quantisation and KV-cache dtype.

The simulated model "says" a deterministic walk of words per prompt
(:mod:`slotune.workers.sim.tokenizer`). With lossless numerics (bf16 weights, an ``auto`` KV
cache) that is its greedy answer. Lossy numerics perturb the logits; under greedy
decoding a perturbation matters when it changes the arg-max, and from the first changed
token on the answer is conditioned on a different prefix, so it diverges. The model:

* each generated token flips with probability :func:`flip_rate` — the rates of the
  weight format and of the KV dtype combined (1 − Π(1 − rate)), from :data:`FLIP_RATES`;
* the first flipped position of a request is geometric in that rate, drawn from its
  prompt alone (not the engine's ``--sim-seed``: which tokens flip is a property of the
  weights, not of run-to-run noise), so it is the same in every process, run and repeat;
  from there the answer continues from another point of the word walk.

The rates are order-of-magnitude figures in line with published greedy-agreement
results — fp8 weights and fp8 KV move very few tokens, 4-bit weight-only schemes
(AWQ, GPTQ) markedly more, e5m2 (2 mantissa bits) more than e4m3 — not measurements of
any one model. Speculative decoding keeps the target model's distribution (rejection
sampling), so it flips nothing here. What a flip does not model: the answer's length
(where it stops) stays the lossless one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from slotune.workers.sim import tokenizer

__all__ = ["FLIP_RATES", "Divergence", "answer_words", "divergence", "flip_rate",
           "greedy_answer"]

FLIP_RATES: dict[str, dict[str, float]] = {
    "quantization": {"fp8": 0.001, "awq": 0.02, "gptq": 0.02},
    "kv_cache_dtype": {"fp8": 0.0005, "fp8_e4m3": 0.0005, "fp8_e5m2": 0.003},
}
"""Probability that one generated token differs from the lossless greedy answer."""
_SALT = 0x1055_7E57

Divergence = tuple[int, int]
"""(the first position that differs, the key the answer continues from there)."""


def flip_rate(quantization: str | None, kv_cache_dtype: str) -> float:
    """Per-token flip probability of a weight format and KV dtype together."""
    keep = 1.0
    for table, value in (("quantization", quantization), ("kv_cache_dtype", kv_cache_dtype)):
        keep *= 1.0 - FLIP_RATES[table].get(str(value), 0.0)
    return 1.0 - keep


def divergence(prompt_ids: Sequence[int], rate: float) -> Divergence | None:
    """Where the answer to a prompt first differs from the lossless one (None: nowhere)."""
    if rate <= 0.0:
        return None
    rng = random.Random(tokenizer.request_key(prompt_ids) ^ _SALT)
    u = rng.random()
    position = int(math.log1p(-u) / math.log1p(-rate))
    return position, rng.getrandbits(32)


def answer_words(key: int, diverged: Divergence | None, start: int, stop: int) -> list[str]:
    """The words a request with ``key`` says at output positions ``start .. stop - 1``."""
    if diverged is None:
        return [tokenizer.output_word(key, i) for i in range(start, stop)]
    at, other = diverged
    return [tokenizer.output_word(key if i < at else other, i) for i in range(start, stop)]


def greedy_answer(prompt_ids: Sequence[int], rate: float, max_tokens: int) -> list[str]:
    """The whole greedy answer to a prompt, as the server would stream it: its natural
    length capped at ``max_tokens``, lossy from its divergence point on."""
    key = tokenizer.request_key(prompt_ids)
    length = min(max_tokens, tokenizer.natural_length(key))
    return answer_words(key, divergence(prompt_ids, rate), 0, length)
