"""A capacity probe's verdict: a statistical statement about one rate, not one sample's luck.

A probe at rate ``r`` *passes* only when both of these hold (DESIGN §3):

* **steady state** — the engine kept up with ``r``. Over the probe's steady window (its
  arrivals after a warm-in), the requests in flight (arrived, not yet answered: the
  client's count) did not grow, and neither did the engine's own queue
  (``vllm:num_requests_waiting``) where it was scraped: the *completed rate*, the offered
  rate less the in-flight count's growth per second (a least-squares slope), is within
  :data:`STEADY_TOLERANCE` of the offered rate. A probe too short to have a steady window
  says nothing about it;
* **the tail bound** — for each SLO target, the percentile's distribution-free upper
  confidence bound is within target. Of ``n`` values, ``v`` exceed the target (a failed
  request exceeds every one); if the true share above target were ``1 − q`` (the
  percentile exactly on target), ``v`` or fewer would happen with probability
  ``P(Bin(n, 1 − q) ≤ v)``. When that is at most ``1 − confidence`` the percentile is
  within target at that confidence — the same binomial argument as MLPerf LoadGen's early
  stopping, equivalently the order statistic ``x₍ₙ₋ᵥ₎`` as an upper bound of the
  percentile (:attr:`TailBound.upper_ms`). Symmetrically, ``P(Bin(n, 1 − q) ≥ v) ≤ 1 −
  confidence`` says the percentile is over target: a *fail*. Between the two the sample
  cannot tell.

The verdicts (:data:`Verdict`): ``pass``; ``fail`` (a tail bound is over target, or too
many requests errored); ``overload`` (the engine fell behind: the deficit exceeds the
tolerance by more than its own noise — said as such, whatever the tails say);
``undecided`` (neither: the pipeline extends the probe with more requests at the same
rate, and a probe still undecided at its cap stays so — never a pass); ``client_bound``
(the load generator fell behind its own schedule: the run measured the client, not the
engine).

Everything here is a pure function of recorded timings, so it is tested without a server
and a live probe and a virtual one are judged alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from slotune.workers.binomial import binomial_cdf, fail_threshold, pass_threshold
from slotune.workers.contracts import SLO, SLOMetric

if TYPE_CHECKING:  # annotations only
    from slotune.workers.loadgen.client import RequestRecord
    from slotune.workers.loadgen.scrape import ScrapeSummary

__all__ = [
    "STEADY_TOLERANCE",
    "WAITING_GAUGE",
    "SteadyState",
    "TailBound",
    "Verdict",
    "judge",
    "judging_span_s",
    "pooled",
    "steady_state",
    "tail_bound",
    "tail_bounds",
    "worth_extending",
]

Verdict = Literal["pass", "fail", "overload", "undecided", "client_bound"]

STEADY_TOLERANCE = 0.05
"""The completed rate may fall short of the offered rate by this share and the probe
still be steady; short of it by more, beyond the growth's noise, is an overload."""
OVERLOAD_Z = 1.645
"""Standard errors the deficit must clear to be an overload (one-sided 95 %)."""
WARM_IN_SHARE = 0.2
"""The first part of a probe's arrivals (at least one median request latency) while its
queue fills from empty: not part of the steady window."""
MIN_WINDOW_SHARE = 0.5
"""A steady window shorter than this share of the arrivals cannot say whether the queue
grows (the probe was too short for its latency)."""
WAITING_GAUGE = "vllm:num_requests_waiting"
_GRID = 200


# --- the tail bound ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TailBound:
    """What one SLO target's values say of its percentile, at the probe's confidence."""

    metric: SLOMetric
    target_ms: float
    n: int
    """Values the percentile is over (a failed request is one, infinitely slow)."""
    exceeding: int
    """Values over the target."""
    allowed: int
    """The most exceedances a pass tolerates at this ``n`` (−1: none, ``n`` too small)."""
    fail_at: int
    """The fewest exceedances that fail at this ``n``."""
    upper_ms: float | None
    """The percentile's upper confidence bound, ms (the order statistic); None when ``n``
    allows no bound or it is infinite (failed requests)."""
    lower_ms: float | None
    """The percentile's lower confidence bound, ms; None where there is none."""

    @property
    def verdict(self) -> Literal["pass", "fail", "undecided"]:
        if self.exceeding >= self.fail_at:
            return "fail"
        if self.exceeding <= self.allowed:
            return "pass"
        return "undecided"


