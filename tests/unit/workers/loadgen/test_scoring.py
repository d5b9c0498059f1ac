"""Scoring against hand-worked numbers for hand-built timings (no server)."""

from __future__ import annotations

import math

import pytest

from slotune.workers.contracts import SLO
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.score.scoring import (
    CONSTRAINT_CAP,
    allowed_violations,
    gate_percentiles,
    percentile,
    score,
)


def rec(i: int, start: float, chunks: list[float], tokens: int | None, prompt_len: int,
        error: str | None = None) -> RequestRecord:
    timings = RequestTimings(target=start, ready=start, start=start, chunks=tuple(chunks),
                             end=(chunks[-1] if chunks else start) + 0.001)
    return RequestRecord(index=i, prompt_len=prompt_len, requested_output_len=tokens or 1,
                         timings=timings, output_tokens=tokens, error=error)


# A: TTFT 100, ITL 20 20 20, E2EL 160, TPOT 60/3 = 20 (ms)
A = rec(0, 0.0, [0.100, 0.120, 0.140, 0.160], 4, 10)
# B: TTFT 300, ITL 50 100, E2EL 450, TPOT 150/2 = 75
B = rec(1, 1.0, [1.300, 1.350, 1.450], 3, 20)
# C: one token — TTFT 200, E2EL 200, no ITL, no TPOT
C = rec(2, 2.0, [2.200], 1, 30)
# D: failed
D = rec(3, 3.0, [], None, 40, error="HTTP 500: boom")


def test_vllm_metrics_hand_worked() -> None:
    s = score([A, B, C, D], duration_s=4.0, percentiles=[99])
    assert (s.completed, s.failed, s.num_requests) == (3, 1, 4)
    assert s.total_input_tokens == 60 and s.total_output_tokens == 8
    assert s.request_throughput == pytest.approx(0.75)
    assert s.output_throughput == pytest.approx(2.0)
    assert s.total_token_throughput == pytest.approx(17.0)
    ttft = s.summaries["ttft"]
    assert ttft.mean == pytest.approx(200.0)
    assert ttft.median == pytest.approx(200.0)
    assert ttft.std == pytest.approx(81.6497, rel=1e-5)
    assert ttft.percentiles[99] == pytest.approx(298.0)
    assert ttft.percentiles[90] == pytest.approx(280.0)
    tpot = s.summaries["tpot"]  # C (one token) has no TPOT
    assert tpot.mean == pytest.approx(47.5)
    assert tpot.percentiles[99] == pytest.approx(74.45)
    itl = s.summaries["itl"]
    assert itl.mean == pytest.approx(42.0)
    assert itl.median == pytest.approx(20.0)
    assert itl.percentiles[99] == pytest.approx(98.0)
    e2el = s.summaries["e2el"]
    assert e2el.mean == pytest.approx(270.0)
    assert e2el.median == pytest.approx(200.0)
    # no SLO: every completed request is good, the gate holds trivially
    assert s.request_goodput == pytest.approx(0.75)
    assert s.gate and s.objective == pytest.approx(0.75)


def test_goodput_rule_one_token_counts_tpot_as_zero() -> None:
    s = score([A, B, C, D], 4.0, SLO(ttft=250, tpot=50))
    # A good; B TTFT 300 > 250; C TTFT 200 ok and TPOT counts 0; D failed
    assert s.good_requests == 2
    assert s.request_goodput == pytest.approx(0.5)
    assert s.token_goodput == pytest.approx(1.25)  # (4 + 1) tokens / 4 s


def test_failed_request_breaks_the_gate() -> None:
    s = score([A, B, C, D], 4.0, SLO(ttft=250, tpot=50))
    assert not s.gate and s.objective == 0.0
    ttft = next(c for c in s.checks if c.metric == "ttft")
    assert ttft.observed_ms is None and ttft.constraint == CONSTRAINT_CAP
    assert "failed requests" in s.gate_reason


def test_gate_fails_with_constraints_and_margins() -> None:
    s = score([A, B, C], 3.0, SLO(ttft=250, tpot=50))
    checks = {c.metric: c for c in s.checks}
    assert checks["ttft"].observed_ms == pytest.approx(298.0)
    assert checks["ttft"].constraint == pytest.approx(0.192)
    assert checks["ttft"].margin_ms == pytest.approx(-48.0)
    assert checks["tpot"].observed_ms == pytest.approx(74.45)
    assert checks["tpot"].constraint == pytest.approx(0.489)
    assert not s.gate and s.objective == 0.0
    assert s.request_goodput == pytest.approx(2 / 3)  # goodput is still reported


