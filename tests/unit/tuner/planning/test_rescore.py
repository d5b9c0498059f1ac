"""Any SLO from stored probes (slotune.tuner.planning.rescore): verdicts, capacity, bracket,
confidence.

The probes are written by hand here (their percentiles as a probe would store them), so
each rule can be tried where it decides; the end-to-end path (a real sweep's probes, the
planner, the CLI) is in tests/integration/tuner/planning/test_plan_rescored.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from slotune.tuner.planning.rescore import combine, probe_verdict, trial_capacity
from slotune.workers.contracts import SLO, CapacityProbe, TrialResult
from tests.support.rescored import probe

OWN = SLO(ttft=300, tpot=50)


def trial(*probes: CapacityProbe) -> TrialResult:
    return TrialResult(run_id="t", status="ok", capacity_probes=probes)


def capacity(result: TrialResult, slo: SLO) -> Any:
    return trial_capacity(result, slo, own_slo=OWN, max_error_rate=0.05)


# TPOT p99 grows with the rate: 20 ms at 4 req/s … 60 ms at 12; TTFT stays low.
LADDER = trial(probe(4, 100, 20), probe(6, 120, 28), probe(8, 150, 35), probe(10, 200, 45),
               probe(12, 280, 60))


def test_a_tighter_tpot_target_is_read_off_the_probes() -> None:
    found = capacity(LADDER, SLO(ttft=500, tpot=30))
    assert found.capacity == 6 and found.failing_rate == 8
    assert found.undecided is None
    # the straight line between the bracketing probes crosses 30 ms inside the bracket
    assert found.interpolated is not None and 6 < found.interpolated < 8
    assert [v.verdict for v in found.probes] == ["pass", "pass", "fail", "fail", "fail"]


def test_the_sweeps_own_slo_gives_the_sweeps_own_answer() -> None:
    found = capacity(LADDER, OWN)
    assert found.capacity == 10 and found.failing_rate == 12


def test_a_looser_slo_that_every_probe_passes_is_undecided_above() -> None:
    found = capacity(LADDER, SLO(ttft=1000, tpot=100))
    assert found.capacity == 12 and found.failing_rate is None
    assert "never reached" in (found.undecided or "")
    level = combine([found])[1].level
    assert level == "low"


def test_a_percentile_the_probes_did_not_keep_cannot_be_scored() -> None:
    found = capacity(LADDER, SLO(percentile=97, tpot=30))
    assert found.capacity is None and "p97 tpot was not kept" in (found.undecided or "")
    p999 = capacity(LADDER, SLO(percentile=99.9, tpot=30))  # kept: p99.9 = 1.2 × p99
    assert p999.capacity == 4


def test_failed_requests_break_the_gate_at_any_target() -> None:
    broken = trial(probe(4, 100, 20), probe(6, None, 25))
    found = capacity(broken, SLO(ttft=10_000, tpot=1000))
    assert found.capacity == 4 and found.failing_rate == 6
    assert "infinite" in found.probes[1].reason


def test_the_error_budget_of_the_trial_applies() -> None:
    erring = trial(probe(4, 100, 20), probe(6, 120, 25, failed_requests=8))
    assert capacity(erring, SLO(tpot=100)).capacity == 4
    lenient = trial_capacity(erring, SLO(tpot=100), own_slo=OWN, max_error_rate=0.10)
    assert lenient.capacity == 6


def test_an_early_stop_fails_a_slo_as_strict_on_its_metric_and_is_unknown_otherwise() -> None:
    stopped = probe(12, 200, 40, early_abort="7 requests broke tpot ≤ 50 ms",
                    early_abort_metric="tpot")
    ladder = trial(probe(4, 100, 20), probe(8, 150, 35), stopped)
    tighter = capacity(ladder, SLO(ttft=500, tpot=45))
    assert tighter.capacity == 8 and tighter.failing_rate == 12 and tighter.undecided is None
    looser = capacity(ladder, SLO(ttft=300, tpot=80))
    assert looser.capacity == 8 and looser.failing_rate is None
    assert "stopped early" in (looser.undecided or "")
    lower_pct = capacity(ladder, SLO(percentile=90, tpot=45))  # more breakers allowed
    assert lower_pct.probes[-1].verdict == "unknown"


def test_rows_stored_before_the_percentiles_cannot_be_scored() -> None:
    old = trial(CapacityProbe(request_rate=5, gate_passed=True, request_goodput=5,
                              ratios={"ttft": 0.5}))
    found = capacity(old, SLO(tpot=30))
    assert found.capacity is None and "stored before" in (found.undecided or "")
    assert combine([found])[0] is None


def test_a_noisy_pass_above_a_failure_is_not_believed() -> None:
    noisy = trial(probe(4, 100, 20), probe(6, 120, 40), probe(8, 150, 25))
    assert capacity(noisy, SLO(tpot=30)).capacity == 4


def test_a_client_that_fell_behind_makes_its_probe_unknown() -> None:
    lagging = trial(probe(4, 100, 20), probe(6, 120, 25, client_bound=True), probe(8, 150, 45))
    found = capacity(lagging, SLO(tpot=30))
    assert found.capacity == 4 and "fell behind" in (found.undecided or "")


def test_repeats_the_lowest_stands_and_their_spread_sets_the_confidence() -> None:
    first = capacity(LADDER, OWN)
    again = capacity(trial(probe(8, 150, 35), probe(9, 170, 40), probe(10, 230, 55)), OWN)
    rate, confidence = combine([first, again])
    assert rate == 9 and confidence.capacities == (10, 9)
    assert confidence.spread == pytest.approx(0.1)
    assert confidence.bracket == (9, 10) and confidence.measurements == 2
    assert confidence.level == "high"  # a tight bracket, repeats within 10%
    wide = capacity(trial(probe(4, 100, 20), probe(12, 280, 60)), OWN)
    assert combine([wide])[1].level == "medium"  # 4 … 12: a wide bracket


def test_a_verdict_says_why() -> None:
    verdict = probe_verdict(probe(8, 150, 35), SLO(tpot=30), own_slo=OWN,
                            max_error_rate=0.05)
    assert verdict.verdict == "fail" and verdict.reason == "p99 tpot 35.0 ms > 30 ms"
    assert verdict.worst_ratio == pytest.approx(35 / 30)
