"""Mooncake-format traces: converting a request log into one, and the sample that ships.

The format (kvcache-ai/Mooncake, ``FAST25-release``) is JSONL, one request a line:
``{"timestamp": ms from the trace's start, "input_length", "output_length", "hash_ids"}``,
where ``hash_ids`` name the prompt's successive blocks of 512 tokens, the last one cut
short (``len(hash_ids) = ceil(input_length / 512)``), numbered 0, 1, 2, … in order of
first appearance. Two requests that name the same id share that block's tokens: that is
all a trace says about reuse, and all a prefix cache needs.

:func:`convert_log` turns a request log (JSONL or CSV) into such a trace;
:func:`sample_trace` generates the small trace that ships as package data
(``workloads/traces/mooncake_sample.jsonl``, the ``mooncake-sample`` workload), so its
shape is reviewable and reproducible: ``scripts/make_mooncake_sample.py`` rewrites it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "LOG_FIELDS",
    "MOONCAKE_BLOCK",
    "TraceLogError",
    "convert_log",
    "dump_trace",
    "sample_trace",
]

MOONCAKE_BLOCK = 512
"""Tokens per hash id in Mooncake's traces (the FAST'25 release; AIPerf's default too)."""

LOG_FIELDS = {
    "timestamp": "arrival time, in the unit --timestamp-unit names (s or ms); any origin",
    "input_length": "prompt tokens (integer >= 1)",
    "output_length": "generated tokens (integer >= 1)",
    "prefix_ids": "optional: the ids of the prompt's blocks, in order (a JSON list, or "
                  "space-separated in CSV); one per block, the last block may be partial",
    "prefix_key": "optional (instead of prefix_ids): a name for a shared prefix — a "
                  "system prompt, a document, a conversation",
    "prefix_length": "with prefix_key: that prefix's tokens; requests with the same key "
                     "share its full blocks",
}
"""The columns (CSV) or keys (JSONL) a request log may carry, and what each means."""


class TraceLogError(ValueError):
    """A request log row could not be converted; the message names the line and field."""


@dataclass(frozen=True, slots=True)
class _Row:
    time_ms: float
    input_length: int
    output_length: int
    blocks: tuple[Hashable, ...]  # one key per block; equal keys are one hash id


def convert_log(text: str, *, fmt: Literal["jsonl", "csv"], timestamp_unit: Literal["s", "ms"],
                block_size: int = MOONCAKE_BLOCK, where: str = "log") -> list[dict[str, Any]]:
    """The Mooncake trace of a request log: rows in time order (ties keep the log's
    order), the first at timestamp 0, hash ids numbered by first appearance.

    A row's blocks: its ``prefix_ids`` as given (their count must fit its length), or
    the full blocks of its ``prefix_key``'s prefix (shared by every row with that key)
    then blocks of its own; with neither, blocks of its own. Raises
    :class:`TraceLogError` naming the line and field.
    """
    if block_size < 1:
        raise TraceLogError(f"block size must be >= 1, got {block_size}")
    scale = 1000.0 if timestamp_unit == "s" else 1.0
    rows: list[_Row] = []
    for lineno, raw in _records(text, fmt, where):
        rows.append(_row(raw, f"{where}:{lineno}", lineno, scale, block_size))
    if not rows:
        raise TraceLogError(f"{where}: holds no requests")
    rows.sort(key=lambda r: r.time_ms)  # stable: simultaneous requests keep their order
    start = rows[0].time_ms
    numbering: dict[Hashable, int] = {}
    return [{"timestamp": round(r.time_ms - start), "input_length": r.input_length,
             "output_length": r.output_length,
             "hash_ids": [numbering.setdefault(b, len(numbering)) for b in r.blocks]}
            for r in rows]


def dump_trace(rows: Iterable[dict[str, Any]]) -> str:
    """JSONL, one request a line, keys in Mooncake's order."""
    return "".join(json.dumps(row) + "\n" for row in rows)


def _records(text: str, fmt: str, where: str) -> Iterable[tuple[int, dict[str, Any]]]:
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(text))
        missing = {"timestamp", "input_length", "output_length"} - set(reader.fieldnames or [])
        if missing:
            raise TraceLogError(f"{where}:1: the CSV header lacks {', '.join(sorted(missing))} "
                                f"(columns: {', '.join(LOG_FIELDS)})")
        for row in reader:
            yield reader.line_num, {k: v for k, v in row.items() if v not in (None, "")}
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceLogError(f"{where}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise TraceLogError(f"{where}:{lineno}: expected a JSON object, got "
                                f"{type(row).__name__}")
        yield lineno, row


def _number(row: dict[str, Any], key: str, where: str) -> float:
    value = row.get(key)
    if isinstance(value, str):  # a CSV cell; a word stays a word, for the message
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceLogError(f"{where}: field {key!r} must be a number, got {value!r}")
    return float(value)