def test_gate_holds_objective_is_goodput() -> None:
    s = score([A, B, C], 3.0, SLO(ttft=301, tpot=80))
    assert s.gate
    assert s.good_requests == 3
    assert s.objective == pytest.approx(1.0)
    assert s.constraints["ttft"] == pytest.approx(298 / 301 - 1)
    assert s.constraints["tpot"] == pytest.approx(74.45 / 80 - 1)
    assert s.worst_ratio == pytest.approx(298 / 301)  # the tighter of the two


def test_itl_target_uses_each_requests_largest_gap() -> None:
    s = score([A, B, C], 3.0, SLO(itl=60))
    assert s.good_requests == 2  # B has a 100 ms gap
    check = s.checks[0]
    assert check.observed_ms == pytest.approx(98.0)  # pooled gaps, p99


def test_only_one_token_requests() -> None:
    s = score([C], 1.0, SLO(tpot=1))
    assert s.good_requests == 1 and s.gate and s.objective == pytest.approx(1.0)
    assert s.summaries["tpot"].mean == 0.0


def test_every_request_failed() -> None:
    s = score([D, rec(4, 0.0, [], None, 5, error="deadline")], 2.0, SLO(ttft=300))
    assert s.completed == 0 and s.good_requests == 0
    assert s.request_goodput == 0.0 and s.objective == 0.0 and not s.gate
    assert s.gate_reason == "no request completed successfully"
    assert s.summaries["ttft"].mean == 0.0  # vLLM: an empty list reads as 0


def test_no_requests_no_slo() -> None:
    s = score([], 0.0)
    assert not s.gate and s.objective == 0.0 and s.request_throughput == 0.0


def test_early_abort_zeroes_the_objective() -> None:
    s = score([A], 1.0, SLO(ttft=300), aborted="3 requests broke ttft")
    assert not s.gate and s.objective == 0.0
    assert s.gate_reason.startswith("early abort: 3 requests broke ttft")
    assert s.request_goodput == pytest.approx(1.0)


def test_usage_missing_falls_back_to_chunk_count() -> None:
    r = rec(0, 0.0, [0.1, 0.2, 0.3], None, 1)
    assert score([r], 1.0).total_output_tokens == 3


@pytest.mark.parametrize(("n", "q", "allowed"), [(500, 99, 5), (100, 99, 1), (1, 99, 0),
                                                  (10, 90, 1), (1000, 99.9, 1), (0, 99, 0)])
def test_allowed_violations(n: int, q: float, allowed: int) -> None:
    assert allowed_violations(n, q) == allowed


def test_allowed_violations_is_the_exact_boundary() -> None:
    n, q, target = 100, 99.0, 1.0
    k = allowed_violations(n, q)
    # one more breaker than allowed: the percentile exceeds the target whatever the rest
    worst_case_ok = [0.0] * (n - k - 1) + [target] + [1e9] * k
    assert percentile(worst_case_ok, q) > target or k == 0
    broken = [target] * (n - k - 1) + [target + 1e-9] * (k + 1)
    assert percentile(broken, q) > target


def test_percentile_with_infinity() -> None:
    assert percentile([1.0, 2.0, math.inf], 50) == 2.0
    assert math.isinf(percentile([1.0, 2.0, math.inf], 99))
    assert percentile([1.0, 2.0, 3.0], 99) == pytest.approx(2.98)


def test_gate_percentiles_are_the_numbers_the_gate_compares() -> None:
    """Stored percentiles gate another SLO the way :func:`score` would have gated it: the
    same values (a failed request infinitely slow: None), whatever the percentile."""
    with_failure = score([A, B, C, D], 4.0, SLO(ttft=250, tpot=50))
    stored = gate_percentiles(with_failure.per_request, (50, 99, 99.9))
    assert stored["ttft"]["p99"] is None and stored["ttft"]["p99.9"] is None
    assert stored["ttft"]["p50"] == pytest.approx(250.0)  # 100, 200, 300, inf
    clean = score([A, B, C], 3.0, SLO(percentile=90, ttft=250, tpot=50))
    again = gate_percentiles(clean.per_request, (90,))
    for check in clean.checks:  # what the gate observed, stored under its percentile
        assert again[check.metric]["p90"] == pytest.approx(check.observed_ms)
    assert set(again) == {"ttft", "tpot", "itl", "e2el"}
