"""Every boot a sweep pays for is a row: ``sweep_trials`` gains ``role``, ``repeat`` and
``repeat_of``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

Until now a confirmation repeat kept only a summary in the sweep's progress JSON, and a
lossy trial's quality baseline nothing at all, though on a GPU each cost a full boot.
From this revision each is a trial row of its own with its whole result:

  ==========  ==========  ===========================================================
  role        text        ``search`` (an Optuna trial), ``repeat`` (a confirmation
                          re-run of a search trial) or ``baseline`` (the lossless
                          configuration a sweep's quality gate compares answers with)
  repeat      integer     which re-run a ``repeat`` row is (1…); 0 for the others
  repeat_of   integer     the search trial a ``repeat`` row re-runs (its ``id``);
                          NULL for the others
  ==========  ==========  ===========================================================

``number`` stays the Optuna trial number for ``search`` and ``repeat`` rows (a repeat
carries its trial's) and is the baseline's ordinal in the sweep for ``baseline`` rows;
the unique key becomes (sweep, role, number, repeat, attempt). Both views read ``search``
rows only, so a configuration is counted once however often it was re-run. Stored rows
are all ``search``: nothing else was ever stored.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GROUP = "w.name, s.model, s.gpu, s.slo_key"
_OLD_UNIQUE = "uq_sweep_trials_sweep_id_number_attempt"
_NEW_UNIQUE = "uq_sweep_trials_sweep_id_role_number_repeat_attempt"
_RATE = {
    "sqlite": "CAST(json_extract(w.spec, '$.arrivals.request_rate') AS REAL)",
    "postgresql": "CAST(w.spec -> 'arrivals' ->> 'request_rate' AS DOUBLE PRECISION)",
}


def _best_view_sql(*, search_only: bool) -> str:
    """The best-config view as of this revision, or as 0005 left it (frozen copies)."""
    role = " AND t.role = 'search'" if search_only else ""
    return f"""
CREATE VIEW best_config_per_workload AS
SELECT workload, model, gpu, slo, config, objective, capacity, gpus, capacity_per_gpu,
       confirmed, trial_id, measured_at, engine, engine_version, gpu_driver, model_revision,
       repeats,
       CASE WHEN COALESCE(engine_version, '') <> COALESCE(newest_version, '')
              OR COALESCE(gpu_driver, '') <> COALESCE(newest_driver, '')
              OR COALESCE(model_revision, '') <> COALESCE(newest_revision, '')
            THEN TRUE ELSE FALSE END AS stale
FROM (
    SELECT w.name AS workload, s.model AS model, s.gpu AS gpu, s.slo_key AS slo,
           t.config AS config, t.objective AS objective, t.capacity AS capacity,
           t.gpus AS gpus, CASE WHEN t.capacity IS NULL THEN NULL
                                ELSE t.capacity / t.gpus END AS capacity_per_gpu,
           t.confirmed AS confirmed, t.id AS trial_id, t.finished_at AS measured_at,
           t.engine AS engine, t.engine_version AS engine_version,
           t.gpu_driver AS gpu_driver, t.model_revision AS model_revision,
           t.repeats AS repeats, t.status AS status,
           FIRST_VALUE(t.engine_version) OVER newest AS newest_version,
           FIRST_VALUE(t.gpu_driver) OVER newest AS newest_driver,
           FIRST_VALUE(t.model_revision) OVER newest AS newest_revision,
           ROW_NUMBER() OVER (
               PARTITION BY {_GROUP}, CASE WHEN t.objective > 0 THEN 0 ELSE 1 END
               ORDER BY CASE WHEN t.confirmed THEN 0 ELSE 1 END,
                        CASE WHEN t.capacity IS NULL THEN 1 ELSE 0 END,
                        t.capacity / t.gpus DESC, t.objective DESC, t.id
           ) AS rank_in_group
    FROM sweep_trials t
    JOIN sweeps s ON s.id = t.sweep_id
    JOIN workloads w ON w.id = s.workload_id
    WHERE t.status = 'ok' AND t.objective IS NOT NULL{role}
    WINDOW newest AS (PARTITION BY {_GROUP} ORDER BY t.finished_at DESC, t.id DESC)
) ranked
WHERE rank_in_group = 1 AND objective > 0
"""


def _no_passing_view_sql(dialect: str, *, search_only: bool) -> str:
    """The no-passing-config view as of this revision, or as 0003 left it."""
    rate = _RATE.get(dialect, _RATE["postgresql"])
    role = " AND t.role = 'search'" if search_only else ""
    return f"""
