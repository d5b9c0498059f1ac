"""Datasets and arrival schedules: seeded, reproducible, vLLM's length semantics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from slotune.workers.contracts import (
    Arrivals,
    CustomDataset,
    PrefixRepetitionDataset,
    RampUp,
    RandomDataset,
    ShareGPTDataset,
    ShareGPTLikeDataset,
    TraceDataset,
)
from slotune.workers.loadgen.generate.arrivals import arrival_offsets
from slotune.workers.loadgen.generate.datasets import DatasetError, sample_requests, sample_run
from slotune.workers.loadgen.generate.workload_files import (
    WorkloadError,
    builtin_workloads,
    load_workload,
)


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
    with pytest.raises(DatasetError, match=r"bad\.jsonl: line 2: field 'output_len'"):
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


def test_a_fixed_rate_schedule_lasts_exactly_n_over_rate_whatever_the_draw() -> None:
    for seed in range(5):
        offsets = arrival_offsets(8, Arrivals(request_rate=4), seed)
        assert offsets[-1] == pytest.approx(2.0)  # 8 requests at 4 req/s: vLLM's rescaling
        assert offsets == sorted(offsets) and offsets[0] > 0  # the first waits a gap too
    assert arrival_offsets(8, Arrivals(request_rate=4), 0) != arrival_offsets(
        8, Arrivals(request_rate=4), 1)


def test_ramp_up_rates_climb_and_gaps_shrink() -> None:
    ramp = RampUp(strategy="linear", start_rps=2, end_rps=50)
    assert (ramp.rate(0, 11), ramp.rate(10, 11)) == (2, 50)
    exp = RampUp(strategy="exponential", start_rps=2, end_rps=32)
    assert exp.rate(5, 11) == pytest.approx(8.0)  # geometric midpoint of 2 and 32
    gaps = np.diff(arrival_offsets(2000, Arrivals(ramp_up=ramp), 0))
    assert gaps[:200].mean() > 5 * gaps[-200:].mean()
    with pytest.raises(ValidationError, match="give either request_rate"):
        Arrivals(request_rate=5, ramp_up=ramp)


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


def _sharegpt_file(tmp_path: Path, prompts: list[str], reply: str = "one two three four five"
                   ) -> Path:
    convs = [{"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": reply}]}
             for p in prompts]
    convs.append({"conversations": [{"from": "human", "value": "a lone turn is dropped"}]})
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(convs))
    return path


def test_sharegpt_prunes_like_vllm_shuffles_by_seed_and_tops_up(tmp_path: Path) -> None:
    prompts = [f"prompt number {i} has words" for i in range(30)] + ["too short"]
    path = _sharegpt_file(tmp_path, prompts)
    reqs = sample_requests(ShareGPTDataset(path=str(path)), 30, 0)
    texts = [r.prompt for r in reqs]
    assert "too short" not in texts and len(set(texts)) == 30  # < 4 tokens: pruned
    assert texts != prompts[:30]  # shuffled
    assert all((r.prompt_len, r.output_len) == (5, 5) for r in reqs)  # reply's length
    again = [r.prompt for r in sample_requests(ShareGPTDataset(path=str(path)), 30, 0)]
    other = [r.prompt for r in sample_requests(ShareGPTDataset(path=str(path)), 30, 1)]
    assert again == texts and other != texts
    in_order = sample_requests(ShareGPTDataset(path=str(path), shuffle=False, output_len=2), 3, 0)
    assert [r.prompt for r in in_order] == prompts[:3] and in_order[0].output_len == 2
    topped = sample_requests(ShareGPTDataset(path=str(path)), 50, 0)
    assert len(topped) == 50 and {r.prompt for r in topped} <= set(prompts)
    exact = sample_requests(ShareGPTDataset(path=str(path), oversample=False), 50, 0)
    assert len(exact) == 30
    measured, warm = sample_run(ShareGPTDataset(path=str(path)), 30, 3, 0)
    assert [r.prompt for r in measured] == texts
    assert [r.prompt for r in warm] == [texts[0]] * 3  # vLLM warms up on request 0


def test_sharegpt_and_custom_file_errors_say_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"conversations": []}')
    with pytest.raises(DatasetError, match="expected a JSON list of conversations"):
        sample_requests(ShareGPTDataset(path=str(bad)), 2, 0)
    short = _sharegpt_file(tmp_path, ["hi"])
    with pytest.raises(DatasetError, match="no conversation with two turns"):
        sample_requests(ShareGPTDataset(path=str(short)), 2, 0)
    custom = tmp_path / "c.jsonl"
    custom.write_text('{"prompt": "a b c", "output_tokens": 3}\n{"text": "no prompt"}\n')
    with pytest.raises(DatasetError, match=r"c\.jsonl: line 2: each line needs a text 'prompt'"):
        sample_requests(CustomDataset(path=str(custom), skip_chat_template=True), 2, 0)
    custom.write_text('{"prompt": "a b c"}\n')
    with pytest.raises(DatasetError, match="needs an integer 'output_tokens'"):
        sample_requests(CustomDataset(path=str(custom), output_len=-1, skip_chat_template=True),
                        1, 0)
    with pytest.raises(DatasetError, match="no chat template"):
        sample_requests(CustomDataset(path=str(custom)), 1, 0)  # words have no template
    notjsonl = tmp_path / "c.json"
    notjsonl.write_text("{}")
    with pytest.raises(DatasetError, match="must be JSONL"):
        sample_requests(CustomDataset(path=str(notjsonl)), 1, 0)


def test_custom_takes_each_lines_output_tokens_or_the_flag(tmp_path: Path) -> None:
    custom = tmp_path / "c.jsonl"
    custom.write_text("".join(json.dumps({"prompt": f"w {i} x y", "output_tokens": i + 1}) + "\n"
                              for i in range(6)))
    own = sample_requests(CustomDataset(path=str(custom), output_len=-1, skip_chat_template=True,
                                        shuffle=False), 6, 0)
    assert [r.output_len for r in own] == [1, 2, 3, 4, 5, 6]
    assert all(r.prompt_len == 4 for r in own)
    fixed = sample_requests(CustomDataset(path=str(custom), skip_chat_template=True), 6, 0)
    assert {r.output_len for r in fixed} == {256}  # vLLM's default --custom-output-len


def test_prefix_repetition_uniform_stays_vllms_draw() -> None:
    default = PrefixRepetitionDataset(num_prefixes=4, prefix_len=6, suffix_len=3, output_len=2)
    explicit = default.model_copy(update={"popularity": "uniform", "zipf_s": 3.0})
    assert sample_requests(explicit, 50, 5) == sample_requests(default, 50, 5)
    assert sample_requests(explicit, 50, 5, warmup=True) == sample_requests(
        default, 50, 5, warmup=True)


def _prefix_counts(cfg: PrefixRepetitionDataset, n: int, seed: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in sample_requests(cfg, n, seed):
        head = " ".join(r.prompt.split()[:cfg.prefix_len])
        counts[head] = counts.get(head, 0) + 1
    return counts


@pytest.mark.parametrize("s", [0.8, 1.1, 2.0])
def test_prefix_repetition_zipf_makes_the_first_prefix_the_hottest(s: float) -> None:
    cfg = PrefixRepetitionDataset(num_prefixes=6, prefix_len=4, suffix_len=0, output_len=1,
                                  popularity="zipf", zipf_s=s)
    counts = _prefix_counts(cfg, 12_000, 0)
    # the pool is drawn from the seed in rank order: a pool of one holds the rank-1 prefix
    (rank1,) = _prefix_counts(cfg.model_copy(update={"num_prefixes": 1}), 1, 0)
    ranked = sorted(counts.values(), reverse=True)
    assert len(ranked) == 6 and counts[rank1] == ranked[0]
    assert ranked[0] / ranked[1] == pytest.approx(2 ** s, rel=0.08)
    uniform = _prefix_counts(cfg.model_copy(update={"popularity": "uniform"}), 12_000, 0)
    assert max(uniform.values()) / min(uniform.values()) < 1.2  # the default stays flat


def test_prefix_repetition_zipf_is_seeded_and_checked() -> None:
    cfg = PrefixRepetitionDataset(num_prefixes=5, prefix_len=4, suffix_len=2,
                                  popularity="zipf")
    assert sample_requests(cfg, 30, 3) == sample_requests(cfg, 30, 3)
    assert sample_requests(cfg, 30, 3) != sample_requests(cfg, 30, 4)
    with pytest.raises(ValidationError, match="zipf_s"):
        PrefixRepetitionDataset(popularity="zipf", zipf_s=0)
    with pytest.raises(ValidationError, match="popularity"):
        PrefixRepetitionDataset.model_validate({"popularity": "pareto"})
