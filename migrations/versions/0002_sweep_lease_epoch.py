"""Sweeps get a lease epoch: the fence every coordinator write for a sweep checks.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

``sweeps.lease_epoch`` counts the claims of a sweep. Each claim (first run, restart,
takeover, resume) raises it by one and hands the new value to the claiming coordinator;
every write that coordinator then makes for the sweep and its trials carries it and is
refused once another claim has raised it. A coordinator that stalled (SIGSTOP, a long GC,
a network partition) and wakes after a successor took over therefore cannot touch the
successor's trials. Existing sweeps start at 0: whoever claims them next holds epoch 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sweeps", sa.Column("lease_epoch", sa.Integer(), nullable=False,
                                      server_default="0"))


def downgrade() -> None:
    op.drop_column("sweeps", "lease_epoch")