def _tokens(row: dict[str, Any], key: str, where: str, low: int = 1) -> int:
    value = _number(row, key, where)
    if value != int(value) or value < low:
        raise TraceLogError(f"{where}: field {key!r} must be an integer >= {low} (tokens), "
                            f"got {row.get(key)!r}")
    return int(value)


def _row(raw: dict[str, Any], where: str, lineno: int, scale: float, size: int) -> _Row:
    time_ms = _number(raw, "timestamp", where) * scale
    input_length = _tokens(raw, "input_length", where)
    output_length = _tokens(raw, "output_length", where)
    needed = -(-input_length // size)
    if "prefix_ids" in raw:
        if "prefix_key" in raw:
            raise TraceLogError(f"{where}: give 'prefix_ids' or 'prefix_key', not both")
        ids = raw["prefix_ids"]
        if isinstance(ids, str):
            ids = ids.split()
        if not isinstance(ids, list) or not all(isinstance(i, int | str) for i in ids):
            raise TraceLogError(f"{where}: field 'prefix_ids' must be a list of ids, got "
                                f"{raw['prefix_ids']!r}")
        if len(ids) != needed:
            raise TraceLogError(
                f"{where}: field 'prefix_ids' has {len(ids)} id(s), but 'input_length' "
                f"{input_length} takes {needed} block(s) of {size} tokens (one id a block, "
                "the last block may be partial)")
        return _Row(time_ms, input_length, output_length, tuple(("id", str(i)) for i in ids))
    shared: tuple[Hashable, ...] = ()
    if "prefix_key" in raw:
        if "prefix_length" not in raw:
            raise TraceLogError(f"{where}: 'prefix_key' needs 'prefix_length' (its tokens)")
        length = _tokens(raw, "prefix_length", where, low=0)
        if length > input_length:
            raise TraceLogError(f"{where}: field 'prefix_length' ({length}) exceeds "
                                f"'input_length' ({input_length}): a prefix is part of "
                                "the prompt")
        key = str(raw["prefix_key"])
        # only full blocks can be shared: the tokens after a partial one differ per request
        shared = tuple(("key", key, j) for j in range(length // size))
    elif "prefix_length" in raw:
        raise TraceLogError(f"{where}: 'prefix_length' needs 'prefix_key' (which prefix)")
    own = tuple(("row", lineno, j) for j in range(needed - len(shared)))
    return _Row(time_ms, input_length, output_length, shared + own)


# --- the shipped sample --------------------------------------------------------------------

_SYSTEM_BLOCKS = (2, 1, 3)
"""Three applications' system prompts, in blocks; sessions pick them 60/30/10."""
_MAX_INPUT = 3500
"""Prompts stay under a 4096-token context with their answers (the lab's models)."""


def sample_trace(n: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """A small Mooncake trace with the reuse real chat traffic has, generated, not recorded.

    Sessions of an application start as a Poisson stream with two bursts (ten sessions
    within 0.2 s); each opens with its application's system prompt (2, 1 or 3 shared
    blocks), then goes for rounds: a round's prompt is the last prompt, its answer and a
    new user turn, so its leading full blocks are the last prompt's (multi-round
    prefixes). Think time between rounds is exponential (mean 8 s). Deterministic.
    """
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.exponential(0.6, size=n))  # seconds between sessions
    for burst_at in (0.25, 0.6):  # two bursts: ten sessions land together
        first = int(len(starts) * burst_at)
        starts[first:first + 10] = starts[first] + np.sort(rng.uniform(0, 0.2, size=10))
    rows: list[tuple[float, int, int, tuple[Hashable, ...]]] = []
    for session, start in enumerate(starts):
        app = int(rng.choice(3, p=[0.6, 0.3, 0.1]))
        blocks: tuple[Hashable, ...] = tuple(("sys", app, j) for j in range(_SYSTEM_BLOCKS[app]))
        length = _SYSTEM_BLOCKS[app] * MOONCAKE_BLOCK
        now = float(start)
        for turn in range(int(rng.geometric(0.35))):
            length += int(rng.integers(40, 600))  # the new user turn
            if length > _MAX_INPUT:
                break
            needed = -(-length // MOONCAKE_BLOCK)
            blocks = blocks + tuple(("s", session, turn, j) for j in range(needed - len(blocks)))
            output = int(rng.integers(16, 250))
            rows.append((now, length, output, blocks))
            # the next prompt holds this one and its answer: this prompt's full blocks
            # are its head, the partial last block is not (its tokens go on differently)
            blocks = blocks[:length // MOONCAKE_BLOCK]
            length += output
            now += float(rng.exponential(8.0))
    rows.sort(key=lambda r: r[0])
    rows = rows[:n]
    numbering: dict[Hashable, int] = {}
    return [{"timestamp": round((t - rows[0][0]) * 1000), "input_length": length,
             "output_length": output,
             "hash_ids": [numbering.setdefault(b, len(numbering)) for b in blocks]}
            for t, length, output, blocks in rows]
