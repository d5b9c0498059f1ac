"""Datasets and arrival schedules: seeded, reproducible, vLLM's length semantics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workers.contracts import (
    Arrivals,
    PrefixRepetitionDataset,
    RandomDataset,
    ShareGPTLikeDataset,
    TraceDataset,
)
from workers.loadgen.arrivals import arrival_offsets
from workers.loadgen.datasets import DatasetError, sample_requests
from workers.loadgen.workload_files import WorkloadError, builtin_workloads, load_workload


def test_same_seed_same_requests_in_order() -> None:
    cfg = ShareGPTLikeDataset()
    assert sample_requests(cfg, 20, 7) == sample_requests(cfg, 20, 7)
    assert sample_requests(cfg, 20, 7) != sample_requests(cfg, 20, 8)


def test_random_lengths_follow_vllm_range_ratio() -> None:
    reqs = sample_requests(RandomDataset(input_len=100, output_len=50, range_ratio=0.2,
                                         prefix_len=16), 500, 0)
    ins = [r.prompt_len - 16 for r in reqs]
    outs = [r.output_len for r in reqs]
    assert min(ins) >= 80 and max(ins) <= 120 and min(outs) >= 40 and max(outs) <= 60
    assert min(ins) <= 82 and max(ins) >= 118  # uniform over the whole range
    assert all(len(r.prompt.split()) == r.prompt_len for r in reqs)  # one word = one token
    prefixes = {" ".join(r.prompt.split()[:16]) for r in reqs}
    assert len(prefixes) == 1  # the shared prefix


def test_range_ratio_zero_is_exact() -> None:
    reqs = sample_requests(RandomDataset(input_len=512, output_len=128), 10, 0)
    assert {(r.prompt_len, r.output_len) for r in reqs} == {(512, 128)}


def test_warmup_stream_does_not_shift_measured_requests() -> None:
    cfg = RandomDataset(input_len=8, output_len=4, prefix_len=4)
    measured = sample_requests(cfg, 5, 3)
    warm = sample_requests(cfg, 5, 3, warmup=True)
    assert warm != measured
    assert warm[0].prompt.split()[:4] == measured[0].prompt.split()[:4]  # same shared prefix


def test_prefix_repetition() -> None:
    cfg = PrefixRepetitionDataset(num_prefixes=3, prefix_len=10, suffix_len=5, output_len=7)
    reqs = sample_requests(cfg, 60, 0)
    assert {r.prompt_len for r in reqs} == {15} and {r.output_len for r in reqs} == {7}
    assert len({" ".join(r.prompt.split()[:10]) for r in reqs}) == 3


def test_sharegpt_like_is_clipped_lognormal() -> None:
    cfg = ShareGPTLikeDataset(input_median=100, input_max=300, output_median=50, output_max=80)
    reqs = sample_requests(cfg, 2000, 0)
    ins = np.array([r.prompt_len for r in reqs])
    assert ins.max() <= 300 and ins.min() >= 4
    assert 80 <= np.median(ins) <= 120
    assert max(r.output_len for r in reqs) <= 80


def test_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [{"offset_s": 1.5, "prompt_len": 4, "output_len": 3},
            {"offset_s": 2.0, "prompt": "hello there world", "output_len": 2}]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    reqs = sample_requests(TraceDataset(path="t.jsonl"), 10, 0, base_dir=tmp_path)
    assert [r.prompt_len for r in reqs] == [4, 3]
    assert arrival_offsets(2, Arrivals(), 0, [r.arrival_offset_s for r in reqs]) == [0.0, 0.5]


def test_bad_trace_names_file_line_and_field(tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"offset_s": 0, "prompt_len": 4, "output_len": 3}\n{"offset_s": 1}\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: field 'output_len'"):
        sample_requests(TraceDataset(path=str(trace)), 5, 0)
    with pytest.raises(DatasetError, match="cannot be read"):
        sample_requests(TraceDataset(path=str(tmp_path / "missing.jsonl")), 5, 0)


def test_gamma_arrivals_rate_and_burstiness() -> None:
    poisson = np.diff(arrival_offsets(20001, Arrivals(request_rate=20), 0))
    assert poisson.mean() == pytest.approx(0.05, rel=0.03)
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, rel=0.05)  # exponential CV 1
    bursty = np.diff(arrival_offsets(20001, Arrivals(request_rate=20, burstiness=0.25), 0))
    assert bursty.mean() == pytest.approx(0.05, rel=0.05)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.08)  # CV = 1/sqrt(shape)
    assert arrival_offsets(5, Arrivals(request_rate=20), 1) == arrival_offsets(
        5, Arrivals(request_rate=20), 1)


def test_constant_and_infinite_arrivals() -> None:
    assert arrival_offsets(4, Arrivals(process="constant", request_rate=4), 0) == pytest.approx(
        [0.0, 0.25, 0.5, 0.75])
    assert arrival_offsets(3, Arrivals(), 0) == [0.0, 0.0, 0.0]


def test_builtin_workloads_load() -> None:
    names = builtin_workloads()
    assert {"lab", "chat", "rag", "codegen", "summarization"} <= set(names)
    lab, _ = load_workload("lab")
    assert lab.arrivals.request_rate == 20
    assert isinstance(lab.dataset, RandomDataset)
    assert (lab.dataset.input_len, lab.dataset.output_len) == (512, 128)
    for name in names:
        load_workload(name)


def test_bad_workload_file_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "mine.yaml"
    bad.write_text("name: mine\ndataset:\n  kind: random\n  input_len: -5\n")
    with pytest.raises(WorkloadError, match=r"mine\.yaml: dataset\.random\.input_len"):
        load_workload(str(bad))
    with pytest.raises(WorkloadError, match=r"unknown workload 'nope'.*lab"):
        load_workload("nope")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(WorkloadError, match=r"broken\.yaml: not valid YAML"):
        load_workload(str(broken))