def tail_bound(metric: SLOMetric, target_ms: float, values_s: Sequence[float],
               percentile: float, confidence: float) -> TailBound:
    """The bound of ``metric``'s ``percentile`` over ``values_s`` (seconds; ``inf`` for a
    failed request) against ``target_ms``."""
    ordered = sorted(values_s)
    n = len(ordered)
    exceeding = sum(1 for v in ordered if v * 1000.0 > target_ms)
    allowed = pass_threshold(n, percentile, confidence)
    fail_at = fail_threshold(n, percentile, confidence)

    def at(rank: int) -> float | None:  # 1-based order statistic, ms
        if not 1 <= rank <= n or math.isinf(ordered[rank - 1]):
            return None
        return ordered[rank - 1] * 1000.0

    return TailBound(metric, target_ms, n, exceeding, allowed, fail_at,
                     upper_ms=at(n - allowed) if allowed >= 0 else None,
                     lower_ms=at(n - fail_at + 1))


# --- steady state ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SteadyState:
    """Whether the engine kept up with the offered rate over the probe's steady window."""

    window_s: float
    """The steady window's length, engine seconds (0: too short to say)."""
    offered_rate: float
    """Requests that arrived in the window per second."""
    completed_rate: float
    """The offered rate less the in-flight count's growth per second: what the engine
    got through, req/s. Never above the offered rate: a queue that shrinks over a short
    window is the warm-in's backlog draining (or the slope's noise), not an engine
    serving more than it was sent."""
    queue_growth: float
    """How fast requests in flight grew, req/s (least squares; ~0 at steady state)."""
    waiting_growth: float | None
    """How fast the engine's waiting queue grew, req/s (None: not scraped)."""
    growth_se: float = 0.0
    """The standard error of the growth, req/s: requests in flight at a steady rate λ
    with latency L fluctuate by about √(λL) and forget their past within about L, so a
    window of W seconds reads a slope to about L·√(12λ / W³) — a short window cannot tell
    a slow growth from the noise."""

    @property
    def deficit(self) -> float:
        """The share of the offered rate the engine fell behind by (its worse witness)."""
        if self.offered_rate <= 0:
            return 0.0
        growth = max(self.queue_growth, self.waiting_growth or 0.0)
        return growth / self.offered_rate

    @property
    def judged(self) -> bool:
        return self.window_s > 0

    @property
    def steady(self) -> bool:
        return self.judged and self.deficit <= STEADY_TOLERANCE

    @property
    def overloaded(self) -> bool:
        """The engine clearly fell behind: the deficit is beyond the tolerance by more
        than its noise (:data:`OVERLOAD_Z` standard errors)."""
        if not self.judged or self.offered_rate <= 0:
            return False
        noise = OVERLOAD_Z * self.growth_se / self.offered_rate
        return self.deficit - noise > STEADY_TOLERANCE


def _slope(times: np.ndarray, values: np.ndarray) -> float:
    if len(times) < 2 or float(np.ptp(times)) <= 0:
        return 0.0
    return float(np.polyfit(times, values, 1)[0])


def _departure(record: RequestRecord) -> float:
    t = record.timings
    return t.end if t.end is not None else max(t.chunks, default=t.start)


def steady_state(records: Sequence[RequestRecord], scrape: ScrapeSummary | None = None,
                 ) -> SteadyState:
    """The steady-state evidence of one run (engine time): see the module docstring.

    A request arrives at its scheduled time (``target``: a request that waited for a
    concurrency slot was in the queue, the client's) and leaves when its answer ended or
    it failed."""
    if len(records) < 3:
        return SteadyState(0.0, 0.0, 0.0, 0.0, None)
    arrivals = np.sort(np.array([r.timings.target for r in records]))
    departures = np.sort(np.array([_departure(r) for r in records]))
    first, last = float(arrivals[0]), float(arrivals[-1])
    span = last - first
    latencies = [_departure(r) - r.timings.target for r in records if r.success]
    warm_in = max(WARM_IN_SHARE * span, float(np.median(latencies)) if latencies else 0.0)
    start = first + warm_in
    window = last - start
    if span <= 0 or window < MIN_WINDOW_SHARE * span:
        return SteadyState(0.0, 0.0, 0.0, 0.0, None)
    grid = np.linspace(start, last, _GRID)
    in_flight = (np.searchsorted(arrivals, grid, side="right")
                 - np.searchsorted(departures, grid, side="right")).astype(float)
    growth = _slope(grid, in_flight)
    offered = float(np.count_nonzero((arrivals > start) & (arrivals <= last))) / window
    waiting = _gauge_growth(scrape, start, last)
    latency = float(np.median(latencies)) if latencies else 0.0
    se = latency * math.sqrt(12.0 * offered / window**3)
    return SteadyState(window, offered, offered - max(growth, 0.0), growth, waiting, se)


