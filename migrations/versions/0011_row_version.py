"""Every row a read surface caches carries a version: ``row_version`` on ``sweeps``,
``sweep_trials`` and ``experiment_cards``, bumped by the database on every update.

Revision ID: 0011
Revises: 0010
Create Date: 2027-01-08

The API serves the frontier, the reports and the plans from snapshots of a workload's
sweeps cached until they change (issue 39). Whether they changed must be one cheap,
indexed query per request, and it must see every write — a trial finishing, a capacity
interval or a confirmation set on it, a sweep's progress, a card resolved — whoever
wrote it. None of those writes stamps a time, so the database counts them instead: a
trigger adds one to the row's ``row_version`` on each UPDATE. The count of a sweep's rows,
their largest id and the sum of their versions then change whenever any of them is
inserted, deleted or updated (:func:`slotune.tuner.db.snapshot.change_key`). The trigger touches
only the row being written: no other row is locked, so no write waits on another.

Rows stored before this revision start at 0. The downgrade drops the triggers and the
columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("sweeps", "sweep_trials", "experiment_cards")
_PG_FUNCTION = "slotune_bump_row_version"


def _dialect() -> str:
    name = op.get_bind().dialect.name
    if name not in ("sqlite", "postgresql"):
        raise NotImplementedError(f"revision 0011: no trigger for the {name} dialect")
    return name


def upgrade() -> None:
    dialect = _dialect()
    for table in TABLES:
        op.add_column(table, sa.Column("row_version", sa.BigInteger(), nullable=False,
                                       server_default="0"))
    if dialect == "postgresql":
        op.execute(f"""
CREATE FUNCTION {_PG_FUNCTION}() RETURNS trigger AS $$
BEGIN
    NEW.row_version := OLD.row_version + 1;
    RETURN NEW;
END
$$ LANGUAGE plpgsql""")
        for table in TABLES:
            op.execute(f"CREATE TRIGGER {table}_row_version BEFORE UPDATE ON {table} "
                       f"FOR EACH ROW EXECUTE FUNCTION {_PG_FUNCTION}()")
        return
    # SQLite has no BEFORE trigger that rewrites NEW: an AFTER trigger updates the row once
    # more (the WHEN keeps that second update from bumping again, recursive triggers or not).
    for table in TABLES:
        op.execute(f"""
CREATE TRIGGER {table}_row_version AFTER UPDATE ON {table}
FOR EACH ROW WHEN NEW.row_version = OLD.row_version
BEGIN
    UPDATE {table} SET row_version = OLD.row_version + 1 WHERE id = NEW.id;
END""")


def downgrade() -> None:
    dialect = _dialect()
    for table in TABLES:
        if dialect == "postgresql":
            op.execute(f"DROP TRIGGER IF EXISTS {table}_row_version ON {table}")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_row_version")
    if dialect == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {_PG_FUNCTION}()")
    for table in TABLES:
        op.drop_column(table, "row_version")
