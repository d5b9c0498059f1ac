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
shift the measured ones (stream 0). A Mooncake trace's blocks come from
``(seed, stream, hash_id)``: shared wherever the trace shares them, and its warm-up
requests, of the trace's own shapes, never warm the measured requests' blocks.

File datasets in vLLM's formats (``sharegpt``, ``custom``) are real text: their lengths
in tokens, and a custom prompt's chat template, come from a :class:`TextTokenizer` —
the server's own when benchmarking one (:mod:`workers.loadgen.tokens`), words when the
engine is simulated. They are shuffled and topped up with Python's ``random`` seeded as
vLLM seeds it, so both tools draw the same prompts in the same order; their warm-up is
the first measured request repeated, as ``vllm bench serve --num-warmups`` does
(:func:`sample_run`).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from workers.contracts import (
    MAX_TOKENS,
    CustomDataset,
    DatasetConfig,
    MooncakeTraceDataset,
    MultiTurnDataset,
    PrefixRepetitionDataset,
    RandomDataset,
    ShareGPTDataset,
    ShareGPTLikeDataset,
    TraceDataset,
)

__all__ = [
    "VOCABULARY",
    "WORD_TOKENIZER",
    "DatasetError",
    "RequestSpec",
    "TextTokenizer",
    "dataset_kinds",
    "sample_requests",
    "sample_run",
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
    ``token_ids`` is a prompt already in the server's tokens (a custom prompt through
    its chat template), sent as they are to a completions endpoint; a chat endpoint gets
    ``prompt``, the text before the template (the server applies its own).
    """

    prompt: str
    prompt_len: int
    output_len: int
    arrival_offset_s: float | None = None
    word_ids: tuple[int, ...] = ()
    token_ids: tuple[int, ...] = ()
    session: int | None = None
    """A conversation's number (``multi_turn``): this request is one of its turns, sent
    after the previous turn's answer, its prompt that conversation plus this message."""
    turn: int = 1
    """Which turn of its session (1 = the first)."""
    think_time_s: float = 0.0
    """Engine seconds between the previous turn's answer and this turn."""


class TextTokenizer(Protocol):
    """Counts a text's tokens and renders a chat prompt, as the served model would."""

    def count(self, text: str) -> int:
        """Tokens in ``text``, special tokens included (vLLM's ``tokenizer(text)``)."""
        ...

    def chat_prompt(self, text: str, template_kwargs: dict[str, Any] | None) -> list[int]:
        """``text`` as one user turn through the chat template (generation prompt on)."""
        ...


class _WordTokenizer:
    """The simulated engine's tokenizer: one token per word, no chat template."""

    def count(self, text: str) -> int:
        return len(text.split())

    def chat_prompt(self, text: str, template_kwargs: dict[str, Any] | None) -> list[int]:
        raise DatasetError("no chat template to apply without a server's tokenizer; "
                           "set skip_chat_template (--skip-chat-template)")


WORD_TOKENIZER: TextTokenizer = _WordTokenizer()


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
    cfg: RandomDataset, n: int, seed: int, stream: int, _: _Files
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
    cfg: ShareGPTLikeDataset, n: int, seed: int, stream: int, _: _Files
) -> list[RequestSpec]:
    _shared, rng = _rngs(seed, stream)
    ins = _lognormal(rng, cfg.input_median, cfg.input_sigma, cfg.input_min, cfg.input_max, n)
    outs = _lognormal(
        rng, cfg.output_median, cfg.output_sigma, cfg.output_min, cfg.output_max, n
    )
    return [_synthetic(_ids(rng, int(ins[i])), int(outs[i])) for i in range(n)]


