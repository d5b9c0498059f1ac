"""Sweeps remember where their trials ran: ``sweeps.executor``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

``executor`` is JSON, ``{"kind": "ray" | "virtual", "gpus": N}``: the executor a sweep
was first run on and the GPUs it was given, written by ``sweep run`` when it creates the
sweep and by the first coordinator that claims a queued one. A resume runs the sweep on
it unless told otherwise (a sweep started in virtual time and resumed on Ray would
silently measure its remaining trials another way), and a serving coordinator never
takes over a sweep recorded on another kind of executor. NULL for sweeps stored before
this revision and for queued sweeps nobody has claimed yet: any executor may run them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sweeps", sa.Column("executor", sa.JSON().with_variant(JSONB(), "postgresql"),
                                      nullable=True))


def downgrade() -> None:
    op.drop_column("sweeps", "executor")
