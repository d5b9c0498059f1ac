"""One SLO gate (slotune.workers.loadgen.score.gate.slo_gate) for live scoring, the pipeline and
rescoring.

The same run is gated three ways: live (:func:`slotune.workers.loadgen.score.scoring.score` over its
records), by the pipeline's error budget (:func:`slotune.workers.trial.capacity.over_error_budget`),
and after the fact from the percentiles a probe of it would store
(:func:`slotune.tuner.planning.rescore.probe_verdict`). Where the three could drift — the error
budget's edge, failures counted as infinitely slow, a run with nothing completed — they must agree.
"""

from __future__ import annotations

from typing import Any

import pytest

from slotune.tuner.planning.rescore import probe_verdict
from slotune.workers.contracts import SLO, CapacityProbe, TrialSpec, Workload
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.score.gate import slo_gate
from slotune.workers.loadgen.score.scoring import PROBE_PERCENTILES, Score, gate_percentiles, score
from slotune.workers.trial.capacity import over_error_budget

BUDGET = 0.05


def _request(i: int, ttft_s: float | None) -> RequestRecord:
    """A request answered in 4 tokens after ``ttft_s`` (None: failed)."""
    start = float(i)
    chunks: tuple[float, ...] = (() if ttft_s is None else
                                 tuple(start + ttft_s + k * 0.02 for k in range(4)))
    timings = RequestTimings(target=start, ready=start, start=start, chunks=chunks,
                             end=(chunks[-1] if chunks else start) + 0.001)
    return RequestRecord(index=i, prompt_len=10, requested_output_len=4, timings=timings,
                         output_tokens=None if ttft_s is None else 4,
                         error="HTTP 500" if ttft_s is None else None)


def _run(ok_ttfts_s: list[float], failed: int) -> list[RequestRecord]:
    ttfts: list[float | None] = [*ok_ttfts_s, *([None] * failed)]
    return [_request(i, t) for i, t in enumerate(ttfts)]


def _stored_probe(sc: Score, slo: SLO) -> CapacityProbe:
    """What a capacity probe of this run keeps (the pipeline's own fields)."""
    fields: dict[str, Any] = dict(
        request_rate=1.0, gate_passed=sc.gate, request_goodput=sc.request_goodput,
        percentiles_ms=gate_percentiles(sc.per_request, [*PROBE_PERCENTILES, slo.percentile]),
        num_requests=sc.num_requests, failed_requests=sc.failed, duration_s=sc.duration_s,
        request_throughput=sc.request_throughput, output_throughput=sc.output_throughput,
        total_token_throughput=sc.total_token_throughput, send_lag_p99_ms=0.0,
        client_bound=False)
    return CapacityProbe.model_validate(fields)


SLO_UNDER_TEST = SLO(percentile=90, ttft=300)
FAST = [0.1] * 95
CASES = {
    # name: (records, live gate holds, over the budget)
    "all fast": (_run(FAST, 0), True, False),
    "failures at the budget's edge count as infinitely slow": (_run(FAST, 5), True, False),
    "one failure past the budget (the live gate itself holds)": (_run(FAST, 6), True, True),
    "a slow tail over the target": (_run([0.1] * 80 + [0.5] * 20, 0), False, False),
    "just within the target": (_run([0.29] * 10, 0), True, False),
    "nothing completed": (_run([], 3), False, True),
}


@pytest.mark.parametrize("name", CASES)
def test_live_scoring_the_pipeline_and_rescoring_gate_a_run_alike(name: str) -> None:
    records, holds, over = CASES[name]
    spec = TrialSpec(run_id="t", model="m", workload=Workload(name="w"), slo=SLO_UNDER_TEST,
                     max_error_rate=BUDGET)
    live = score(records, duration_s=100.0, slo=SLO_UNDER_TEST,
                 percentiles=PROBE_PERCENTILES)
    budget = over_error_budget(spec, live, records)
    assert live.gate is holds, live.gate_reason
    assert (budget is not None) is over, budget
    stored = probe_verdict(_stored_probe(live, SLO_UNDER_TEST), SLO_UNDER_TEST,
                           own_slo=SLO_UNDER_TEST, max_error_rate=BUDGET)
    # A stored probe passes exactly when the live run held its gate within the budget.
    assert (stored.verdict == "pass") is (holds and not over), stored.reason


def test_failed_requests_are_infinitely_slow_in_every_caller() -> None:
    """Eleven failures of a hundred, a budget of 20%: p90 TTFT is a failed request's
    (infinite) both live and from the stored percentiles, though every answer was fast."""
    records = _run([0.05] * 89, 11)
    spec = TrialSpec(run_id="t", model="m", workload=Workload(name="w"), slo=SLO_UNDER_TEST,
                     max_error_rate=0.2)
    live = score(records, duration_s=100.0, slo=SLO_UNDER_TEST)
    assert over_error_budget(spec, live, records) is None
    assert not live.gate and "infinite (failed requests)" in live.gate_reason
    stored = probe_verdict(_stored_probe(live, SLO_UNDER_TEST), SLO_UNDER_TEST,
                           own_slo=SLO_UNDER_TEST, max_error_rate=0.2)
    assert stored.verdict == "fail" and "infinite (failed requests)" in stored.reason


def test_the_gate_orders_budget_before_emptiness_before_targets() -> None:
    slo = SLO(ttft=100)
    assert slo_gate(slo, {"ttft": None}, requests=4, failed=4,
                    max_error_rate=0.5).outcome == "over_budget"
    assert slo_gate(slo, {"ttft": None}, requests=4, failed=4).outcome == "none_completed"
    broken = slo_gate(slo, {"ttft": 150.0}, requests=4, failed=0)
    assert broken.outcome == "targets_broken"
    assert broken.broken_reason == "p99 ttft 150.0 ms > 100 ms"
    assert broken.worst_ratio == pytest.approx(1.5)
    assert slo_gate(slo, {"ttft": 100.0}, requests=4, failed=0).passed
