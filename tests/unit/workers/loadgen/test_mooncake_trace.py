"""Mooncake-format traces: block-exact reuse from hash ids, the format's length rule,
errors that name the line and field, and trace arrivals rescaled to a rate."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import ValidationError

from slotune.tuner.cli.main import main as slotune
from slotune.workers.contracts import (
    Arrivals,
    MooncakeTraceDataset,
    TraceDataset,
    TraceFields,
    Workload,
)
from slotune.workers.loadgen.generate.arrivals import arrival_offsets
from slotune.workers.loadgen.generate.datasets import DatasetError, sample_requests, sample_run
from slotune.workers.loadgen.generate.mooncake import (
    TraceLogError,
    convert_log,
    dump_trace,
    sample_trace,
)
from slotune.workers.loadgen.generate.workload_files import WorkloadError, load_workload

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
     r"t\.jsonl: line 2: field 'input_length' takes 4 block\(s\) of 8 tokens, but "
     r"field 'hash_ids' names 3"),
    ({"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1, 2, 3]},
     r"t\.jsonl: line 2: field 'input_length' takes 2 .* names 3.*17–24"),
    ({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, "x"]},
     r"t\.jsonl: line 2: field 'hash_ids' must be a list of integers >= 0"),
    ({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [-1]},
     r"t\.jsonl: line 2: field 'hash_ids' must be a list of integers >= 0"),
    ({"timestamp": 0, "input_length": 0, "output_length": 1},
     r"t\.jsonl: line 2: field 'input_length' must be an integer in \[1, "),
    ({"timestamp": 0, "input_length": 4}, r"t\.jsonl: line 2: field 'output_length' must be"),
    ({"input_length": 4, "output_length": 1},
     r"t\.jsonl: line 2: field 'timestamp' must be a number"),
    ({"timestamp": -5, "input_length": 4, "output_length": 1},
     r"t\.jsonl: line 2: field 'timestamp' must be a number >= 0"),
    ({"timestamp": float("inf"), "input_length": 4, "output_length": 1},
     r"t\.jsonl: line 2: field 'timestamp' must be a number >= 0"),
    ({"timestamp": float("nan"), "input_length": 4, "output_length": 1},
     r"t\.jsonl: line 2: field 'timestamp' must be a number >= 0 .*got NaN"),
    ({"timestamp": 0, "input_length": 4.5, "output_length": 1},
     r"t\.jsonl: line 2: field 'input_length' must be an integer .*got a fractional number"),
])
def test_a_bad_line_names_its_line_and_field(tmp_path: Path, row: dict[str, Any],
                                             message: str) -> None:
    path = _write(tmp_path, [ROWS[0], row])
    with pytest.raises(DatasetError, match=message):
        sample_requests(_trace(path), 5, 0)


def test_timestamps_that_go_back_in_time_are_refused_while_they_are_the_schedule(
        tmp_path: Path) -> None:
    path = _write(tmp_path, [ROWS[2], ROWS[1]])
    with pytest.raises(DatasetError, match=r"t\.jsonl: line 2: field 'timestamp' goes back "
                                           r"in time \(earlier than line 1's\)"):
        sample_requests(_trace(path), 5, 0)
    ignored = sample_requests(_trace(path, use_trace_arrivals=False), 5, 0)  # not read
    assert [r.prompt_len for r in ignored] == [13, 16]


def test_not_json_empty_and_missing_files_are_errors(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 4, "output_length": 1}\nnope\n')
    with pytest.raises(DatasetError, match=r"t\.jsonl: line 2: not valid JSON"):
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


# --- the shipped sample and the mooncake-sample workload -----------------------------------


def test_the_shipped_sample_is_the_generators_output() -> None:
    shipped = Path(load_workload("mooncake-sample")[0].dataset.path)  # type: ignore[union-attr]
    assert shipped.read_text(encoding="utf-8") == dump_trace(sample_trace())


def test_the_sample_has_shared_system_prompts_and_multi_round_prefixes() -> None:
    workload, base = load_workload("mooncake-sample")
    assert isinstance(workload.dataset, MooncakeTraceDataset)
    assert base is not None and Path(workload.dataset.path).is_relative_to(base)
    rows = [json.loads(line) for line in Path(workload.dataset.path).read_text().splitlines()]
    assert len(rows) == workload.num_prompts == 200
    first_blocks = Counter(r["hash_ids"][0] for r in rows)
    assert first_blocks.most_common(1)[0][1] >= 40  # one application's system prompt, widely
    # a later round starts with an earlier round's whole prompt, minus its partial block
    extended = sum(1 for i, r in enumerate(rows) for q in rows[:i]
                   if len(q["hash_ids"]) > 1 and r["hash_ids"][:len(q["hash_ids"]) - 1]
                   == q["hash_ids"][:-1] and len(r["hash_ids"]) > len(q["hash_ids"]))
    assert extended >= 20
    reqs = sample_requests(workload.dataset, workload.num_prompts, workload.seed)
    assert [r.prompt_len for r in reqs] == [r["input_length"] for r in rows]  # every line valid


# --- converting a request log -------------------------------------------------------------


def test_convert_shares_a_keyed_prefixs_full_blocks_in_time_order() -> None:
    log = "\n".join(json.dumps(r) for r in [
        {"timestamp": 10.0, "input_length": 1100, "output_length": 20, "prefix_key": "sys",
         "prefix_length": 1100},
        {"timestamp": 10.5, "input_length": 1030, "output_length": 9, "prefix_key": "sys",
         "prefix_length": 1030},
        {"timestamp": 9.25, "input_length": 300, "output_length": 5},
    ])
    rows = convert_log(log, fmt="jsonl", timestamp_unit="s")
    assert [r["timestamp"] for r in rows] == [0, 750, 1250]  # ms from the first request
    assert [r["output_length"] for r in rows] == [5, 20, 9]
    first, a, b = (r["hash_ids"] for r in rows)
    assert a[:2] == b[:2] and a[2] != b[2]  # two full shared blocks, then their own
    assert len(set(first) & set(a)) == 0
    # what the converter writes is what the dataset reads, block for block
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 512) for r in rows)


def test_convert_reads_csv_with_block_ids_and_milliseconds(tmp_path: Path) -> None:
    log = ("timestamp,input_length,output_length,prefix_ids\n"
           "5000,20,3,a b c\n"
           "5100,17,2,a b x\n")
    rows = convert_log(log, fmt="csv", timestamp_unit="ms", block_size=8)
    assert [r["timestamp"] for r in rows] == [0, 100]
    assert [r["hash_ids"] for r in rows] == [[0, 1, 2], [0, 1, 3]]
    path = tmp_path / "t.jsonl"
    path.write_text(dump_trace(rows))
    a, b = sample_requests(_trace(path), 2, 0)
    assert a.word_ids[:16] == b.word_ids[:16] and a.word_ids[16] != b.word_ids[16]


@pytest.mark.parametrize(("fmt", "log", "message"), [
    ("jsonl", '{"timestamp": 1, "input_length": 4, "output_length": 1}\n{"timestamp": "x"}',
     r"log:2: field 'timestamp' must be a number, got 'x'"),
    ("jsonl", '{"timestamp": 1, "input_length": 0, "output_length": 1}',
     r"log:1: field 'input_length' must be an integer >= 1"),
    ("jsonl", '{"timestamp": 1, "input_length": 600, "output_length": 1, "prefix_ids": [1]}',
     r"log:1: field 'prefix_ids' has 1 id\(s\), but 'input_length' 600 takes 2 block\(s\)"),
    ("jsonl", '{"timestamp": 1, "input_length": 60, "output_length": 1, "prefix_key": "k",'
              ' "prefix_length": 70}', r"log:1: field 'prefix_length' \(70\) exceeds"),
    ("jsonl", '{"timestamp": 1, "input_length": 60, "output_length": 1, "prefix_key": "k"}',
     r"log:1: 'prefix_key' needs 'prefix_length'"),
    ("jsonl", "[1, 2]", r"log:1: expected a JSON object"),
    ("csv", "timestamp,input_length\n1,2\n", r"log:1: the CSV header lacks output_length"),
    ("csv", "timestamp,input_length,output_length\n1,2,3\n2,x,3\n",
     r"log:3: field 'input_length' must be a number, got 'x'"),
    ("jsonl", "\n", r"log: holds no requests"),
])
def test_convert_names_the_bad_line_and_field(fmt: Literal["jsonl", "csv"], log: str,
                                              message: str) -> None:
    with pytest.raises(TraceLogError, match=message):
        convert_log(log, fmt=fmt, timestamp_unit="s")


def test_slotune_trace_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log.csv"
    log.write_text("timestamp,input_length,output_length,prefix_key,prefix_length\n"
                   "0,600,4,sys,512\n0.5,700,4,sys,512\n")
    out = tmp_path / "trace.jsonl"
    with pytest.raises(SystemExit) as done:
        slotune(["trace", "convert", str(log), str(out)])
    assert done.value.code == 0
    assert "2 requests, 1 of their blocks repeat an earlier one" in capsys.readouterr().out
    reqs = sample_requests(MooncakeTraceDataset(path=str(out)), 2, 0)
    assert reqs[0].word_ids[:512] == reqs[1].word_ids[:512]
    log.write_text("timestamp,input_length,output_length\n0,600,4\n1,-3,4\n")
    with pytest.raises(SystemExit) as done:
        slotune(["trace", "convert", str(log), str(out)])
    assert done.value.code == 2
    assert "log.csv:3: field 'input_length' must be an integer >= 1" in capsys.readouterr().err


def test_a_workload_files_mooncake_trace_obeys_the_path_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLOTUNE_HOME", raising=False)
    folder = tmp_path / "w"
    folder.mkdir()
    _write(folder, ROWS, "trace.jsonl")
    good = folder / "good.yaml"
    good.write_text("dataset: {kind: mooncake_trace, path: trace.jsonl, block_size: 8}\n")
    workload, _ = load_workload(str(good))
    assert workload.dataset.path == str(folder / "trace.jsonl")  # type: ignore[union-attr]
    _write(tmp_path, ROWS, "outside.jsonl")
    bad = folder / "bad.yaml"
    bad.write_text("dataset: {kind: mooncake_trace, path: ../outside.jsonl}\n")
    with pytest.raises(WorkloadError, match="a trace file must live under the workload file"):
        load_workload(str(bad))
