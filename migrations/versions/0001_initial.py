"""Initial schema: workloads, sweeps, sweep_trials, experiment_cards, best_config_per_workload.

Revision ID: 0001
Revises:
Create Date: 2025-11-29

The tables are written out here, not imported from the models: a migration is a record
of what the schema was at this revision and must not change when the models do.

``best_config_per_workload`` is a stable contract for external BI tools. One row per
(workload, model, gpu, slo): the best trial with status ``ok`` — confirmed trials first,
then the highest objective, then the earliest trial. Columns:

=============  =========  ============================================================
workload       text       the workload's name (``workloads.name``)
model          text       the served model (``sweeps.model``)
gpu            text       the GPU type (``sweeps.gpu``)
slo            text       the SLO as canonical JSON, sorted keys, e.g.
                          ``{"percentile":99.0,"tpot":50.0,"ttft":300.0}``
config         json       the full engine configuration (vLLM argument names)
objective      float      goodput (req/s, 0 when the SLO gate failed) or, in capacity
                          mode, the highest rate (req/s) at which the gate held
capacity       float      per-replica capacity (req/s) where measured, else NULL
confirmed      boolean    the trial was re-run and held up (confirmation phase)
trial_id       integer    ``sweep_trials.id``
measured_at    timestamp  when the trial finished (UTC)
=============  =========  ============================================================

The window function (``ROW_NUMBER() OVER``) needs SQLite >= 3.25 or any Postgres.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts(name: str, nullable: bool = True) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


BEST_CONFIG_VIEW_SQL = """
CREATE VIEW best_config_per_workload AS
SELECT workload, model, gpu, slo, config, objective, capacity, confirmed, trial_id,
       measured_at
FROM (
    SELECT w.name AS workload,
           s.model AS model,
           s.gpu AS gpu,
           s.slo_key AS slo,
           t.config AS config,
           t.objective AS objective,
           t.capacity AS capacity,
           t.confirmed AS confirmed,
           t.id AS trial_id,
           t.finished_at AS measured_at,
           ROW_NUMBER() OVER (
               PARTITION BY w.name, s.model, s.gpu, s.slo_key
               ORDER BY CASE WHEN t.confirmed THEN 0 ELSE 1 END,
                        t.objective DESC,
                        t.id
           ) AS rank_in_group
    FROM sweep_trials t
    JOIN sweeps s ON s.id = t.sweep_id
    JOIN workloads w ON w.id = s.workload_id
    WHERE t.status = 'ok' AND t.objective IS NOT NULL
) ranked
WHERE rank_in_group = 1
"""


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("spec", _JSON, nullable=False),
        _ts("created_at", nullable=False),
        _ts("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workloads"),
        sa.UniqueConstraint("name", name="uq_workloads_name"),
    )
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("space", _JSON, nullable=False),
        sa.Column("slo", _JSON, nullable=False),
        sa.Column("slo_key", sa.String(200), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("gpu", sa.String(100), nullable=False),
        sa.Column("strategy", sa.String(50), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("budget", _JSON, nullable=False),
        sa.Column("progress", _JSON, nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("claimed_by", sa.String(200), nullable=True),
        _ts("heartbeat_at"),
        sa.Column("optuna_study_name", sa.String(200), nullable=True),
        sa.Column("stop_reason", sa.Text(), nullable=True),
        _ts("created_at", nullable=False),
        _ts("started_at"),
        _ts("finished_at"),
        sa.PrimaryKeyConstraint("id", name="pk_sweeps"),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"],
                                name="fk_sweeps_workload_id_workloads"),
        sa.UniqueConstraint("optuna_study_name", name="uq_sweeps_optuna_study_name"),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'done', 'failed', 'cancelled')",
            name="ck_sweeps_status"),
        sa.CheckConstraint("mode IN ('goodput', 'capacity')", name="ck_sweeps_mode"),
    )
    op.create_index("ix_sweeps_workload_id", "sweeps", ["workload_id"])
    op.create_index("ix_sweeps_status_created_at", "sweeps", ["status", "created_at"])
    op.create_table(
        "sweep_trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("params", _JSON, nullable=False),
        sa.Column("config", _JSON, nullable=False),
        sa.Column("spec", _JSON, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("failure_class", sa.String(32), nullable=True),
        sa.Column("objective", sa.Float(), nullable=True),
        sa.Column("capacity", sa.Float(), nullable=True),
        sa.Column("result", _JSON, nullable=True),
        sa.Column("diagnosis", _JSON, nullable=True),
        sa.Column("timings", _JSON, nullable=True),
        sa.Column("confirmed", sa.Boolean(), nullable=False),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("node", sa.String(200), nullable=True),
        _ts("created_at", nullable=False),
        _ts("started_at"),
        _ts("finished_at"),
        _ts("heartbeat_at"),
        sa.PrimaryKeyConstraint("id", name="pk_sweep_trials"),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE",
                                name="fk_sweep_trials_sweep_id_sweeps"),
        sa.UniqueConstraint("sweep_id", "number", "attempt",
                            name="uq_sweep_trials_sweep_id_number_attempt"),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'ok', 'infeasible', 'failed', 'lost')",
            name="ck_sweep_trials_status"),
        sa.CheckConstraint("attempt >= 1", name="ck_sweep_trials_attempt"),
    )
    op.create_index("ix_sweep_trials_sweep_id_status", "sweep_trials", ["sweep_id", "status"])
    op.create_table(
        "experiment_cards",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("symptom", sa.Text(), nullable=False),
        sa.Column("evidence", _JSON, nullable=False),
        sa.Column("hypothesis", sa.Text(), nullable=False),
        sa.Column("variable", sa.String(200), nullable=False),
        sa.Column("values", _JSON, nullable=False),
        sa.Column("expected_direction", sa.Text(), nullable=False),
        sa.Column("result", _JSON, nullable=True),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("rollback", _JSON, nullable=True),
        _ts("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_experiment_cards"),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE",
                                name="fk_experiment_cards_sweep_id_sweeps"),
        sa.UniqueConstraint("sweep_id", "step", name="uq_experiment_cards_sweep_id_step"),
        sa.CheckConstraint(
            "verdict IS NULL OR verdict IN ('supported', 'rejected', 'inconclusive')",
            name="ck_experiment_cards_verdict"),
    )
    op.execute(BEST_CONFIG_VIEW_SQL)


def downgrade() -> None:
    # Only ours: Optuna's tables in the same database are left as they are.
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")
    op.drop_table("experiment_cards")
    op.drop_index("ix_sweep_trials_sweep_id_status", table_name="sweep_trials")
    op.drop_table("sweep_trials")
    op.drop_index("ix_sweeps_status_created_at", table_name="sweeps")
    op.drop_index("ix_sweeps_workload_id", table_name="sweeps")
    op.drop_table("sweeps")
    op.drop_table("workloads")
