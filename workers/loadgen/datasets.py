"""Datasets: turn a dataset config and a seed into the requests to send (prompts + lengths).

A registry keyed on the config's ``kind`` (the pydantic discriminator) maps each dataset
to its sampler. A synthetic prompt is a sequence of *word ids* — indices into a fixed
vocabulary — sized in tokens: the runner sends it as token ids of the server's own
tokenizer (one word id → one token id, see :mod:`workers.loadgen.tokens`), so a 512-token
prompt is 512 tokens to the server, whatever its tokenizer, and identical leading ids
share prefix-cache blocks. As text (``prompt``: one word per id) it is what the
simulated engine, whose tokens are words, reads the same way.

Shared parts of a dataset (a common prefix, the prefix pool) come from the seed alone;
per-request parts come from ``(seed, stream)``, so warm-up requests (stream 1) never
shift the measured ones (stream 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workers.contracts import (
    DatasetConfig,
    PrefixRepetitionDataset,
    RandomDataset,
    ShareGPTLikeDataset,
    TraceDataset,
)

__all__ = [
    "VOCABULARY",
    "DatasetError",
    "RequestSpec",
    "dataset_kinds",
    "sample_requests",
    "words",
]

MEASURED_STREAM = 0
WARMUP_STREAM = 1


class DatasetError(ValueError):
    """A dataset could not be built (bad trace file, …); the message says where and why."""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send: its prompt, its lengths, and (for traces) its own arrival.

    ``word_ids`` is set for a synthetic prompt (its ``prompt`` text is those words), and
    empty for a trace's own text, which is sent as it is and counted by the server.
    """

    prompt: str
    prompt_len: int
    output_len: int
    arrival_offset_s: float | None = None
    word_ids: tuple[int, ...] = ()


def _build_vocabulary() -> tuple[str, ...]:
    consonants = "bdfghjklmnprstvz"
    vowels = "aeiou"
    syllables = [c + v for c in consonants for v in vowels]  # 80
    return tuple(a + b for a in syllables for b in syllables)  # 6400 two-syllable words


VOCABULARY: tuple[str, ...] = _build_vocabulary()


def words(word_ids: np.ndarray[Any, Any] | Sequence[int]) -> str:
    """The prompt text for a sequence of word ids (one word per id)."""
    return " ".join(VOCABULARY[int(i) % len(VOCABULARY)] for i in word_ids)


def _ids(rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
    return rng.integers(0, len(VOCABULARY), size=n)


def _synthetic(ids: np.ndarray[Any, Any], output_len: int) -> RequestSpec:
    word_ids = tuple(int(i) for i in ids)
    return RequestSpec(words(word_ids), len(word_ids), output_len, word_ids=word_ids)


def _rngs(seed: int, stream: int) -> tuple[np.random.Generator, np.random.Generator]:
    return np.random.default_rng(seed), np.random.default_rng([seed, stream])


def _random(
    cfg: RandomDataset, n: int, seed: int, stream: int, _: Path | None
) -> list[RequestSpec]:
    shared, rng = _rngs(seed, stream)
    prefix = _ids(shared, cfg.prefix_len)
    r = cfg.range_ratio
    in_low = max(int(cfg.input_len * (1 - r)), 0 if cfg.prefix_len else 1)
    in_high = int(cfg.input_len * (1 + r))
    out_low = max(int(cfg.output_len * (1 - r)), 1)
    out_high = int(cfg.output_len * (1 + r))
    input_lens = rng.integers(in_low, in_high + 1, size=n)
    output_lens = rng.integers(out_low, out_high + 1, size=n)
    out: list[RequestSpec] = []
    for i in range(n):
        ids = np.concatenate([prefix, _ids(rng, int(input_lens[i]))])
        out.append(_synthetic(ids, int(output_lens[i])))
    return out


def _lognormal(
    rng: np.random.Generator, median: float, sigma: float, low: int, high: int, n: int
) -> np.ndarray[Any, Any]:
    raw = np.exp(rng.normal(math.log(median), sigma, size=n))
    return np.clip(np.rint(raw), low, high).astype(int)


def _sharegpt_like(
    cfg: ShareGPTLikeDataset, n: int, seed: int, stream: int, _: Path | None
) -> list[RequestSpec]:
    _shared, rng = _rngs(seed, stream)
    ins = _lognormal(rng, cfg.input_median, cfg.input_sigma, cfg.input_min, cfg.input_max, n)
    outs = _lognormal(
        rng, cfg.output_median, cfg.output_sigma, cfg.output_min, cfg.output_max, n
    )
    return [_synthetic(_ids(rng, int(ins[i])), int(outs[i])) for i in range(n)]


def _prefix_repetition(
    cfg: PrefixRepetitionDataset, n: int, seed: int, stream: int, _: Path | None
) -> list[RequestSpec]:
    shared, rng = _rngs(seed, stream)
    prefixes = [_ids(shared, cfg.prefix_len) for _ in range(cfg.num_prefixes)]
    choice = rng.integers(0, cfg.num_prefixes, size=n)
    out: list[RequestSpec] = []
    for i in range(n):
        ids = np.concatenate([prefixes[int(choice[i])], _ids(rng, cfg.suffix_len)])
        out.append(_synthetic(ids, cfg.output_len))
    return out


def _trace(
    cfg: TraceDataset, n: int, seed: int, stream: int, base: Path | None
) -> list[RequestSpec]:
    path = Path(cfg.path)
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"trace file {path}: cannot be read ({exc.strerror})") from exc
    _shared, rng = _rngs(seed, stream)
    entries: list[RequestSpec] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        entries.append(_trace_entry(line, f"{path}:{lineno}", rng, cfg.use_trace_arrivals))
    if not entries:
        raise DatasetError(f"trace file {path}: holds no requests")
    if stream == WARMUP_STREAM:  # warm up on the trace's own requests, sent back to back
        return [
            RequestSpec(e.prompt, e.prompt_len, e.output_len, word_ids=e.word_ids)
            for e in entries[:n]
        ]
    return entries[:n]


