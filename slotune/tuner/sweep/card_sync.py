"""Experiment cards, from the strategy that writes them to the sweep's rows.

A guided strategy keeps its one-variable experiments as cards (symptom, hypothesis, the
variable and values, what to expect, when to stop) and resolves each with a verdict once
its trials are in. The runner syncs them after every stored result: a card the store has
not seen is added, a card the strategy resolved is resolved there, once. Keyed by step, so
a resumed sweep (whose strategy writes its cards again) adds nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from slotune.tuner.db.records import Lease
from slotune.tuner.db.store import Store
from slotune.tuner.strategies import ExperimentCard

__all__ = ["sync_cards"]


def sync_cards(store: Store, sweep_id: int, cards: Sequence[ExperimentCard], *,
               lease: Lease) -> None:
    """Store what is new of ``cards``: new cards, and verdicts the store lacks."""
    if not cards:
        return
    stored = {c.step: c for c in store.list_cards(sweep_id)}
    for card in cards:
        data = card.to_dict()
        existing = stored.get(card.step)
        if existing is None:
            existing = store.add_card(
                sweep_id, step=card.step, symptom=card.symptom,
                evidence=card.evidence, hypothesis=card.hypothesis,
                variable=card.variable, values=list(card.values),
                expected_direction=card.expected, controls=card.controls,
                stop_condition=card.stop_condition, lease=lease)
        if card.verdict is not None and existing.verdict is None:
            store.resolve_card(existing.id, result={
                "summary": card.result, "results": data["results"],
                "baseline_value": card.baseline_value}, verdict=card.verdict,
                rollback=card.rollback or None, values=list(card.values), lease=lease)