def judging_span_s(records: Sequence[RequestRecord]) -> float:
    """Seconds of arrivals a run needs for its steady window to be judged: the window is
    what follows a warm-in of at least one median latency and must be half the arrivals,
    so three median latencies leave room."""
    latencies = [_departure(r) - r.timings.target for r in records if r.success]
    return 3.0 * float(np.median(latencies)) if latencies else 0.0


def _gauge_growth(scrape: ScrapeSummary | None, start: float, end: float) -> float | None:
    if scrape is None or not scrape.available:
        return None
    series = [(t, v) for t, v in scrape.gauges.get(WAITING_GAUGE, ()) if start <= t <= end]
    if len(series) < 3:
        return None
    times, values = (np.array(x, dtype=float) for x in zip(*series, strict=True))
    return _slope(times, values)


def pooled(parts: Iterable[SteadyState]) -> SteadyState:
    """Several runs at one rate as one witness: their rates weighted by window length."""
    judged = [p for p in parts if p.judged]
    total = sum(p.window_s for p in judged)
    if not judged or total <= 0:
        return SteadyState(0.0, 0.0, 0.0, 0.0, None)

    def mean(values: Iterable[float]) -> float:
        return sum(w * v for w, v in zip((p.window_s for p in judged), values,
                                         strict=True)) / total

    waits = [p.waiting_growth for p in judged]
    se = math.sqrt(sum((p.window_s * p.growth_se) ** 2 for p in judged)) / total
    return SteadyState(
        total, mean(p.offered_rate for p in judged), mean(p.completed_rate for p in judged),
        mean(p.queue_growth for p in judged),
        None if any(w is None for w in waits) else mean(w or 0.0 for w in waits), se)


# --- the verdict -------------------------------------------------------------------------


def judge(tails: Mapping[str, TailBound], steady: SteadyState, *, client_bound: bool,
          over_error_budget: bool, aborted: bool = False) -> Verdict:
    """The probe's verdict from its evidence (module docstring). An ``aborted`` run (its
    bound went over target before every request was sent) is a failure, whatever its cut
    window seemed to show of the queue."""
    if client_bound:
        return "client_bound"
    if aborted:
        return "fail"
    if steady.overloaded:
        return "overload"
    if over_error_budget or any(t.verdict == "fail" for t in tails.values()):
        return "fail"
    if steady.steady and all(t.verdict == "pass" for t in tails.values()):
        return "pass"
    return "undecided"


def worth_extending(tails: Mapping[str, TailBound], cap: int, percentile: float,
                    confidence: float) -> bool:
    """Whether pooling up to ``cap`` requests could plausibly decide an undecided probe.

    The sample's own share above target (smoothed) projects what the rest would add: an
    extension is worth its GPU time when it passes every target with probability at least
    :data:`FUTILITY`, or fails one with that probability. Otherwise the probe stays
    undecided now — where the share sits right at ``1 − q`` no affordable sample can
    tell, and the search moves on rather than pay for certainty it cannot buy."""
    p_all_pass = 1.0
    p_any_fail = 0.0
    for tail in tails.values():
        if tail.n <= 0:
            return True
        grown = max(tail.n, round(cap * tail.n / max(_requests_of(tails), 1)))
        more = grown - tail.n
        share = (tail.exceeding + 0.5) / (tail.n + 1.0)
        allowed = pass_threshold(grown, percentile, confidence) - tail.exceeding
        fail_at = fail_threshold(grown, percentile, confidence) - tail.exceeding
        p_all_pass *= binomial_cdf(allowed, more, share)
        p_any_fail = max(p_any_fail, 1.0 - binomial_cdf(fail_at - 1, more, share))
    return p_all_pass >= FUTILITY or p_any_fail >= FUTILITY


FUTILITY = 0.1
"""An extension that decides the probe less often than this is not run."""


def _requests_of(tails: Mapping[str, TailBound]) -> int:
    """The probe's request count, as its per-request targets saw it."""
    return max((t.n for m, t in tails.items() if m != "itl"), default=0) or \
        max((t.n for t in tails.values()), default=0)


def tail_bounds(values: Mapping[SLOMetric, Sequence[float]], slo: SLO,
                confidence: float) -> dict[str, TailBound]:
    """Every SLO target's :class:`TailBound` over its gate values (seconds)."""
    return {metric: tail_bound(metric, target, values.get(metric, ()), slo.percentile,
                               confidence)
            for metric, target in slo.targets.items()}
