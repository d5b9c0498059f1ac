"""Experiment cards carry all nine fields of the playbook's card.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

The tuning playbook's card: symptom, evidence, hypothesis, the one variable, **controls**
(what was held fixed: model, GPU, workload and its seed, engine and its version, every
other knob, the trial order), expected direction, **stop condition** (the rules that end
a value's run at once), rollback (the incumbent's full configuration and the check that
restores it) and the conclusion (supported / rejected / inconclusive). The two missing
fields become columns: ``controls`` (JSON object) and ``stop_condition`` (JSON list of
rules, each a sentence). Cards stored before this revision have neither (NULL).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("experiment_cards", sa.Column("controls", _JSON, nullable=True))
    op.add_column("experiment_cards", sa.Column("stop_condition", _JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("experiment_cards", "stop_condition")
    op.drop_column("experiment_cards", "controls")
