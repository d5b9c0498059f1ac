"""Datasets: turn a dataset config and a seed into the requests to send (prompts + lengths).

A registry keyed on the config's ``kind`` (the pydantic discriminator) maps each dataset
to its sampler. A synthetic prompt is a sequence of *word ids* — indices into a fixed
vocabulary — sized in tokens: the runner sends it as token ids of the server's own
tokenizer (one word id → one token id, see :mod:`slotune.workers.loadgen.generate.tokens`), so a
512-token prompt is 512 tokens to the server, whatever its tokenizer, and identical leading ids
share prefix-cache blocks. As text (``prompt``: one word per id) it is what the simulated engine,
whose tokens are words, reads the same way.

Shared parts of a dataset (a common prefix, the prefix pool) come from the seed alone;
per-request parts come from ``(seed, stream)``, so warm-up requests (stream 1) never
shift the measured ones (stream 0). A Mooncake trace's blocks come from
``(seed, stream, hash_id)``: shared wherever the trace shares them, and its warm-up
requests, of the trace's own shapes, never warm the measured requests' blocks.

File datasets in vLLM's formats (``sharegpt``, ``custom``) are real text: their lengths
in tokens, and a custom prompt's chat template, come from a :class:`TextTokenizer` —
the server's own when benchmarking one (:mod:`slotune.workers.loadgen.generate.tokens`), words when
the engine is simulated. They are shuffled and topped up with Python's ``random`` seeded as vLLM
seeds it, so both tools draw the same prompts in the same order; their warm-up is the first measured
request repeated, as ``vllm bench serve --num-warmups`` does (:func:`sample_run`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from slotune.workers.contracts import (
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
    "check_dataset_file",
    "dataset_kinds",
    "relabel",
    "sample_requests",
    "sample_run",
    "words",
]

MEASURED_STREAM = 0
WARMUP_STREAM = 1
_RELABEL_STREAM = 0x72656C61  # keeps the relabelling permutation apart from the samples


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
    path = files.resolve(cfg.path)
    sessions = _sessions(cfg, files.read(path, "ShareGPT"), files.tokenizer,
                         f"ShareGPT file {path}")
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


def _sessions(cfg: MultiTurnDataset, text: str, tokenizer: TextTokenizer,
              label: str) -> list[list[tuple[str, int]]]:
    """A ShareGPT file's conversations as sessions: (message, reply length) per human
    turn, up to ``max_turns``; those with fewer than ``min_turns`` are skipped."""
    sessions: list[list[tuple[str, int]]] = []
    for entry in _sharegpt_entries(text, label):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        pairs: list[tuple[str, int]] = []
        for ask, reply in zip(turns[::2], turns[1::2], strict=False) if isinstance(
                turns, list) else ():
            ask_text = ask.get("value") if isinstance(ask, dict) else None
            reply_text = reply.get("value") if isinstance(reply, dict) else None
            if not isinstance(ask_text, str) or not isinstance(reply_text, str):
                break
            pairs.append((ask_text, max(1, tokenizer.count(reply_text))))
        if len(pairs) >= cfg.min_turns:
            sessions.append(pairs[:cfg.max_turns])
    if not sessions:
        raise DatasetError(f"{label}: no conversation with at least {cfg.min_turns} human "
                           "turns each answered (min_turns)")
    return sessions


def _think(cfg: MultiTurnDataset, rng: random.Random) -> float:
    if cfg.think_time == "constant" or cfg.think_time_s == 0:
        return cfg.think_time_s
    return rng.expovariate(1.0 / cfg.think_time_s)


def _trace(
    cfg: TraceDataset, n: int, seed: int, stream: int, files: _Files
) -> list[RequestSpec]:
    path = files.resolve(cfg.path)
    _shared, rng = _rngs(seed, stream)
    entries: list[RequestSpec] = []
    for row in _trace_rows(files.read(path, "trace"), str(path), cfg.use_trace_arrivals):
        if row.prompt is None:
            spec = _synthetic(_ids(rng, row.prompt_len), row.output_len)
            entries.append(RequestSpec(spec.prompt, spec.prompt_len, row.output_len,
                                       row.arrival, spec.word_ids))
        else:
            entries.append(RequestSpec(row.prompt, row.prompt_len, row.output_len, row.arrival))
    if stream == WARMUP_STREAM:  # warm up on the trace's own requests, sent back to back
        return [
            RequestSpec(e.prompt, e.prompt_len, e.output_len, word_ids=e.word_ids)
            for e in entries[:n]
        ]
    return entries[:n]


@dataclass(frozen=True, slots=True)
class _TraceRow:
    prompt: str | None
    """The line's text (None: ``prompt_len`` tokens of the seed's words)."""
    prompt_len: int
    output_len: int
    arrival: float | None


def _trace_rows(text: str, label: str, arrivals: bool) -> list[_TraceRow]:
    """Every request of a ``trace`` file, each line checked."""
    rows: list[_TraceRow] = []
    for lineno, line in _lines(text):
        where = f"{label}: line {lineno}"
        row = _json_object(line, where)
        offset = row.get("offset_s", row.get("timestamp"))
        output_len = row.get("output_len")
        if not isinstance(output_len, int) or isinstance(output_len, bool) or output_len < 1:
            raise DatasetError(f"{where}: field 'output_len' must be an integer >= 1, got "
                               f"{_kind(output_len)}")
        if arrivals and (not isinstance(offset, int | float) or isinstance(offset, bool)
                         or not 0 <= offset < math.inf):
            raise DatasetError(f"{where}: field 'offset_s' must be a number >= 0, got "
                               f"{_kind(offset)}")
        arrival = float(offset) if arrivals and isinstance(offset, int | float) else None
        prompt, prompt_len = row.get("prompt"), row.get("prompt_len")
        if isinstance(prompt, str):
            counted = prompt_len if isinstance(prompt_len, int) else len(prompt.split())
            rows.append(_TraceRow(prompt, counted, output_len, arrival))
        elif isinstance(prompt_len, int) and not isinstance(prompt_len, bool) \
                and 1 <= prompt_len <= MAX_TOKENS:
            rows.append(_TraceRow(None, prompt_len, output_len, arrival))
        else:
            raise DatasetError(f"{where}: needs 'prompt' (text) or 'prompt_len' (an integer "
                               f"in [1, {MAX_TOKENS}])")
    if not rows:
        raise DatasetError(f"{label}: holds no requests")
    return rows


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a JSONL file, numbered from 1."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield lineno, line


def _json_object(line: str, where: str) -> dict[str, Any]:
    """One JSONL line that must be an object (a trace's request)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not valid JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {_kind(row)}")
    return row


def _kind(value: Any) -> str:
    """What a bad value is, never the value itself: the file is data someone else may have
    written, and a message goes where its reader may not read the file."""
    if value is None:
        return "nothing (missing or null)"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "infinity"
    if isinstance(value, int | float):
        if value < 0:
            return "a negative number"
        if value != int(value):
            return "a fractional number"
        return "0" if value == 0 else "a number out of range"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _mooncake_trace(
    cfg: MooncakeTraceDataset, n: int, seed: int, stream: int, files: _Files
) -> list[RequestSpec]:
    path = files.resolve(cfg.path)
    blocks = _Blocks(seed, stream, cfg.block_size)
    _shared, rng = _rngs(seed, stream)  # the prompts of lines without hash ids
    arrivals = cfg.use_trace_arrivals and stream != WARMUP_STREAM
    out: list[RequestSpec] = []
    for row in _mooncake_rows(files.read(path, "trace"), str(path), cfg, arrivals, limit=n):
        if row.hash_ids:
            ids = np.concatenate([blocks.get(h) for h in row.hash_ids])[:row.input_len]
        else:
            ids = _ids(rng, row.input_len)
        spec = _synthetic(ids, row.output_len)
        out.append(RequestSpec(spec.prompt, spec.prompt_len, row.output_len, row.arrival,
                               spec.word_ids))
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


@dataclass(frozen=True, slots=True)
class _MooncakeRow:
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...]
    arrival: float | None
    """Seconds from the trace's start (None: the trace's arrivals are not used)."""


