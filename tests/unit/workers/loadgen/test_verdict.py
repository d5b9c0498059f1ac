"""A probe's verdict: the tail bound's thresholds and order statistics, steady state from
recorded timings, and how the two make pass / fail / overload / undecided."""

from __future__ import annotations

import math

import pytest

from slotune.workers.binomial import fail_threshold, min_requests_to_pass, pass_threshold
from slotune.workers.contracts import SLO
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.score.verdict import (
    STEADY_TOLERANCE,
    SteadyState,
    TailBound,
    judge,
    pooled,
    steady_state,
    tail_bound,
    worth_extending,
)
from slotune.workers.loadgen.scrape import ScrapeSummary


def _binomial_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


@pytest.mark.parametrize("n", [30, 299, 473, 1000, 3000])
@pytest.mark.parametrize("confidence", [0.8, 0.95])
def test_thresholds_are_the_binomial_quantiles_at_the_boundary(n: int, confidence: float
                                                                ) -> None:
    # If the share above target were exactly 1 % (p99 on target), seeing `allowed` or
    # fewer happens with probability at most 1 − confidence, and one more would not.
    alpha = 1 - confidence
    allowed, fail_at = pass_threshold(n, 99, confidence), fail_threshold(n, 99, confidence)
    if allowed >= 0:
        assert _binomial_cdf(allowed, n, 0.01) <= alpha
    assert _binomial_cdf(allowed + 1, n, 0.01) > alpha
    assert 1 - _binomial_cdf(fail_at - 1, n, 0.01) <= alpha
    assert 1 - _binomial_cdf(fail_at - 2, n, 0.01) > alpha
    assert allowed < fail_at


def test_the_fewest_requests_a_p99_pass_needs() -> None:
    # MLPerf's figure: 299 samples with none over for p99 at 95 %; 230 at 90 %.
    assert min_requests_to_pass(99, 0.95) == 299
    assert min_requests_to_pass(99, 0.90) == 230
    assert pass_threshold(298, 99, 0.95) == -1 and pass_threshold(299, 99, 0.95) == 0


def _values(n: int, over: int, target_s: float = 0.3) -> list[float]:
    return [target_s * 0.5] * (n - over) + [target_s * 2] * over


def test_a_tail_bound_passes_fails_or_cannot_tell() -> None:
    passing = tail_bound("ttft", 300.0, _values(1000, 2), 99, 0.95)
    assert passing.verdict == "pass" and passing.upper_ms == pytest.approx(150.0)
    failing = tail_bound("ttft", 300.0, _values(1000, 25), 99, 0.95)
    assert failing.verdict == "fail" and failing.lower_ms == pytest.approx(600.0)
    # 10 of 1000 is exactly the share on target: the sample cannot tell either way
    assert tail_bound("ttft", 300.0, _values(1000, 10), 99, 0.95).verdict == "undecided"
    # the sample's own p99 (the third-best of 300 is within target) is not a pass
    short = tail_bound("ttft", 300.0, _values(100, 0), 99, 0.95)
    assert short.verdict == "undecided" and short.upper_ms is None
    # a failed request is infinitely slow: it exceeds every target
    with_failures = tail_bound("ttft", 300.0, [0.1] * 990 + [math.inf] * 10, 99, 0.95)
    assert with_failures.exceeding == 10


def _record(i: int, arrival: float, end: float) -> RequestRecord:
    return RequestRecord(i, 100, 10, RequestTimings(arrival, arrival, arrival,
                                                     (arrival + 0.05, end), end))


def _run(rate: float, n: int, service_rate: float, latency: float = 0.2
         ) -> list[RequestRecord]:
    """Arrivals at ``rate``; one server finishing a request every 1/``service_rate`` s."""
    out, free = [], 0.0
    for i in range(n):
        arrival = i / rate
        start = max(arrival, free)
        free = start + 1.0 / service_rate
        out.append(_record(i, arrival, max(free, arrival + latency)))
    return out


def test_steady_state_sees_the_queue_grow_when_the_engine_falls_behind() -> None:
    kept_up = steady_state(_run(rate=5.0, n=300, service_rate=10.0))
    assert kept_up.steady and not kept_up.overloaded
    assert kept_up.completed_rate == pytest.approx(5.0, rel=0.03)
    behind = steady_state(_run(rate=5.0, n=300, service_rate=4.0))
    # 4 of 5 req/s get through: the in-flight count grows by ~1 req/s
    assert behind.overloaded and behind.queue_growth == pytest.approx(1.0, rel=0.15)
    assert behind.completed_rate == pytest.approx(4.0, rel=0.05)
    slightly = steady_state(_run(rate=5.0, n=300, service_rate=5.0 * (1 - 0.06)))
    # short by 6 %: not steady, yet within the growth's noise of the tolerance: undecided
    assert not slightly.steady and not slightly.overloaded
    assert slightly.growth_se > 0


