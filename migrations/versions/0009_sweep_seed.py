"""A sweep's sampler seed is a column of its own: ``sweeps.seed``, out of ``budget``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

One word per concept (issue 27): a sweep's ``budget`` is what it may spend (trials,
GPU-hours, a deadline, confirmation repeats, parallel trials); the seed of its strategy's
sampler is not a budget, yet until this revision it was stored as ``budget.seed``. This
revision adds ``seed`` (BIGINT, 0 by default: Optuna's seeds reach 2**32 - 1) and moves
every stored ``budget.seed`` into it, removing the key from ``budget``; a sweep without
one keeps 0, what the coordinator used for it. The downgrade writes the column back into
``budget.seed`` and drops it.

In SQL, one statement per direction and dialect (``json_extract``/``json_remove`` on
SQLite, ``jsonb`` operators on Postgres). A ``budget.seed`` that is not an integer was
never a seed the sampler took (it failed such a sweep at start); it is moved as it
converts, or left where it is.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MOVE_IN = {
    "sqlite": "UPDATE sweeps SET seed = json_extract(budget, '$.seed'), "
              "budget = json_remove(budget, '$.seed') "
              "WHERE json_type(budget, '$.seed') = 'integer'",
    "postgresql": "UPDATE sweeps SET seed = (budget ->> 'seed')::bigint, "
                  "budget = budget - 'seed' "
                  "WHERE jsonb_typeof(budget) = 'object' "
                  "AND (budget ->> 'seed') ~ '^-?[0-9]{1,18}$'",
}
_MOVE_OUT = {
    "sqlite": "UPDATE sweeps SET budget = json_set(COALESCE(budget, '{}'), '$.seed', seed)",
    "postgresql": "UPDATE sweeps SET budget = COALESCE(budget, '{}'::jsonb) || "
                  "jsonb_build_object('seed', seed)",
}


def _dialect() -> str:
    name = op.get_bind().dialect.name
    if name not in _MOVE_IN:
        raise NotImplementedError(f"revision 0009: no JSON statements for the {name} dialect")
    return name


def upgrade() -> None:
    dialect = _dialect()
    op.add_column("sweeps", sa.Column("seed", sa.BigInteger(), nullable=False,
                                      server_default="0"))
    op.execute(_MOVE_IN[dialect])


def downgrade() -> None:
    dialect = _dialect()
    op.execute(_MOVE_OUT[dialect])
    op.drop_column("sweeps", "seed")
