"""The virtual-time trial: same requests and scoring as a live run, failures, charge, capacity."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from slotune.workers.contracts import BOOT_PHASES, SLO, CapacityProbe, TrialSpec, Workload
from slotune.workers.engines import EngineFailure
from slotune.workers.loadgen.generate.datasets import sample_requests
from slotune.workers.loadgen.generate.workload_files import load_workload
from slotune.workers.sim.config import PROFILE_SECONDS
from slotune.workers.trial.virtual import PROCESS_START_S, VirtualBackend, run_virtual_trial

MODEL = "Qwen/Qwen2.5-7B-Instruct"
SLO_ = SLO(ttft=300, tpot=50)


def lab(n: int = 60, rate: float = 3.0) -> Workload:
    workload, _ = load_workload("lab")
    arrivals = workload.arrivals.model_copy(update={"request_rate": rate})
    return workload.model_copy(update={"num_prompts": n, "warmup_requests": 0,
                                       "arrivals": arrivals})


def spec(knobs: dict[str, Any] | None = None, **kw: Any) -> TrialSpec:
    base: dict[str, Any] = dict(run_id="t", engine="sim", model=MODEL,
                                knobs=knobs or {}, engine_args={"max_model_len": 4096},
                                workload=lab(), slo=SLO_, gpu="rtx4090")
    base.update(kw)
    return TrialSpec.model_validate(base)


def test_feasible_run_is_scored_like_a_live_run_and_deterministic() -> None:
    s = spec()
    first, again = run_virtual_trial(s), run_virtual_trial(s)
    assert first.status == "ok" and first.gate_passed
    assert first.objective == first.request_goodput == first.metrics["request_goodput"] > 0
    assert first.model_dump() | {"metrics": {}} == again.model_dump() | {"metrics": {}}
    # the load generator's own requests, in order
    wanted = [r.prompt_len for r in sample_requests(s.workload.dataset, 60, s.workload.seed)]
    assert first.metrics["input_lens"] == wanted
    assert first.metrics["p99_ttft_ms"] <= 300
    assert first.headroom is not None and 0 < first.headroom <= 1
    assert set(first.slo_margins) == {"ttft", "tpot"} and min(first.slo_margins.values()) >= 0
    assert first.diagnosis is not None and first.diagnosis["wall"] in {"limit", "prefill",
                                                                       "decode"}
    assert first.engine.kv_cache_tokens and first.engine.resolved_config["max_num_seqs"] == 256


def test_refused_config_fails_as_invalid_config_with_vllms_sentence() -> None:
    r = run_virtual_trial(spec({"max_num_seqs": 512, "max_num_batched_tokens": 256}))
    assert r.status == "failed" and r.failure == "invalid_config"
    assert "must be greater than or equal to max_num_seqs (512)" in (r.failure_message or "")
    assert r.objective == 0 and r.constraints["fits"] > 0
    unknown = run_virtual_trial(spec({"max_num_sequences": 8}))
    assert unknown.failure == "invalid_config" and "max-num-sequences" in str(
        unknown.failure_message)
    allowed = run_virtual_trial(spec({"max_num_sequences": 8},
                                     allowed_extra_args=("max_num_sequences",)))
    assert allowed.status == "ok"


def test_the_virtual_backend_refuses_with_the_engines_own_failure() -> None:
    # One exception for "the engine refused, class X", live or virtual: EngineFailure,
    # carrying what the refusal cost in engine seconds.
    backend = VirtualBackend(spec({"max_num_seqs": 512, "max_num_batched_tokens": 256}))
    with pytest.raises(EngineFailure) as refused:
        asyncio.run(backend.boot())
    assert refused.value.failure == "invalid_config"
    assert refused.value.boot_s == backend.boot_s == PROCESS_START_S
    assert refused.value.log_tail == refused.value.message
    big = VirtualBackend(spec({"gpu_memory_utilization": 0.5}))
    with pytest.raises(EngineFailure) as oom:
        asyncio.run(big.boot())
    assert oom.value.failure == "oom" and big.boot_s == oom.value.boot_s
    assert oom.value.boot_s is not None and oom.value.boot_s > PROCESS_START_S


def test_memory_refusal_fails_as_oom_and_is_charged_the_weights_load() -> None:
    r = run_virtual_trial(spec({"gpu_memory_utilization": 0.5}))
    assert r.status == "failed" and r.failure == "oom"
    assert "memory" in (r.failure_message or "").lower()
    assert r.constraints["fits"] > 0 and r.objective == 0
    ok = run_virtual_trial(spec())
    assert r.timings.boot_s is not None and ok.timings.boot_s is not None
    assert 0 < r.timings.boot_s < ok.timings.boot_s  # no graph capture after a failed profile
    assert r.timings.measure_s is None
    assert r.timings.boot_graph_capture_s is None and ok.timings.boot_graph_capture_s


def test_boot_charge_grows_with_graph_capture_buckets() -> None:
    small = run_virtual_trial(spec({"max_num_seqs": 16}))
    big = run_virtual_trial(spec({"max_num_seqs": 256}))
    assert small.timings.boot_s is not None and big.timings.boot_s is not None
    assert big.timings.boot_s > small.timings.boot_s
    assert big.timings.total_s == big.timings.boot_s + (big.timings.measure_s or 0)
    # The boot split as a live trial's: the graph capture is what grew, weights and the
    # process around the engine did not; no torch.compile is modelled.
    s, b = small.timings, big.timings
    assert b.boot_graph_capture_s is not None and s.boot_graph_capture_s is not None
    assert b.boot_graph_capture_s > s.boot_graph_capture_s
    assert b.boot_weights_s == s.boot_weights_s and b.boot_weights_s is not None
    # The modelled boot has no profiling run of its own: the one second the engine's init
    # reports comes out of the process start.
    assert b.boot_server_ready_s == s.boot_server_ready_s == PROCESS_START_S - PROFILE_SECONDS
    assert b.boot_compile_s is None
    parts = [getattr(b, name) or 0.0 for name in BOOT_PHASES]
    assert sum(parts) == pytest.approx(b.boot_s)


def test_past_the_knee_aborts_early_and_charges_only_until_then() -> None:
    hot = lab(n=200, rate=20.0)
    aborted = run_virtual_trial(spec(workload=hot))
    full = run_virtual_trial(spec(workload=hot, early_abort=False))
    assert aborted.early_abort is not None and "can no longer hold" in aborted.early_abort
    assert aborted.objective == 0 and not aborted.gate_passed
    assert full.early_abort is None and full.objective == 0
    assert aborted.timings.measure_s is not None and full.timings.measure_s is not None
    assert aborted.timings.measure_s < full.timings.measure_s
    assert aborted.metrics["completed"] < full.metrics["completed"]


def test_diagnosis_reads_the_wall_from_the_simulated_series() -> None:
    starved = run_virtual_trial(spec({"gpu_memory_utilization": 0.71},
                                     engine_args={"max_model_len": 2048},
                                     workload=lab(n=120, rate=20.0), early_abort=False))
    assert starved.diagnosis is not None and starved.diagnosis["wall"] == "kv"
    queued = run_virtual_trial(spec({"max_num_seqs": 8}, workload=lab(n=120, rate=20.0),
                                    early_abort=False))
    assert queued.diagnosis is not None and queued.diagnosis["wall"] == "queue"


def test_capacity_mode_brackets_and_bisects_the_rate() -> None:
    r = run_virtual_trial(spec(mode="capacity", workload=lab(n=60, rate=2.0),
                               capacity={"min_rate": 0.5, "max_rate": 64,
                                         "relative_tolerance": 0.05, "max_probes": 10}))
    assert r.status == "ok" and r.capacity is not None and r.capacity > 0
    assert r.objective == r.capacity  # one GPU: the capacity per GPU
    passed = [p.request_rate for p in r.capacity_probes if p.verdict == "pass"]
    failed = [p.request_rate for p in r.capacity_probes if p.verdict in ("fail", "overload")]
    # the interval: the highest rate shown to pass, the lowest shown to fail; its centre
    assert max(passed) == r.capacity_low and failed and min(failed) == r.capacity_high
    assert r.capacity_low is not None and r.capacity_high is not None
    assert r.capacity == pytest.approx(math.sqrt(r.capacity_low * r.capacity_high))
    undecided = sorted(p.request_rate for p in r.capacity_probes if p.verdict == "undecided")
    inside = [u for u in undecided if r.capacity_low < u < r.capacity_high]
    ends = [(inside[0], r.capacity_low), (r.capacity_high, inside[-1])] if inside \
        else [(r.capacity_high, r.capacity_low)]
    assert all(a / b - 1 <= 0.05 for a, b in ends) or len(r.capacity_probes) == 10
    assert r.capacity_probes[0].request_rate == 2.0
    for probe in r.capacity_probes:  # medians beside the p99s (what the twin fits)
        assert set(probe.medians_ms) == {"ttft", "tpot"}
        assert 0 < probe.medians_ms["ttft"] <= probe.ratios["ttft"] * 300
        assert 0 < probe.medians_ms["tpot"] <= probe.ratios["tpot"] * 50
    slower = [p.medians_ms["tpot"] for p in sorted(r.capacity_probes,
                                                   key=lambda p: p.request_rate)]
    assert slower[-1] > slower[0]  # a busier engine decodes each token more slowly
    one = run_virtual_trial(spec(workload=lab(n=60, rate=2.0)))
    assert r.timings.measure_s is not None and one.timings.measure_s is not None
    assert r.timings.measure_s > one.timings.measure_s  # every probe is charged


def test_each_probe_keeps_what_it_measured() -> None:
    """Percentiles of every metric, throughputs, errors and send lag per probe: enough to
    gate another SLO later. The stored p99s are the numbers the probe's own gate read."""
    r = run_virtual_trial(spec(mode="capacity", workload=lab(n=60, rate=2.0),
                               capacity={"min_rate": 0.5, "max_rate": 64, "max_probes": 5}))
    assert len(r.capacity_probes) >= 3
    for probe in r.capacity_probes:
        assert set(probe.percentiles_ms) == {"ttft", "tpot", "itl", "e2el"}
        for metric, row in probe.percentiles_ms.items():
            assert list(row) == ["p50", "p90", "p95", "p99", "p99.9"], metric
            values = [v for v in row.values() if v is not None]
            assert values == sorted(values) and values[0] > 0, (metric, row)
        for metric, target in (("ttft", 300), ("tpot", 50)):
            if probe.early_abort is None:
                assert probe.percentiles_ms[metric]["p99"] == pytest.approx(
                    probe.ratios[metric] * target)
        assert probe.num_requests and probe.failed_requests == 0
        assert probe.duration_s and probe.request_throughput
        # the lab workload asks 128 output tokens of each request
        assert probe.output_throughput == pytest.approx(probe.request_throughput * 128,
                                                        rel=0.05)
        assert probe.total_token_throughput and probe.output_throughput
        assert probe.total_token_throughput > probe.output_throughput
        assert probe.send_lag_p99_ms is not None and probe.client_bound is False
    held = [p for p in r.capacity_probes if p.gate_passed]
    assert held and all(p.request_throughput == pytest.approx(p.request_rate, rel=0.35)
                        for p in held)


def test_a_probe_stored_before_the_measurements_reads_as_before() -> None:
    old = {"request_rate": 4.0, "gate_passed": True, "request_goodput": 3.9,
           "ratios": {"ttft": 0.5, "tpot": 0.7}, "prefix_cache_hit_tokens": None}
    probe = CapacityProbe.model_validate(old)
    assert probe.percentiles_ms == {} and probe.output_throughput is None
    assert probe.model_dump(exclude_defaults=True) == {
        k: v for k, v in old.items() if v is not None}


def test_noise_changes_runs_only_with_a_different_seed() -> None:
    noisy = {"noise": 0.05, "seed": 1}
    a = run_virtual_trial(spec(sim=noisy))
    b = run_virtual_trial(spec(sim=noisy))
    c = run_virtual_trial(spec(sim={**noisy, "seed": 2}))
    assert a.metrics["p99_ttft_ms"] == b.metrics["p99_ttft_ms"]
    assert a.metrics["p99_ttft_ms"] != c.metrics["p99_ttft_ms"]