def _mooncake_rows(text: str, label: str, cfg: MooncakeTraceDataset, arrivals: bool, *,
                   limit: int | None = None) -> Iterator[_MooncakeRow]:
    """A Mooncake trace's requests, each line checked (the first ``limit`` of them): its
    lengths, its hash ids against its length, and — when its arrivals are the schedule —
    its timestamp, which never goes back in time."""
    keys, size = cfg.fields, cfg.block_size
    count, last = 0, 0.0
    last_line = 0
    for lineno, line in _lines(text):
        if limit is not None and count >= limit:
            return
        where = f"{label}: line {lineno}"
        row = _json_object(line, where)
        input_len = _count(row, keys.input_length, where)
        output_len = _count(row, keys.output_length, where)
        hash_ids = row.get(keys.hash_ids, [])
        if not isinstance(hash_ids, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hash_ids):
            what = _kind(hash_ids) if not isinstance(hash_ids, list) else "a list holding " + \
                next(_kind(h) for h in hash_ids if not isinstance(h, int) or
                     isinstance(h, bool) or h < 0)
            raise DatasetError(f"{where}: field {keys.hash_ids!r} must be a list of integers "
                               f">= 0 (one per {size}-token block), got {what}")
        if hash_ids and not (len(hash_ids) - 1) * size < input_len <= len(hash_ids) * size:
            need = -(-input_len // size)
            raise DatasetError(
                f"{where}: field {keys.input_length!r} takes {need} block(s) of {size} "
                f"tokens, but field {keys.hash_ids!r} names {len(hash_ids)}; a trace's hash "
                f"ids cover its prompt, the last block cut short ({len(hash_ids)} ids fit "
                f"{(len(hash_ids) - 1) * size + 1}–{len(hash_ids) * size} tokens). Is "
                "block_size (--timed-trace-chunk-hash-size) the trace's own?")
        arrival: float | None = None
        if arrivals:
            stamp = row.get(keys.timestamp)
            if (not isinstance(stamp, int | float) or isinstance(stamp, bool)
                    or not 0 <= stamp < math.inf):  # JSON from Python may hold NaN, Infinity
                raise DatasetError(f"{where}: field {keys.timestamp!r} must be a number >= 0 "
                                   f"(the arrival, in units of {cfg.timestamp_s:g} s), got "
                                   f"{_kind(stamp)}; or set use_trace_arrivals off")
            if stamp < last:
                raise DatasetError(f"{where}: field {keys.timestamp!r} goes back in time "
                                   f"(earlier than line {last_line}'s); a trace lists its "
                                   "requests in arrival order")
            last, last_line = float(stamp), lineno
            arrival = float(stamp) * cfg.timestamp_s
        count += 1
        yield _MooncakeRow(input_len, output_len, tuple(hash_ids), arrival)
    if count == 0:
        raise DatasetError(f"{label}: holds no requests")


def _count(row: dict[str, Any], key: str, where: str) -> int:
    value = row.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TOKENS:
        raise DatasetError(f"{where}: field {key!r} must be an integer in [1, {MAX_TOKENS}] "
                           f"(tokens), got {_kind(value)}")
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
        return _read(path, f"{what} file {path}")


def _read(path: Path, label: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{label}: cannot be read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{label}: not UTF-8 text ({exc.reason} at byte "
                           f"{exc.start})") from exc


# vLLM's pruning of ShareGPT conversations (``is_valid_sequence``).
_MIN_LEN, _MAX_PROMPT_LEN, _MAX_TOTAL_LEN = 4, 1024, 2048


def _sharegpt_entries(text: str, label: str) -> list[Any]:
    """A ShareGPT-format file's list of conversations."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{label}: not valid JSON ({exc.msg} at line "
                           f"{exc.lineno})") from exc
    if not isinstance(data, list):
        raise DatasetError(f"{label}: expected a JSON list of conversations, got "
                           f"{_kind(data)}")
    return data


def _sharegpt_pairs(text: str, label: str) -> list[tuple[int, str, str]]:
    """Every conversation of two turns or more: its number in the file, its prompt and its
    reply; one whose first two turns are not text is refused."""
    pairs = []
    for number, entry in enumerate(_sharegpt_entries(text, label)):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        prompt, reply = (t.get("value") if isinstance(t, dict) else None for t in turns[:2])
        if not isinstance(prompt, str) or not isinstance(reply, str):
            raise DatasetError(f"{label}: conversation {number}: each turn needs a text "
                               "'value'")
        pairs.append((number, prompt, reply))
    if not pairs:
        raise DatasetError(f"{label}: no conversation with two turns")
    return pairs


def _sharegpt(
    cfg: ShareGPTDataset, n: int, seed: int, _: int, files: _Files
) -> list[RequestSpec]:
    path = files.resolve(cfg.path)
    pairs = _sharegpt_pairs(files.read(path, "ShareGPT"), f"ShareGPT file {path}")
    if cfg.shuffle:
        random.Random(seed).shuffle(pairs)
    out: list[RequestSpec] = []
    for _number, prompt, reply in pairs:
        if len(out) >= n:
            break
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


def _custom_rows(cfg: CustomDataset, path: Path, label: str) -> list[dict[str, Any]]:
    """Every line of a custom JSONL file, checked: a text ``prompt``, and an integer
    ``output_tokens`` where the dataset takes each line's own."""
    if path.suffix != ".jsonl":
        raise DatasetError(f"{label}: must be JSONL (a .jsonl file), as vLLM's custom "
                           "dataset reads")
    rows: list[dict[str, Any]] = []
    for lineno, line in _lines(_read(path, label)):
        where = f"{label}: line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise DatasetError(f"{where}: each line needs a text 'prompt'")
        if cfg.output_len == -1:
            tokens = row.get("output_tokens")
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
                raise DatasetError(
                    f"{where}: with output_len -1 (--custom-output-len -1) each line needs "
                    f"an integer 'output_tokens' >= 1, got {_kind(tokens)}")
        rows.append(row)
    if not rows:
        raise DatasetError(f"{label}: holds no prompts")
    return rows


def _custom(
    cfg: CustomDataset, n: int, seed: int, _: int, files: _Files
) -> list[RequestSpec]:
    path = files.resolve(cfg.path)
    rows = _custom_rows(cfg, path, f"custom file {path}")
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


def check_dataset_file(config: DatasetConfig, path: Path, label: str) -> None:
    """Read the file ``config`` names (at ``path``) as a trial reads it, every line or
    conversation checked, and raise :class:`DatasetError` for the first thing a trial
    could not use — so a bad file is refused where it is named, not on every worker.
    Messages start with ``label`` (how the caller names the file) and give the line and
    the field, never the file's content. Prompts are not built (a trace of a million
    lines is checked in seconds)."""
    if isinstance(config, CustomDataset):
        _custom_rows(config, path, label)
        return
    text = _read(path, label)
    if isinstance(config, MooncakeTraceDataset):
        for _row in _mooncake_rows(text, label, config, config.use_trace_arrivals):
            pass
    elif isinstance(config, TraceDataset):
        _trace_rows(text, label, config.use_trace_arrivals)
    elif isinstance(config, ShareGPTDataset):
        _sharegpt_pairs(text, label)
    elif isinstance(config, MultiTurnDataset):
        _sessions(config, text, WORD_TOKENIZER, label)


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
    token_seed: int | None = None,
) -> list[RequestSpec]:
    """``n`` requests of ``config`` for ``seed``: deterministic, in order.

    ``warmup=True`` draws from a separate stream of the same seed (shared prefixes
    stay shared). ``base_dir`` resolves a relative file path; ``tokenizer`` counts and
    templates the text of the file datasets in vLLM's formats. ``token_seed`` relabels
    the synthetic prompts' tokens (:func:`relabel`).
    """
    if n <= 0:
        return []
    sampler = _REGISTRY.get(config.kind)
    if sampler is None:
        raise DatasetError(f"unknown dataset kind {config.kind!r}; valid: {', '.join(_REGISTRY)}")
    stream = WARMUP_STREAM if warmup else MEASURED_STREAM
    specs = sampler(config, n, seed, stream, _Files(base_dir, tokenizer))
    return specs if token_seed is None else relabel(specs, token_seed)


def relabel(specs: Sequence[RequestSpec], token_seed: int) -> list[RequestSpec]:
    """The same requests with other tokens: every synthetic prompt's word ids mapped
    through one permutation of the vocabulary drawn from ``token_seed``.

    Lengths, arrivals, sessions and which prompts share which prefix stay exactly as
    sampled (a permutation keeps equal ids equal and different ones different), so an
    engine's timing is the same, while no block of the relabelled prompts matches a block
    of the originals: a prefix cache warmed by one relabelling serves nothing of another.
    A capacity probe sends the workload's one sample at every rate so (common random
    numbers), each probe with tokens of its own. Text prompts (a trace's, ShareGPT's)
    are left as they are."""
    permutation = np.random.default_rng([token_seed, _RELABEL_STREAM]).permutation(
        len(VOCABULARY))
    out: list[RequestSpec] = []
    for spec in specs:
        if not spec.word_ids:
            out.append(spec)
            continue
        ids = tuple(int(permutation[i % len(VOCABULARY)]) for i in spec.word_ids)
        out.append(dataclasses.replace(spec, prompt=words(ids), word_ids=ids))
    return out


def sample_run(
    config: DatasetConfig,
    n: int,
    n_warmup: int,
    seed: int,
    *,
    base_dir: Path | None = None,
    tokenizer: TextTokenizer = WORD_TOKENIZER,
    token_seed: int | None = None,
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """A run's measured requests and its warm-up ones.

    The ShareGPT and custom files warm up as ``vllm bench serve --num-warmups`` does, on
    the first measured request repeated: taken from the measured ones, so the file is
    read and tokenized once. Every other dataset draws its warm-up stream.
    """
    measured = sample_requests(config, n, seed, base_dir=base_dir, tokenizer=tokenizer,
                               token_seed=token_seed)
    if isinstance(config, ShareGPTDataset | CustomDataset):
        return measured, [measured[0]] * n_warmup if measured and n_warmup > 0 else []
    return measured, sample_requests(config, n_warmup, seed, warmup=True, base_dir=base_dir,
                                     tokenizer=tokenizer, token_seed=token_seed)