def test_the_engines_waiting_queue_is_a_witness_too() -> None:
    records = _run(rate=5.0, n=300, service_rate=10.0)
    waiting = [(t / 2, t / 2 * 1.5) for t in range(120)]  # grows 1.5 req/s
    scrape = ScrapeSummary(available=True, gauges={"vllm:num_requests_waiting": waiting})
    seen = steady_state(records, scrape)
    assert seen.waiting_growth == pytest.approx(1.5, rel=0.01) and seen.overloaded


def test_a_probe_too_short_for_its_latency_says_nothing_of_steady_state() -> None:
    records = [_record(i, i * 0.01, i * 0.01 + 5.0) for i in range(50)]  # 0.5 s, 5 s each
    assert not steady_state(records).judged


def test_pooled_runs_weigh_their_windows() -> None:
    a = SteadyState(10.0, 5.0, 5.0, 0.0, None)
    b = SteadyState(30.0, 5.0, 4.0, 1.0, None)
    both = pooled([a, b])
    assert both.window_s == 40.0 and both.queue_growth == pytest.approx(0.75)


def _tail(verdict: str) -> TailBound:
    exceeding = {"pass": 0, "fail": 30, "undecided": 5}[verdict]
    return TailBound("ttft", 300.0, 1000, exceeding, 4, 16, None, None)


STEADY = SteadyState(60.0, 5.0, 5.0, 0.0, None)
FALLING_BEHIND = SteadyState(60.0, 5.0, 4.0, 1.0, None)


def test_judge_needs_steady_state_and_every_bound_for_a_pass() -> None:
    ok = {"ttft": _tail("pass"), "tpot": _tail("pass")}
    assert judge(ok, STEADY, client_bound=False, over_error_budget=False) == "pass"
    assert judge(ok, FALLING_BEHIND, client_bound=False, over_error_budget=False) \
        == "overload"
    unjudged = SteadyState(0.0, 0.0, 0.0, 0.0, None)
    assert judge(ok, unjudged, client_bound=False, over_error_budget=False) == "undecided"
    mixed = {"ttft": _tail("pass"), "tpot": _tail("undecided")}
    assert judge(mixed, STEADY, client_bound=False, over_error_budget=False) == "undecided"
    bad = {"ttft": _tail("pass"), "tpot": _tail("fail")}
    assert judge(bad, STEADY, client_bound=False, over_error_budget=False) == "fail"
    assert judge(ok, STEADY, client_bound=False, over_error_budget=True) == "fail"
    assert judge(ok, STEADY, client_bound=True, over_error_budget=False) == "client_bound"
    assert judge(ok, FALLING_BEHIND, client_bound=False, over_error_budget=False,
                 aborted=True) == "fail"
    assert STEADY_TOLERANCE == 0.05


def test_an_extension_is_run_only_where_it_could_decide() -> None:
    slo = SLO.parse("ttft:300")
    # 1 over of 300 (0.3 %): tripling the sample would likely pass
    hopeful = {"ttft": tail_bound("ttft", 300.0, _values(300, 1), 99, 0.95)}
    assert worth_extending(hopeful, 900, slo.percentile, 0.95)
    # 3 of 300 (1 %, on target): 900 requests could neither pass nor fail it
    stuck = {"ttft": tail_bound("ttft", 300.0, _values(300, 3), 99, 0.95)}
    assert not worth_extending(stuck, 900, slo.percentile, 0.95)


def test_a_draining_queue_does_not_read_as_more_than_was_offered() -> None:
    # A backlog at the start (every request of the first second arrives at once) drains
    # over the window: the in-flight count falls, yet the engine got through no more than
    # it was sent — the real engine's short probes read 79 req/s completed at 64 offered.
    records = _run(rate=5.0, n=300, service_rate=10.0, latency=0.2)
    backlog = [_record(1000 + i, 0.0, 0.2 + 0.5 * i) for i in range(40)]
    seen = steady_state(records + backlog)
    assert seen.queue_growth < 0
    assert seen.completed_rate == pytest.approx(seen.offered_rate)
