"""A sweep's tally: what finished, what it cost, and the best so far.

The runner accounts every search result here once it is stored (and a resumed sweep
accounts what its predecessors stored), and adds the GPU-hours of attempts that are not
search results (retries, baselines, confirmation repeats); the confirmation phase leaves
its table here, and names the confirmed best (or none). The budget reads the counts,
the progress reads everything, and the capacity search of the next trial reads one
fact: the best objective so far, which in capacity mode is a capacity per GPU.

A result "improves" only beyond :data:`~slotune.tuner.strategies.NOISE_TOLERANCE` of the best:
a better one within noise still becomes the best, but does not reset the plateau count.
Needs neither a database nor an executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slotune.tuner.db.records import TrialRecord
from slotune.tuner.strategies import NOISE_TOLERANCE
from slotune.tuner.sweep.launcher import gpu_hours
from slotune.workers.contracts import TrialResult

__all__ = ["Tally"]


@dataclass
class Tally:
    """The search's finished results, in the order they were accounted."""

    results: list[tuple[TrialRecord, TrialResult]] = field(default_factory=list)
    gpu_hours: float = 0.0
    """Every attempt's, search or not (retries, baselines, repeats)."""
    best: tuple[float, int] | None = None
    """The best objective and the row id that holds it."""
    since_improvement: int = 0
    durations: list[float] = field(default_factory=list)
    """Wall seconds of the ok trials (the ETA's mean)."""
    confirmation: list[dict[str, Any]] = field(default_factory=list)
    """One row per candidate the confirmation re-ran (the progress's ``confirmation``)."""
    unconfirmed: str | None = None
    """Why no candidate held up in confirmation (then there is no best)."""

    def spent(self, result: TrialResult, gpus: int) -> None:
        """An attempt that is not a search result: its cost only."""
        self.gpu_hours += gpu_hours(result, gpus)

    def account(self, row: TrialRecord, result: TrialResult, gpus: int) -> None:
        """A stored search result: its cost, its duration, and whether it is the best."""
        self.results.append((row, result))
        self.spent(result, gpus)
        if result.status == "ok" and result.timings.total_s:
            self.durations.append(result.timings.total_s)
        improved = result.status == "ok" and result.objective > 0 and (
            self.best is None or result.objective > self.best[0] * (1 + NOISE_TOLERANCE))
        if improved:
            self.best = (result.objective, row.id)
            self.since_improvement = 0
        else:
            if (result.status == "ok" and self.best is not None
                    and result.objective > self.best[0]):
                self.best = (result.objective, row.id)  # better, but within noise
            self.since_improvement += 1

    def count(self, status: str) -> int:
        return sum(res.status == status for _, res in self.results)

    def mean_duration(self) -> float | None:
        return sum(self.durations) / len(self.durations) if self.durations else None

    def best_row(self) -> TrialRecord | None:
        """The stored row of the best result so far."""
        if self.best is None:
            return None
        return next((row for row, _ in self.results if row.id == self.best[1]), None)

    def best_number(self) -> int | None:
        """The trial number (not the row id) of the best result so far."""
        row = self.best_row()
        return None if row is None else row.number
