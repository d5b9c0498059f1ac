"""A run's name is ``run_id``: stored specs and results rename their ``trial_id`` key.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

One word per concept (issue 27): ``trial_id`` is a trial's row id (``sweep_trials.id``,
the API's and the views' ``trial_id``), and the name of one engine run — ``s3-t7-a1``
(sweep 3, Optuna trial 7, attempt 1), ``s3-baseline1-a1``, ``optuna-7`` — is
``run_id``. Until this revision that name was the ``trial_id`` key of the JSON in
``sweep_trials.spec`` (a ``TrialSpec``) and ``sweep_trials.result`` (a
``TrialResult``); this revision renames the key in every stored row, so everything read
back says ``run_id``:

  ==============  =====================================================================
  column          change
  ==============  =====================================================================
  spec            ``{"trial_id": "s3-t7-a1", …}`` → ``{"run_id": "s3-t7-a1", …}``
  result          the same
  ==============  =====================================================================

No other stored key names a run by ``trial_id``: the sweep's ``progress`` says
``trial_id`` for a row id (its confirmation rows), which stays, and lists the runs the
twin was fitted to under ``trials``. The contracts still read ``trial_id`` as an alias of
``run_id``, for JSON written outside the database (result files, saved reports); the
downgrade renames the key back, since the code before this revision knows no
``run_id``.

In SQL, one statement per column and dialect (``json_set`` on SQLite, ``jsonb``
operators on Postgres): rows without the key (NULL, or already renamed) are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("spec", "result")


def _rename_sql(dialect: str, column: str, old: str, new: str) -> str:
    """The statement renaming the top-level key ``old`` of every stored object in
    ``sweep_trials.<column>`` to ``new``."""
    if dialect == "sqlite":
        return (f"UPDATE sweep_trials SET {column} = json_set(json_remove({column}, "
                f"'$.{old}'), '$.{new}', json_extract({column}, '$.{old}')) "
                f"WHERE json_type({column}, '$.{old}') IS NOT NULL")
    if dialect == "postgresql":
        return (f"UPDATE sweep_trials SET {column} = ({column} - '{old}') || "
                f"jsonb_build_object('{new}', {column} -> '{old}') "
                f"WHERE jsonb_typeof({column}) = 'object' AND {column} ? '{old}'")
    raise NotImplementedError(f"revision 0008: no JSON rename for the {dialect} dialect")


def _rename(old: str, new: str) -> None:
    dialect = op.get_bind().dialect.name
    for column in _COLUMNS:
        op.execute(_rename_sql(dialect, column, old, new))


def upgrade() -> None:
    _rename("trial_id", "run_id")


def downgrade() -> None:
    _rename("run_id", "trial_id")
