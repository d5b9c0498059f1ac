"""The playbook's symptoms beside the wall, each made true on the simulated engine (or, for
what the engine cannot cause, in the run's own records) and named by the diagnosis.
(The tail-mixture sweep, with its report, is in
tests/integration/tuner/sweep/test_coordinator.py.)"""

from __future__ import annotations

import uuid
from typing import Any

from slotune.workers.contracts import SLO, TrialSpec
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.diagnose.symptoms import symptoms
from slotune.workers.loadgen.runner import SendLag
from slotune.workers.trial.virtual import run_virtual_trial


def _spec(dataset: dict[str, Any], rate: float, **knobs: Any) -> TrialSpec:
    return TrialSpec.model_validate({
        "run_id": f"sym-{uuid.uuid4().hex[:6]}", "engine": "sim",
        "model": "Qwen/Qwen2.5-7B-Instruct", "knobs": {"quantization": "fp8", **knobs},
        "engine_args": {"max_model_len": 8192},
        "workload": {"name": "w", "dataset": dataset, "arrivals": {"request_rate": rate},
                     "num_prompts": 300, "warmup_requests": 4},
        "slo": SLO.parse("ttft:300,tpot:50"), "gpu": "rtx4090",
    })


def _kinds(result: Any) -> dict[str, dict[str, Any]]:
    return {s["kind"]: s for s in (result.diagnosis or {}).get("symptoms", [])}


def test_one_input_length_is_no_mixture() -> None:
    result = run_virtual_trial(_spec({"kind": "random", "input_len": 2048, "output_len": 64},
                                     6.0))
    assert "tail_mixture" not in _kinds(result)


def test_shared_prefixes_without_caching_name_the_low_hit_rate_and_suggest_caching() -> None:
    shared = {"kind": "prefix_repetition", "prefix_len": 1024, "suffix_len": 128,
              "num_prefixes": 4, "output_len": 64}
    off = _kinds(run_virtual_trial(_spec(shared, 3.0, enable_prefix_caching=False)))
    low = off["prefix_cache_low"]
    assert "shares 1024-token prefixes" in low["symptom"] and "caching is off" in low["symptom"]
    assert "--enable-prefix-caching" in low["next_step"]
    on = _kinds(run_virtual_trial(_spec(shared, 3.0, enable_prefix_caching=True)))
    assert "prefix_cache_low" not in on  # the cache serves them: no symptom
    unshared = _kinds(run_virtual_trial(_spec({"kind": "random", "input_len": 1024,
                                               "output_len": 64}, 3.0,
                                              enable_prefix_caching=False)))
    assert "prefix_cache_low" not in unshared  # nothing to share, nothing to miss


def test_a_trial_mostly_spent_booting_names_start_up_with_the_eager_ab() -> None:
    short = _spec({"kind": "random", "input_len": 256, "output_len": 32}, 4.0)
    short = short.model_copy(update={"workload": short.workload.model_copy(
        update={"num_prompts": 40})})
    result = run_virtual_trial(short)
    startup = _kinds(result)["startup"]
    assert startup["evidence"]["startup_share"] > 0.5
    assert "--enforce-eager A/B" in startup["next_step"] and "diagnostic" in startup["next_step"]


def _record(i: int, error: str | None = None) -> RequestRecord:
    return RequestRecord(index=i, prompt_len=128, requested_output_len=16,
                         timings=RequestTimings(target=0.0, ready=0.0, start=0.0), error=error)


def test_a_client_that_fell_behind_is_an_invalid_measurement_not_a_wall() -> None:
    lag = SendLag(mean_ms=40.0, p50_ms=30.0, p99_ms=120.0, max_ms=150.0, tolerance_ms=5.0,
                  client_bound=True)
    found = {s.kind: s for s in symptoms(
        records=[], per_request=[], slo=None, workload=_spec({"kind": "random"}, 1).workload,
        engine_flags={}, send_lag=lag, prefix_hit_rate=None, boot_s=None, total_s=None)}
    assert found["client_bound"].next_step.startswith("measurement invalid, not a wall")


def test_failing_requests_come_first() -> None:
    records = [_record(i, "timeout after 600 s" if i < 3 else None) for i in range(50)]
    found = {s.kind: s for s in symptoms(
        records=records, per_request=[None] * 50, slo=None,
        workload=_spec({"kind": "random"}, 1).workload, engine_flags={}, send_lag=None,
        prefix_hit_rate=None, boot_s=None, total_s=None)}
    errors = found["errors"]
    assert errors.evidence["error_rate"] == 3 / 50 and errors.evidence["timeouts"] == 3
    assert errors.next_step.startswith("fix the errors first")
