"""What every repository of the store shares: one session helper and the row lookups.

A repository holds one concern of the store (workloads, sweeps, leases, trials, cards,
the views); :class:`~slotune.tuner.db.store.Store` composes them over one session factory. Each
opens its transactions through :meth:`Repository._session`, that is
:func:`slotune.tuner.db.session.session_scope`, the one place where a transaction begins, commits
or rolls back and where storage errors are translated, so no repository handles
SQLAlchemy's errors itself.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

from sqlalchemy import CursorResult, Select, Update, func, select
from sqlalchemy.orm import Session, sessionmaker

from slotune.tuner.db.errors import Conflict, NotFound
from slotune.tuner.db.models import ExperimentCardRow, Sweep, SweepTrial, WorkloadRow
from slotune.tuner.db.records import SweepRecord
from slotune.tuner.db.session import session_scope

__all__ = ["Repository", "again_on_conflict", "count_rows", "get_row", "rowcount",
           "sweep_record", "sweep_with_workload"]

_R = TypeVar("_R")
_M = TypeVar("_M", SweepTrial, ExperimentCardRow)


class Repository:
    """One concern's reads and writes; each public method is one transaction."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def _session(self) -> AbstractContextManager[Session]:
        return session_scope(self._sessions)


def again_on_conflict(write: Callable[[], _R]) -> _R:
    """Run ``write`` (its own transaction) once more if it hits a :class:`Conflict`.

    Two writers storing the same new workload both see it missing and both insert; the
    loser's retry finds the winner's row and updates it. A real duplicate (a study name
    already taken) conflicts again and is raised.
    """
    try:
        return write()
    except Conflict:
        return write()



def sweep_with_workload(session: Session, sweep_id: int) -> tuple[Sweep, str]:
    row = session.execute(
        select(Sweep, WorkloadRow.name).join(WorkloadRow, Sweep.workload_id == WorkloadRow.id)
        .where(Sweep.id == sweep_id).execution_options(populate_existing=True)
    ).one_or_none()
    if row is None:
        raise NotFound(f"no sweep {sweep_id}")
    return row


def get_row(session: Session, model: type[_M], key: int, what: str) -> _M:
    row = session.get(model, key, populate_existing=True)
    if row is None:
        raise NotFound(f"no {what} {key}")
    return row


def rowcount(session: Session, statement: Update) -> int:
    """Rows an UPDATE matched: how a conditional state change says whether it happened."""
    return cast("CursorResult[Any]", session.execute(statement)).rowcount


def count_rows(session: Session, query: Select[*tuple[Any, ...]]) -> int:
    return session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0


def sweep_record(sweep: Sweep, workload_name: str) -> SweepRecord:
    columns = {c.key: getattr(sweep, c.key) for c in Sweep.__table__.columns}
    return SweepRecord.model_validate({**columns, "workload": workload_name})