def _prefix_repetition(
    cfg: PrefixRepetitionDataset, n: int, seed: int, stream: int, _: _Files
) -> list[RequestSpec]:
    shared, rng = _rngs(seed, stream)
    prefixes = [_ids(shared, cfg.prefix_len) for _ in range(cfg.num_prefixes)]
    if cfg.popularity == "zipf":
        weights = 1.0 / np.arange(1, cfg.num_prefixes + 1) ** cfg.zipf_s
        choice = rng.choice(cfg.num_prefixes, size=n, p=weights / weights.sum())
    else:  # vLLM's uniform draw, unchanged, so its requests stay the same for a seed
        choice = rng.integers(0, cfg.num_prefixes, size=n)
    out: list[RequestSpec] = []
    for i in range(n):
        ids = np.concatenate([prefixes[int(choice[i])], _ids(rng, cfg.suffix_len)])
        out.append(_synthetic(ids, cfg.output_len))
    return out


def _multi_turn(
    cfg: MultiTurnDataset, n: int, seed: int, stream: int, files: _Files
) -> list[RequestSpec]:
    """Sessions' turns in session order, each turn only its new message: the runner
    builds the conversation as answers come back. The warm-up stream is first turns sent
    on their own (a warm-up has no sessions)."""
    shared, rng = _rngs(seed, stream)
    system = _ids(shared, cfg.system_prompt_len)
    if cfg.path is not None:
        return _conversations(cfg, n, seed, stream, files, words(system) if len(system) else "")
    r = cfg.range_ratio
    in_low, in_high = max(int(cfg.input_len * (1 - r)), 1), int(cfg.input_len * (1 + r))
    out_low, out_high = max(int(cfg.output_len * (1 - r)), 1), int(cfg.output_len * (1 + r))
    out: list[RequestSpec] = []
    session = 0
    while len(out) < n:
        turns = 1 if stream == WARMUP_STREAM else int(
            rng.integers(cfg.min_turns, cfg.max_turns + 1))
        for turn in range(1, min(turns, n - len(out)) + 1):
            message = _ids(rng, int(rng.integers(in_low, in_high + 1)))
            ids = np.concatenate([system, message]) if turn == 1 else message
            think = 0.0 if turn == 1 else (
                cfg.think_time_s if cfg.think_time == "constant"
                else float(rng.exponential(cfg.think_time_s)) if cfg.think_time_s > 0 else 0.0)
            spec = _synthetic(ids, int(rng.integers(out_low, out_high + 1)))
            out.append(RequestSpec(
                spec.prompt, spec.prompt_len, spec.output_len, word_ids=spec.word_ids,
                session=None if stream == WARMUP_STREAM else session, turn=turn,
                think_time_s=think))
        session += 1
    return out


def _conversations(cfg: MultiTurnDataset, n: int, seed: int, stream: int, files: _Files,
                   system: str) -> list[RequestSpec]:
    """Sessions from a ShareGPT file's conversations: human turns as messages, each reply's
    length as that turn's output (:class:`MultiTurnDataset`)."""
    assert cfg.path is not None
    path, data = _sharegpt_file(cfg.path, files)
    sessions: list[list[tuple[str, int]]] = []
    for entry in data:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        pairs: list[tuple[str, int]] = []
        for ask, reply in zip(turns[::2], turns[1::2], strict=False) if isinstance(
                turns, list) else ():
            ask_text = ask.get("value") if isinstance(ask, dict) else None
            reply_text = reply.get("value") if isinstance(reply, dict) else None
            if not isinstance(ask_text, str) or not isinstance(reply_text, str):
                break
            pairs.append((ask_text, max(1, files.tokenizer.count(reply_text))))
        if len(pairs) >= cfg.min_turns:
            sessions.append(pairs[:cfg.max_turns])
    if not sessions:
        raise DatasetError(f"ShareGPT file {path}: no conversation with at least "
                           f"{cfg.min_turns} human turns each answered (min_turns)")
    random.Random(seed).shuffle(sessions)
    if stream == WARMUP_STREAM:  # from the other end: nothing measured is warmed into the cache
        sessions = [pairs[:1] for pairs in reversed(sessions)]
    out: list[RequestSpec] = []
    # a file with too few conversations is gone through again (the repeats hit the cache)
    for number, pairs in enumerate(itertools.cycle(sessions)):
        if len(out) >= n:
            break
        for turn, (text, output_len) in enumerate(pairs[:n - len(out)], start=1):
            prompt = f"{system} {text}" if turn == 1 and system else text
            out.append(RequestSpec(
                prompt, files.tokenizer.count(prompt), output_len,
                session=None if stream == WARMUP_STREAM else number, turn=turn,
                think_time_s=0.0 if turn == 1 else _think(
                    cfg, random.Random(f"{seed}-{stream}-{number}-{turn}"))))
    return out


