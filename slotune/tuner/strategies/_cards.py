"""Experiment cards: one step of a search, written down as a lab notebook entry.

The guided strategy writes one per step (symptom, evidence, hypothesis, the one variable,
the values tried, the expected direction, the result, the verdict, the rollback); the
strategy contract exposes them (``Strategy.cards``), the coordinator stores them and the
report shows them. Their own module, so the contract does not reach into one strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from slotune.workers.contracts import KnobValue

__all__ = ["ExperimentCard", "Verdict"]

Verdict = Literal["supported", "rejected", "inconclusive"]


@dataclass(slots=True)
class ExperimentCard:
    """One step of the loop, written down (the seed's one-variable experiment)."""

    step: int
    symptom: str
    evidence: dict[str, Any]
    hypothesis: str
    variable: str
    baseline_value: KnobValue
    values: list[KnobValue]
    """Every value tried, in order (a line search adds them as it goes)."""
    expected: str
    controls: dict[str, Any] = field(default_factory=dict)
    """What is held fixed while the one variable moves."""
    stop_condition: list[str] = field(default_factory=list)
    """The rules that end a value's run at once."""
    results: list[dict[str, Any]] = field(default_factory=list)
    result: str = ""
    verdict: Verdict | None = None
    rollback: dict[str, Any] = field(default_factory=dict)
    """The configuration to restore (the incumbent's, whole) and the check that shows it
    was restored."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "symptom": self.symptom, "evidence": self.evidence,
            "hypothesis": self.hypothesis, "variable": self.variable,
            "baseline_value": self.baseline_value, "values": self.values,
            "expected": self.expected, "controls": self.controls,
            "stop_condition": self.stop_condition, "results": self.results,
            "result": self.result, "verdict": self.verdict, "rollback": self.rollback,
        }
