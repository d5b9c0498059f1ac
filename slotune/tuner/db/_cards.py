"""Experiment cards: the steps of a guided sweep, written as asked and resolved once run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from slotune.tuner.db._leases import hold, same_sweep
from slotune.tuner.db._repository import Repository, get_row, sweep_with_workload
from slotune.tuner.db.models import ExperimentCardRow, Verdict
from slotune.tuner.db.records import CardRecord, Lease
from slotune.tuner.db.session import db_now

__all__ = ["CardRepository"]


class CardRepository(Repository):
    """The experiment_cards table."""

    def add_card(
        self,
        sweep_id: int,
        *,
        step: int,
        symptom: str,
        hypothesis: str,
        variable: str,
        values: Sequence[Any],
        expected_direction: str,
        evidence: Mapping[str, Any] | None = None,
        result: Mapping[str, Any] | None = None,
        verdict: Verdict | None = None,
        rollback: Any = None,
        controls: Mapping[str, Any] | None = None,
        stop_condition: Sequence[str] | None = None,
        lease: Lease | None = None,
    ) -> CardRecord:
        """One step of a guided sweep; a step number used twice is a :class:`Conflict`."""
        with self._session() as session:
            sweep_with_workload(session, sweep_id)
            if lease is not None:
                hold(session, same_sweep(lease, sweep_id))
            card = ExperimentCardRow(
                sweep_id=sweep_id, step=step, symptom=symptom, evidence=dict(evidence or {}),
                hypothesis=hypothesis, variable=variable, values=list(values),
                expected_direction=expected_direction,
                result=dict(result) if result is not None else None, verdict=verdict,
                rollback=rollback, controls=dict(controls) if controls is not None else None,
                stop_condition=list(stop_condition) if stop_condition is not None else None,
                created_at=db_now(session),
            )
            session.add(card)
            session.flush()
            return CardRecord.model_validate(card)

    def resolve_card(self, card_id: int, *, result: Mapping[str, Any], verdict: Verdict,
                     rollback: Any = None, values: Sequence[Any] | None = None,
                     lease: Lease | None = None) -> CardRecord:
        """Write a card's outcome once its experiment has run (and, with ``values``,
        every value it tried: a line search adds values as it goes)."""
        with self._session() as session:
            card = get_row(session, ExperimentCardRow, card_id, "experiment card")
            if lease is not None:
                hold(session, same_sweep(lease, card.sweep_id))
            card.result = dict(result)
            card.verdict = verdict
            if values is not None:
                card.values = list(values)
            if rollback is not None:
                card.rollback = rollback
            session.flush()
            return CardRecord.model_validate(card)

    def list_cards(self, sweep_id: int) -> list[CardRecord]:
        with self._session() as session:
            sweep_with_workload(session, sweep_id)
            rows = session.scalars(select(ExperimentCardRow).where(
                ExperimentCardRow.sweep_id == sweep_id).order_by(ExperimentCardRow.step))
            return [CardRecord.model_validate(r) for r in rows]