def _think(cfg: MultiTurnDataset, rng: random.Random) -> float:
    if cfg.think_time == "constant" or cfg.think_time_s == 0:
        return cfg.think_time_s
    return rng.expovariate(1.0 / cfg.think_time_s)


def _trace(
    cfg: TraceDataset, n: int, seed: int, stream: int, files: _Files
) -> list[RequestSpec]:
    path = files.resolve(cfg.path)
    lines = files.read(path, "trace").splitlines()
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


def _json_object(line: str, where: str) -> dict[str, Any]:
    """One JSONL line that must be an object (a trace's request)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not valid JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def _trace_entry(line: str, where: str, rng: np.random.Generator, arrivals: bool) -> RequestSpec:
    row = _json_object(line, where)
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


def _mooncake_trace(
    cfg: MooncakeTraceDataset, n: int, seed: int, stream: int, files: _Files
) -> list[RequestSpec]:
    path = files.resolve(cfg.path)
    blocks = _Blocks(seed, stream, cfg.block_size)
    _shared, rng = _rngs(seed, stream)  # the prompts of lines without hash ids
    out: list[RequestSpec] = []
    for lineno, line in enumerate(files.read(path, "trace").splitlines(), start=1):
        if len(out) >= n:
            break
        if not line.strip():
            continue
        out.append(_mooncake_entry(line, f"{path}:{lineno}", cfg, blocks, rng,
                                   arrivals=cfg.use_trace_arrivals and stream != WARMUP_STREAM))
    if not out:
        raise DatasetError(f"trace file {path}: holds no requests")
    return out


class _Blocks:
    """A trace's blocks as word ids: block ``h`` is drawn from ``(seed, stream, h)`` once,
    so every request naming ``h`` gets the same tokens. The warm-up stream has blocks of
    its own: warming up must not put the measured requests' blocks in the cache."""

    def __init__(self, seed: int, stream: int, size: int) -> None:
        self._seed, self._stream, self._size = seed, stream, size
        self._cache: dict[int, np.ndarray[Any, Any]] = {}

    def get(self, hash_id: int) -> np.ndarray[Any, Any]:
        block = self._cache.get(hash_id)
        if block is None:
            rng = np.random.default_rng([self._seed, self._stream, _BLOCK_SALT, hash_id])
            block = self._cache[hash_id] = _ids(rng, self._size)
        return block


_BLOCK_SALT = 0x6D6F6F6E  # keeps block streams apart from the per-request streams


