"""Which result is best: objective first; within noise of the best, more SLO headroom wins.

At a fixed request rate every configuration that carries the load scores about the same
goodput, so the objective alone cannot separate them. Among results within ``tolerance``
(relative) of the best objective, the smaller ``headroom`` (worst observed/target ratio)
ranks first: it meets the SLO with the most to spare (DESIGN §3, ties).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from slotune.workers.contracts import TrialResult

__all__ = ["NOISE_TOLERANCE", "best_index", "rank"]

NOISE_TOLERANCE = 0.02
"""Relative objective difference treated as noise (the simulator's calibrated jitter)."""

T = TypeVar("T")


def _headroom(result: TrialResult) -> float:
    return result.headroom if result.headroom is not None else float("inf")


def rank(results: Sequence[TrialResult], tolerance: float = NOISE_TOLERANCE) -> list[int]:
    """Indices of ``results``, best first."""
    if not results:
        return []
    top = max(r.objective for r in results)
    band = top * (1.0 - tolerance) if top > 0 else float("inf")

    def key(i: int) -> tuple[int, float, float]:
        r = results[i]
        within = r.objective > 0 and r.objective >= band
        # within noise of the best: headroom decides; otherwise the objective does
        return (0, _headroom(r), -r.objective) if within else (1, -r.objective, _headroom(r))

    return sorted(range(len(results)), key=key)


def best_index(results: Sequence[TrialResult], tolerance: float = NOISE_TOLERANCE) -> int | None:
    """Index of the best result, or None when there is none."""
    order = rank(results, tolerance)
    return order[0] if order else None