def _trace_entry(line: str, where: str, rng: np.random.Generator, arrivals: bool) -> RequestSpec:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not valid JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
    offset = row.get("offset_s", row.get("timestamp"))
    output_len = row.get("output_len")
    if not isinstance(output_len, int) or isinstance(output_len, bool) or output_len < 1:
        raise DatasetError(
            f"{where}: field 'output_len' must be an integer >= 1, got {output_len!r}"
        )
    if arrivals and (not isinstance(offset, int | float) or isinstance(offset, bool) or offset < 0):
        raise DatasetError(f"{where}: field 'offset_s' must be a number >= 0, got {offset!r}")
    if isinstance(row.get("prompt"), str):
        prompt = row["prompt"]
        prompt_len = len(prompt.split())
        if isinstance(row.get("prompt_len"), int):
            prompt_len = row["prompt_len"]
    elif isinstance(row.get("prompt_len"), int) and row["prompt_len"] >= 1:
        spec = _synthetic(_ids(rng, row["prompt_len"]), output_len)
        arrival = float(offset) if arrivals and isinstance(offset, int | float) else None
        return RequestSpec(spec.prompt, spec.prompt_len, output_len, arrival, spec.word_ids)
    else:
        raise DatasetError(f"{where}: needs 'prompt' (text) or 'prompt_len' (integer >= 1)")
    arrival = float(offset) if arrivals and isinstance(offset, int | float) else None
    return RequestSpec(prompt, prompt_len, output_len, arrival)


_Sampler = Callable[[Any, int, int, int, Path | None], list[RequestSpec]]
_REGISTRY: dict[str, _Sampler] = {
    "random": _random,
    "sharegpt-like": _sharegpt_like,
    "prefix_repetition": _prefix_repetition,
    "trace": _trace,
}


def dataset_kinds() -> list[str]:
    """The dataset kinds a workload may name."""
    return list(_REGISTRY)


def sample_requests(
    config: DatasetConfig,
    n: int,
    seed: int,
    *,
    warmup: bool = False,
    base_dir: Path | None = None,
) -> list[RequestSpec]:
    """``n`` requests of ``config`` for ``seed``: deterministic, in order.

    ``warmup=True`` draws from a separate stream of the same seed (shared prefixes
    stay shared). ``base_dir`` resolves a relative trace path.
    """
    if n <= 0:
        return []
    sampler = _REGISTRY.get(config.kind)
    if sampler is None:
        raise DatasetError(f"unknown dataset kind {config.kind!r}; valid: {', '.join(_REGISTRY)}")
    return sampler(config, n, seed, WARMUP_STREAM if warmup else MEASURED_STREAM, base_dir)