CREATE VIEW workloads_without_passing_config AS
SELECT workload, model, gpu, slo, request_rate, closest, closest_config, closest_ratio,
       trials, measured_at
FROM (
    SELECT w.name AS workload, s.model AS model, s.gpu AS gpu, s.slo_key AS slo,
           CASE WHEN s.mode = 'capacity' THEN NULL ELSE {rate} END AS request_rate,
           t.id AS closest, t.config AS closest_config, t.headroom AS closest_ratio,
           COUNT(*) OVER (PARTITION BY {_GROUP}) AS trials,
           MAX(t.finished_at) OVER (PARTITION BY {_GROUP}) AS measured_at,
           MAX(CASE WHEN t.objective > 0 THEN 1 ELSE 0 END)
               OVER (PARTITION BY {_GROUP}) AS any_passing,
           ROW_NUMBER() OVER (
               PARTITION BY {_GROUP}
               ORDER BY CASE WHEN t.headroom IS NULL THEN 1 ELSE 0 END, t.headroom, t.id
           ) AS rank_in_group
    FROM sweep_trials t
    JOIN sweeps s ON s.id = t.sweep_id
    JOIN workloads w ON w.id = s.workload_id
    WHERE t.status = 'ok'{role}
) grouped
WHERE any_passing = 0 AND rank_in_group = 1
"""


def _drop_views() -> None:
    op.execute("DROP VIEW IF EXISTS workloads_without_passing_config")
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")


def _create_views(*, search_only: bool) -> None:
    op.execute(_best_view_sql(search_only=search_only))
    op.execute(_no_passing_view_sql(op.get_bind().dialect.name, search_only=search_only))


def upgrade() -> None:
    _drop_views()
    # SQLite changes a table's constraints by copying it: batch mode does that there and
    # plain ALTERs on Postgres.
    with op.batch_alter_table("sweep_trials") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False,
                                   server_default="search"))
        batch.add_column(sa.Column("repeat", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("repeat_of", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_sweep_trials_repeat_of_sweep_trials"), "sweep_trials",
                                 ["repeat_of"], ["id"], ondelete="CASCADE")
        batch.drop_constraint(op.f(_OLD_UNIQUE), type_="unique")
        batch.create_unique_constraint(op.f(_NEW_UNIQUE),
                                       ["sweep_id", "role", "number", "repeat", "attempt"])
        batch.create_check_constraint(op.f("ck_sweep_trials_role"),
                                      "role IN ('search', 'repeat', 'baseline')")
    _create_views(search_only=True)


def downgrade() -> None:
    _drop_views()
    op.execute("DELETE FROM sweep_trials WHERE role <> 'search'")
    with op.batch_alter_table("sweep_trials") as batch:
        batch.drop_constraint(op.f("ck_sweep_trials_role"), type_="check")
        batch.drop_constraint(op.f(_NEW_UNIQUE), type_="unique")
        batch.create_unique_constraint(op.f(_OLD_UNIQUE), ["sweep_id", "number", "attempt"])
        batch.drop_constraint(op.f("fk_sweep_trials_repeat_of_sweep_trials"), type_="foreignkey")
        batch.drop_column("repeat_of")
        batch.drop_column("repeat")
        batch.drop_column("role")
    _create_views(search_only=False)
