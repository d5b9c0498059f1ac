"""Distribution-free bounds on a percentile, from how many of n values exceed a target.

Of ``n`` independent values, the number ``X`` above the ``q``-th percentile is
``Bin(n, 1 − q)``. A count ``v`` of values over a target shows the percentile within the
target at confidence ``c`` when ``P(X ≤ v) ≤ 1 − c``, and over it when ``P(X ≥ v) ≤
1 − c`` — the binomial argument of MLPerf LoadGen's early stopping. Pure arithmetic, and a
leaf: the contracts refuse a probe too small for any verdict with it, the verdicts
(:mod:`slotune.workers.loadgen.score.verdict`) judge probes with it.
"""

from __future__ import annotations

import math
from functools import lru_cache

__all__ = ["binomial_cdf", "fail_threshold", "min_requests_to_pass", "pass_threshold",
           "share_above"]


@lru_cache(maxsize=4096)
def _thresholds(n: int, share: float, alpha: float) -> tuple[int, int]:
    """(most exceedances a pass allows, fewest that fail) of ``n`` values when the share
    above target is ``share`` exactly: ``max{v: P(X ≤ v) ≤ α}`` (−1: none) and
    ``min{v: P(X ≥ v) ≤ α}`` (``n + 1``: none) for ``X ~ Bin(n, share)``."""
    if share <= 0.0:  # the maximum: one exceedance fails, none can be shown not to happen
        return 0, 1
    log_p, log_q = math.log(share), math.log1p(-share)
    cdf = 0.0
    allowed = -1
    fail_at = n + 1
    for v in range(n + 1):
        below = cdf  # P(X ≤ v − 1): P(X ≥ v) = 1 − below
        if 1.0 - below <= alpha:
            fail_at = v
            break
        log_pmf = (math.lgamma(n + 1) - math.lgamma(v + 1) - math.lgamma(n - v + 1)
                   + v * log_p + (n - v) * log_q)
        cdf = below + math.exp(log_pmf)
        if cdf <= alpha:
            allowed = v
    return allowed, fail_at


def share_above(percentile: float) -> float:
    """The share of values above the ``percentile`` (p99: 0.01)."""
    return max(0.0, 1.0 - percentile / 100.0)


def pass_threshold(n: int, percentile: float, confidence: float) -> int:
    """The most of ``n`` values that may exceed a target while the ``percentile`` is still
    shown within it at ``confidence`` (−1: ``n`` is too few for any pass)."""
    return _thresholds(n, share_above(percentile), 1.0 - confidence)[0] if n > 0 else -1


def fail_threshold(n: int, percentile: float, confidence: float) -> int:
    """The fewest of ``n`` values over a target that show the ``percentile`` over it at
    ``confidence`` (``n + 1`` when no count of ``n`` could)."""
    return _thresholds(n, share_above(percentile), 1.0 - confidence)[1] if n > 0 else 1


def min_requests_to_pass(percentile: float, confidence: float) -> int:
    """The fewest values with which a ``percentile`` can be shown within a target at
    ``confidence``, all of them within it: ``⌈ln(1 − c) / ln(q)⌉`` (p99 at 95 %: 299)."""
    share = share_above(percentile)
    if share <= 0.0:
        return 1
    return math.ceil(math.log(1.0 - confidence) / math.log1p(-share) - 1e-9)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) ≤ k)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for v in range(k + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(v + 1) - math.lgamma(n - v + 1)
                          + v * log_p + (n - v) * log_q)
    return min(1.0, total)
