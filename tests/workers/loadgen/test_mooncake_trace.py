"""Mooncake-format traces: block-exact reuse from hash ids, the format's length rule,
errors that name the line and field, and trace arrivals rescaled to a rate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from workers.contracts import Arrivals, MooncakeTraceDataset, TraceDataset, TraceFields, Workload
from workers.loadgen.arrivals import arrival_offsets
from workers.loadgen.datasets import DatasetError, sample_requests, sample_run

BLOCK = 8  # small blocks keep the prompts short; the rule is the same at 512


def _write(folder: Path, rows: list[dict[str, Any]], name: str = "t.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _trace(path: Path, **kwargs: Any) -> MooncakeTraceDataset:
    return MooncakeTraceDataset(path=str(path), block_size=BLOCK, **kwargs)


ROWS: list[dict[str, Any]] = [
    {"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [7, 11, 12]},
    {"timestamp": 250, "input_length": 16, "output_length": 4, "hash_ids": [7, 19]},
    {"timestamp": 1000, "input_length": 13, "output_length": 5, "hash_ids": [7, 11]},
    {"timestamp": 1000, "input_length": 5, "output_length": 2},
]


def test_shared_hash_ids_share_their_blocks_token_for_token(tmp_path: Path) -> None:
    a, b, c, d = sample_requests(_trace(_write(tmp_path, ROWS)), 10, 0)
    assert [r.prompt_len for r in (a, b, c, d)] == [20, 16, 13, 5]
    assert [len(r.word_ids) for r in (a, b, c, d)] == [20, 16, 13, 5]
    assert [r.output_len for r in (a, b, c, d)] == [3, 4, 5, 2]
    assert a.word_ids[:BLOCK] == b.word_ids[:BLOCK] == c.word_ids[:BLOCK]  # hash id 7
    assert a.word_ids[BLOCK:13] == c.word_ids[BLOCK:]  # 11, cut short in c: its head
    assert a.word_ids[BLOCK:2 * BLOCK] != b.word_ids[BLOCK:]  # 11 and 19 differ
    assert d.word_ids != a.word_ids[:5]  # no hash ids: a prompt of its own
    assert len(a.prompt.split()) == a.prompt_len  # the text is the words, one per id


def test_timestamps_are_milliseconds_by_default_and_seconds_on_request(tmp_path: Path) -> None:
    path = _write(tmp_path, ROWS)
    assert [r.arrival_offset_s for r in sample_requests(_trace(path), 10, 0)] == [
        0.0, 0.25, 1.0, 1.0]
    seconds = sample_requests(_trace(path, timestamp_s=1.0), 10, 0)
    assert [r.arrival_offset_s for r in seconds] == [0.0, 250.0, 1000.0, 1000.0]
    ignored = sample_requests(_trace(path, use_trace_arrivals=False), 10, 0)
    assert {r.arrival_offset_s for r in ignored} == {None}


def test_renamed_fields_are_read(tmp_path: Path) -> None:
    rows = [{"ts": 2, "in": 9, "out": 1, "blocks": [3, 4]}]
    cfg = _trace(_write(tmp_path, rows), timestamp_s=1.0,
                 fields=TraceFields(timestamp="ts", input_length="in", output_length="out",
                                    hash_ids="blocks"))
    (req,) = sample_requests(cfg, 1, 0)
    assert (req.prompt_len, req.output_len, req.arrival_offset_s) == (9, 1, 2.0)


def test_blocks_depend_on_the_seed_and_warmup_has_blocks_of_its_own(tmp_path: Path) -> None:
    cfg = _trace(_write(tmp_path, ROWS))
    first = sample_requests(cfg, 3, 0)
    assert first == sample_requests(cfg, 3, 0)  # deterministic
    other = sample_requests(cfg, 3, 1)  # a capacity probe's seed: fresh blocks
    assert first[0].word_ids[:BLOCK] != other[0].word_ids[:BLOCK]
    measured, warm = sample_run(cfg, 3, 2, 0)
    assert [w.prompt_len for w in warm] == [20, 16]  # the trace's own shapes …
    assert {w.arrival_offset_s for w in warm} == {None}  # … sent back to back …
    assert warm[0].word_ids[:BLOCK] != measured[0].word_ids[:BLOCK]  # … never priming them


@pytest.mark.parametrize(("row", "message"), [
    ({"timestamp": 0, "input_length": 25, "output_length": 1, "hash_ids": [1, 2, 3]},
     r"t\.jsonl:2: field 'input_length' is 25 tokens, which takes 4 block\(s\) of 8, but "
     r"field 'hash_ids' names 3"),
    ({"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1, 2, 3]},
     r"t\.jsonl:2: field 'input_length' is 16 tokens, which takes 2 .* names 3.*17–24"),
    ({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, "x"]},
     r"t\.jsonl:2: field 'hash_ids' must be a list of integers >= 0"),
    ({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [-1]},
     r"t\.jsonl:2: field 'hash_ids' must be a list of integers >= 0"),
    ({"timestamp": 0, "input_length": 0, "output_length": 1},
     r"t\.jsonl:2: field 'input_length' must be an integer in \[1, "),
    ({"timestamp": 0, "input_length": 4}, r"t\.jsonl:2: field 'output_length' must be"),
    ({"input_length": 4, "output_length": 1}, r"t\.jsonl:2: field 'timestamp' must be a number"),
    ({"timestamp": -5, "input_length": 4, "output_length": 1},
     r"t\.jsonl:2: field 'timestamp' must be a number >= 0"),
])
def test_a_bad_line_names_its_line_and_field(tmp_path: Path, row: dict[str, Any],
                                             message: str) -> None:
    path = _write(tmp_path, [ROWS[0], row])
    with pytest.raises(DatasetError, match=message):
        sample_requests(_trace(path), 5, 0)


def test_not_json_empty_and_missing_files_are_errors(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 4, "output_length": 1}\nnope\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl:2: not valid JSON"):
        sample_requests(_trace(bad), 5, 0)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(DatasetError, match="holds no requests"):
        sample_requests(_trace(empty), 5, 0)
    with pytest.raises(DatasetError, match="cannot be read"):
        sample_requests(_trace(tmp_path / "missing.jsonl"), 5, 0)


def test_the_contract_refuses_bad_settings() -> None:
    with pytest.raises(ValidationError, match="block_size"):
        MooncakeTraceDataset(path="t.jsonl", block_size=0)
    with pytest.raises(ValidationError, match="timestamp_s"):
        MooncakeTraceDataset(path="t.jsonl", timestamp_s=0)
    w = Workload.model_validate({"dataset": {"kind": "mooncake_trace", "path": "t.jsonl"}})
    assert isinstance(w.dataset, MooncakeTraceDataset) and w.dataset.block_size == 512


def test_trace_arrivals_replay_as_recorded_at_an_infinite_rate(tmp_path: Path) -> None:
    reqs = sample_requests(_trace(_write(tmp_path, ROWS)), 10, 0)
    stamps = [r.arrival_offset_s for r in reqs]
    assert arrival_offsets(4, Arrivals(), 0, stamps) == stamps


@pytest.mark.parametrize("rate", [0.5, 4.0, 40.0])
def test_a_finite_rate_rescales_the_trace_keeping_its_burst_shape(tmp_path: Path,
                                                                  rate: float) -> None:
    gaps_ms = [0, 10, 10, 2000, 5, 5, 5, 900, 1]  # two bursts and lulls
    rows = [{"timestamp": int(t), "input_length": 3, "output_length": 1}
            for t in np.cumsum(gaps_ms) + 123]  # a clock that does not start at 0
    reqs = sample_requests(_trace(_write(tmp_path, rows)), 100, 0)
    offsets = arrival_offsets(len(reqs), Arrivals(request_rate=rate), 0,
                              [r.arrival_offset_s for r in reqs])
    assert offsets[0] == 0.0
    assert (len(offsets) - 1) / offsets[-1] == pytest.approx(rate)  # the mean rate asked for
    trace_gaps, gaps = np.array(gaps_ms[1:], dtype=float), np.diff(offsets)
    assert gaps / gaps.sum() == pytest.approx(trace_gaps / trace_gaps.sum())  # same shape


def test_one_burst_cannot_be_stretched_and_stays_one(tmp_path: Path) -> None:
    rows = [{"timestamp": 7, "input_length": 3, "output_length": 1}] * 3
    reqs = sample_requests(_trace(_write(tmp_path, rows)), 3, 0)
    assert arrival_offsets(3, Arrivals(request_rate=2), 0,
                           [r.arrival_offset_s for r in reqs]) == [0.0, 0.0, 0.0]


def test_a_plain_trace_is_rescaled_the_same_way(tmp_path: Path) -> None:
    rows = [{"offset_s": t, "prompt_len": 2, "output_len": 1} for t in (0.0, 1.0, 4.0)]
    reqs = sample_requests(TraceDataset(path=str(_write(tmp_path, rows))), 3, 0)
    stamps = [r.arrival_offset_s for r in reqs]
    assert arrival_offsets(3, Arrivals(), 0, stamps) == [0.0, 1.0, 4.0]
    assert arrival_offsets(3, Arrivals(request_rate=1), 0, stamps) == pytest.approx(
        [0.0, 0.5, 2.0])
