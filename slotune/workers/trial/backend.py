"""Where a trial's engine runs, and what one measured run returns.

A :class:`Backend` is the live engine (any adapter, a real process;
:mod:`slotune.workers.trial.live`) or the simulated engine in virtual time
(:mod:`slotune.workers.trial.virtual`); the pipeline (:mod:`slotune.workers.trial.pipeline`) and the
capacity search (:mod:`slotune.workers.trial.capacity`) drive either through this protocol alone, so
a virtual trial answers what a live one would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from slotune.workers.contracts import EngineFacts, GoldenCheck, QualityGate, Workload
from slotune.workers.loadgen.score.scoring import Score

if TYPE_CHECKING:  # annotations only: a backend's callers need no HTTP client loaded
    from slotune.workers.loadgen.runner import BenchmarkRun

__all__ = ["Backend", "Measured"]


@dataclass(frozen=True, slots=True)
class Measured:
    """One measured run at one rate: the records, their score, and what it cost."""

    run: BenchmarkRun
    score: Score
    warmup_s: float
    measure_s: float


class Backend(Protocol):
    """Where the engine of a trial runs. A failure is an :class:`EngineFailure`."""

    @property
    def base_url(self) -> str:
        """Where the booted engine answers (the quality command and the result say so)."""
        ...

    facts: EngineFacts
    """What the engine said about itself (filled in by :meth:`boot`, even when it fails)."""
    boot_s: float | None
    """What booting cost (set by :meth:`boot`, even when it fails)."""

    async def boot(self) -> None: ...

    async def measure(self, workload: Workload, *,
                      abort_allowed: Mapping[str, int] | None = None) -> Measured:
        """Warm up, load and score ``workload``; the engine dying is an EngineFailure.

        ``abort_allowed``: a capacity probe's early abort — stop once more requests than
        this broke a target (per metric), where its confidence bound can only fail; None:
        the spec's own early abort (the gate's percentile can no longer hold)."""
        ...

    async def before_probe(self) -> None:
        """Between capacity probes (drop the prefix cache where the engine can)."""
        ...

    async def golden(self, check: GoldenCheck) -> tuple[tuple[int, ...], ...]:
        """The booted engine's greedy answers to the golden prompts, in token ids
        (:class:`~slotune.workers.trial.quality.QualityUnavailable` when it cannot answer)."""
        ...

    async def baseline_golden(self, gate: QualityGate) -> tuple[tuple[int, ...], ...]:
        """The lossless baseline's answers: boots this configuration with the gate's
        lossless values, asks, and stops it — before :meth:`boot`, so the two never
        share a GPU (QualityUnavailable when the baseline cannot boot or answer)."""
        ...

    def log_tail(self) -> str | None: ...