def _mooncake_entry(line: str, where: str, cfg: MooncakeTraceDataset, blocks: _Blocks,
                    rng: np.random.Generator, *, arrivals: bool) -> RequestSpec:
    row = _json_object(line, where)
    keys = cfg.fields
    input_len = _count(row, keys.input_length, where)
    output_len = _count(row, keys.output_length, where)
    hash_ids = row.get(keys.hash_ids, [])
    if not isinstance(hash_ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hash_ids):
        raise DatasetError(f"{where}: field {keys.hash_ids!r} must be a list of integers >= 0 "
                           f"(one per {cfg.block_size}-token block), got {hash_ids!r}")
    size = cfg.block_size
    if hash_ids and not (len(hash_ids) - 1) * size < input_len <= len(hash_ids) * size:
        need = -(-input_len // size)
        raise DatasetError(
            f"{where}: field {keys.input_length!r} is {input_len} tokens, which takes "
            f"{need} block(s) of {size}, but field {keys.hash_ids!r} names {len(hash_ids)}; "
            f"a trace's hash ids cover its prompt, the last block cut short "
            f"({len(hash_ids)} ids fit {(len(hash_ids) - 1) * size + 1}–"
            f"{len(hash_ids) * size} tokens). Is block_size (--timed-trace-chunk-hash-size) "
            "the trace's own?")
    offset: float | None = None
    if arrivals:
        stamp = row.get(keys.timestamp)
        if (not isinstance(stamp, int | float) or isinstance(stamp, bool)
                or not 0 <= stamp < math.inf):  # JSON from Python may hold NaN, Infinity
            raise DatasetError(f"{where}: field {keys.timestamp!r} must be a number >= 0 "
                               f"(the arrival, in units of {cfg.timestamp_s:g} s), got "
                               f"{stamp!r}; or set use_trace_arrivals off")
        offset = float(stamp) * cfg.timestamp_s
    if hash_ids:
        ids = np.concatenate([blocks.get(h) for h in hash_ids])[:input_len]
    else:
        ids = _ids(rng, input_len)
    spec = _synthetic(ids, output_len)
    return RequestSpec(spec.prompt, spec.prompt_len, output_len, offset, spec.word_ids)


def _count(row: dict[str, Any], key: str, where: str) -> int:
    value = row.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TOKENS:
        raise DatasetError(f"{where}: field {key!r} must be an integer in [1, {MAX_TOKENS}] "
                           f"(tokens), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class _Files:
    """Where a file dataset's relative path resolves, and who counts its tokens."""

    base: Path | None
    tokenizer: TextTokenizer

    def resolve(self, name: str) -> Path:
        path = Path(name)
        return self.base / path if not path.is_absolute() and self.base is not None else path

    def read(self, path: Path, what: str) -> str:
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DatasetError(f"{what} file {path}: cannot be read ({exc.strerror})") from exc
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{what} file {path}: not UTF-8 text ({exc.reason} at byte "
                               f"{exc.start})") from exc


# vLLM's pruning of ShareGPT conversations (``is_valid_sequence``).
_MIN_LEN, _MAX_PROMPT_LEN, _MAX_TOTAL_LEN = 4, 1024, 2048


def _sharegpt_file(name: str, files: _Files) -> tuple[Path, list[Any]]:
    """A ShareGPT-format file: its resolved path and its list of conversations."""
    path = files.resolve(name)
    try:
        data = json.loads(files.read(path, "ShareGPT"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"ShareGPT file {path}: not valid JSON ({exc.msg} at line "
                           f"{exc.lineno})") from exc
    if not isinstance(data, list):
        raise DatasetError(f"ShareGPT file {path}: expected a JSON list of conversations, "
                           f"got {type(data).__name__}")
    return path, data


def _sharegpt(
    cfg: ShareGPTDataset, n: int, seed: int, _: int, files: _Files
) -> list[RequestSpec]:
    path, data = _sharegpt_file(cfg.path, files)
    entries = [e for e in data if isinstance(e, dict) and isinstance(e.get("conversations"), list)
               and len(e["conversations"]) >= 2]
    if cfg.shuffle:
        random.Random(seed).shuffle(entries)
    out: list[RequestSpec] = []
    for number, entry in enumerate(entries):
        if len(out) >= n:
            break
        turns = entry["conversations"]
        prompt, reply = (t.get("value") if isinstance(t, dict) else None for t in turns[:2])
        if not isinstance(prompt, str) or not isinstance(reply, str):
            raise DatasetError(f"ShareGPT file {path}: conversation {number} (after "
                               "shuffling): each turn needs a text 'value'")
        prompt_len = files.tokenizer.count(prompt)
        output_len = cfg.output_len or files.tokenizer.count(reply)
        if (prompt_len < _MIN_LEN or (cfg.output_len is None and output_len < _MIN_LEN)
                or prompt_len > _MAX_PROMPT_LEN or prompt_len + output_len > _MAX_TOTAL_LEN):
            continue
        out.append(RequestSpec(prompt, prompt_len, output_len))
    if not out:
        raise DatasetError(f"ShareGPT file {path}: no conversation with two turns and "
                           f"lengths vLLM keeps (prompt {_MIN_LEN}–{_MAX_PROMPT_LEN} tokens, "
                           f"prompt + output ≤ {_MAX_TOTAL_LEN})")
    return _file_requests(out, n, seed, cfg.oversample)


def _custom(
    cfg: CustomDataset, n: int, seed: int, _: int, files: _Files
) -> list[RequestSpec]:
    path = files.resolve(cfg.path)
    if path.suffix != ".jsonl":
        raise DatasetError(f"custom file {path}: must be JSONL (a .jsonl file), as vLLM's "
                           "custom dataset reads")
    rows: list[dict[str, Any]] = []
    for lineno, line in enumerate(files.read(path, "custom").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise DatasetError(f"{path}:{lineno}: each line needs a text 'prompt'")
        if cfg.output_len == -1:
            tokens = row.get("output_tokens")
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
                raise DatasetError(
                    f"{path}:{lineno}: with output_len -1 (--custom-output-len -1) each line "
                    f"needs an integer 'output_tokens' >= 1, got {tokens!r}")
        rows.append(row)
    if not rows:
        raise DatasetError(f"custom file {path}: holds no prompts")
    if cfg.shuffle:
        random.Random(seed).shuffle(rows)
    out: list[RequestSpec] = []
    for row in rows[:n]:
        text = row["prompt"]
        output_len = int(row["output_tokens"]) if cfg.output_len == -1 else cfg.output_len
        if cfg.skip_chat_template:
            out.append(RequestSpec(text, files.tokenizer.count(text), output_len))
            continue
        ids = tuple(files.tokenizer.chat_prompt(text, cfg.chat_template_kwargs))
        out.append(RequestSpec(text, len(ids), output_len, token_ids=ids))
    return _file_requests(out, n, seed, cfg.oversample)


def _file_requests(
    sampled: list[RequestSpec], n: int, seed: int, oversample: bool
) -> list[RequestSpec]:
    """vLLM's top-up: draws with replacement, reseeded."""
    if oversample and len(sampled) < n:
        rng = random.Random(seed)
        sampled = sampled + [rng.choice(sampled) for _ in range(n - len(sampled))]
    return sampled


_Sampler = Callable[[Any, int, int, int, _Files], list[RequestSpec]]
_REGISTRY: dict[str, _Sampler] = {
    "random": _random,
    "sharegpt-like": _sharegpt_like,
    "prefix_repetition": _prefix_repetition,
    "trace": _trace,
    "multi_turn": _multi_turn,
    "mooncake_trace": _mooncake_trace,
    "sharegpt": _sharegpt,
    "custom": _custom,
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
    tokenizer: TextTokenizer = WORD_TOKENIZER,
) -> list[RequestSpec]:
    """``n`` requests of ``config`` for ``seed``: deterministic, in order.

    ``warmup=True`` draws from a separate stream of the same seed (shared prefixes
    stay shared). ``base_dir`` resolves a relative file path; ``tokenizer`` counts and
    templates the text of the file datasets in vLLM's formats.
    """
    if n <= 0:
        return []
    sampler = _REGISTRY.get(config.kind)
    if sampler is None:
        raise DatasetError(f"unknown dataset kind {config.kind!r}; valid: {', '.join(_REGISTRY)}")
    stream = WARMUP_STREAM if warmup else MEASURED_STREAM
    return sampler(config, n, seed, stream, _Files(base_dir, tokenizer))


def sample_run(
    config: DatasetConfig,
    n: int,
    n_warmup: int,
    seed: int,
    *,
    base_dir: Path | None = None,
    tokenizer: TextTokenizer = WORD_TOKENIZER,
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """A run's measured requests and its warm-up ones.

    The ShareGPT and custom files warm up as ``vllm bench serve --num-warmups`` does, on
    the first measured request repeated: taken from the measured ones, so the file is
    read and tokenized once. Every other dataset draws its warm-up stream.
    """
    measured = sample_requests(config, n, seed, base_dir=base_dir, tokenizer=tokenizer)
    if isinstance(config, ShareGPTDataset | CustomDataset):
        return measured, [measured[0]] * n_warmup if measured and n_warmup > 0 else []
    return measured, sample_requests(config, n_warmup, seed, warmup=True, base_dir=base_dir,
                                     tokenizer=tokenizer)
