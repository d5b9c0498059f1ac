"""Workloads: stored by name, their spec replaced when it changes."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from slotune.tuner.db._repository import Repository, again_on_conflict
from slotune.tuner.db.errors import NotFound
from slotune.tuner.db.models import WorkloadRow
from slotune.tuner.db.records import WorkloadRecord
from slotune.tuner.db.session import db_now
from slotune.workers.contracts import Workload

__all__ = ["WorkloadRepository", "upsert_workload_row", "workload_by_name"]


class WorkloadRepository(Repository):
    """The workloads table."""

    def upsert_workload(self, workload: Workload) -> WorkloadRecord:
        """Store ``workload`` under its name; an existing one gets the new spec."""
        def write() -> WorkloadRecord:
            with self._session() as session:
                return WorkloadRecord.model_validate(upsert_workload_row(session, workload))

        return again_on_conflict(write)

    def get_workload(self, name: str) -> WorkloadRecord:
        with self._session() as session:
            return WorkloadRecord.model_validate(workload_by_name(session, name))

    def list_workloads(self) -> list[WorkloadRecord]:
        with self._session() as session:
            rows = session.scalars(select(WorkloadRow).order_by(WorkloadRow.name))
            return [WorkloadRecord.model_validate(row) for row in rows]


def upsert_workload_row(session: Session, workload: Workload) -> WorkloadRow:
    spec = workload.model_dump(mode="json")
    row = session.scalars(select(WorkloadRow).where(WorkloadRow.name == workload.name)
                          .with_for_update()).one_or_none()
    if row is None:
        now = db_now(session)
        row = WorkloadRow(name=workload.name, spec=spec, created_at=now, updated_at=now)
        session.add(row)
    elif row.spec != spec:
        row.spec = spec
        row.updated_at = db_now(session)
    session.flush()
    return row


def workload_by_name(session: Session, name: str) -> WorkloadRow:
    row = session.scalars(select(WorkloadRow).where(WorkloadRow.name == name)).one_or_none()
    if row is None:
        raise NotFound(f"no workload named {name!r}")
    return row
