"""A capacity is an interval: ``sweep_trials`` gains ``capacity_low`` and ``capacity_high``,
and the best-config view shows them, with the sweep and trial number of its row.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

From this revision a capacity measurement is the interval its probes showed (issue 37):

  =============  =======  ============================================================
  capacity_low   float    the highest rate shown to pass (what a fleet is sized from)
  capacity_high  float    the lowest rate shown to fail; NULL when the search's
                          ceiling passed, or for rows measured before intervals
  capacity       float    the interval's centre (geometric); rows stored before this
                          revision keep theirs: the highest rate that held, which is
                          also their ``capacity_low`` (filled in here)
  =============  =======  ============================================================

A confirmed configuration's search row carries its confirmation's interval (measured on
fresh samples, independent of the search that made it a candidate): the number a sweep
reports for its winner never comes from the search rows that chose it.

The view ``best_config_per_workload`` adds ``capacity_low``, ``capacity_high``,
``sweep_id`` and ``number`` (the Optuna trial number: the log's, the report's and the
table's ``trial N``) and keeps every column and rule it had. The downgrade drops them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GROUP = "w.name, s.model, s.gpu, s.slo_key"


def _best_view_sql(*, interval: bool) -> str:
    """The best-config view as of this revision, or as 0007 left it (frozen copies)."""
    extra = "capacity_low, capacity_high, sweep_id, number," if interval else ""
    inner = ("t.capacity_low AS capacity_low, t.capacity_high AS capacity_high, "
             "t.sweep_id AS sweep_id, t.number AS number," if interval else "")
    return f"""
CREATE VIEW best_config_per_workload AS
SELECT workload, model, gpu, slo, config, objective, capacity, gpus, capacity_per_gpu,
       confirmed, trial_id, measured_at, engine, engine_version, gpu_driver, model_revision,
       repeats, {extra}
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
           t.repeats AS repeats, t.status AS status, {inner}
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
    WHERE t.status = 'ok' AND t.objective IS NOT NULL AND t.role = 'search'
    WINDOW newest AS (PARTITION BY {_GROUP} ORDER BY t.finished_at DESC, t.id DESC)
) ranked
WHERE rank_in_group = 1 AND objective > 0
"""


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")
    op.add_column("sweep_trials", sa.Column("capacity_low", sa.Float(), nullable=True))
    op.add_column("sweep_trials", sa.Column("capacity_high", sa.Float(), nullable=True))
    op.execute("UPDATE sweep_trials SET capacity_low = capacity WHERE capacity IS NOT NULL")
    op.execute(_best_view_sql(interval=True))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")
    # Neither column is read by the other view: SQLite drops them in place (3.35+).
    op.drop_column("sweep_trials", "capacity_high")
    op.drop_column("sweep_trials", "capacity_low")
    op.execute(_best_view_sql(interval=False))
