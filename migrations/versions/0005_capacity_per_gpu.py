"""The best-config view ranks capacity per GPU: it gains ``gpus`` and ``capacity_per_gpu``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

In capacity mode a trial's objective is its per-replica capacity divided by the GPUs of
the replica (tensor × pipeline parallel size): GPUs, not replicas, are what a deployment
pays for, so one TP-8 replica must not win over two TP-4 ones that carry more. From this
revision ``sweep_trials`` has ``gpus`` (the devices one replica occupies; filled in for
stored trials from their configuration) and ``best_config_per_workload`` gains:

  ================  =======  =======================================================
  gpus              integer  devices one replica of the configuration occupies
  capacity_per_gpu  float    ``capacity / gpus`` (req/s per GPU); NULL where no
                             capacity was measured (goodput mode)
  ================  =======  =======================================================

Within a group the order is: confirmed first, then measured capacity per GPU (rows
without one after), then the objective, then the earliest trial. Every other column
keeps its meaning from 0003; a downgrade drops ``gpus`` and restores 0003's view.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GROUP = "w.name, s.model, s.gpu, s.slo_key"


def _best_view_sql(*, per_gpu: bool) -> str:
    """The view as of this revision (``per_gpu``) or as 0003 left it (a frozen copy: a
    migration must not change when a later one does)."""
    columns = "gpus, capacity_per_gpu, " if per_gpu else ""
    inner = ("t.gpus AS gpus, CASE WHEN t.capacity IS NULL THEN NULL "
             "ELSE t.capacity / t.gpus END AS capacity_per_gpu," if per_gpu else "")
    order = ("CASE WHEN t.capacity IS NULL THEN 1 ELSE 0 END, t.capacity / t.gpus DESC, "
             if per_gpu else "")
    return f"""
CREATE VIEW best_config_per_workload AS
SELECT workload, model, gpu, slo, config, objective, capacity, {columns}confirmed, trial_id,
       measured_at, engine, engine_version, gpu_driver, model_revision, repeats,
       CASE WHEN COALESCE(engine_version, '') <> COALESCE(newest_version, '')
              OR COALESCE(gpu_driver, '') <> COALESCE(newest_driver, '')
              OR COALESCE(model_revision, '') <> COALESCE(newest_revision, '')
            THEN TRUE ELSE FALSE END AS stale
FROM (
    SELECT w.name AS workload, s.model AS model, s.gpu AS gpu, s.slo_key AS slo,
           t.config AS config, t.objective AS objective, t.capacity AS capacity, {inner}
           t.confirmed AS confirmed, t.id AS trial_id, t.finished_at AS measured_at,
           t.engine AS engine, t.engine_version AS engine_version,
           t.gpu_driver AS gpu_driver, t.model_revision AS model_revision,
           t.repeats AS repeats, t.status AS status,
           FIRST_VALUE(t.engine_version) OVER newest AS newest_version,
           FIRST_VALUE(t.gpu_driver) OVER newest AS newest_driver,
           FIRST_VALUE(t.model_revision) OVER newest AS newest_revision,
           ROW_NUMBER() OVER (
               PARTITION BY {_GROUP}, CASE WHEN t.objective > 0 THEN 0 ELSE 1 END
               ORDER BY CASE WHEN t.confirmed THEN 0 ELSE 1 END, {order}t.objective DESC,
                        t.id
           ) AS rank_in_group
    FROM sweep_trials t
    JOIN sweeps s ON s.id = t.sweep_id
    JOIN workloads w ON w.id = s.workload_id
    WHERE t.status = 'ok' AND t.objective IS NOT NULL
    WINDOW newest AS (PARTITION BY {_GROUP} ORDER BY t.finished_at DESC, t.id DESC)
) ranked
WHERE rank_in_group = 1 AND objective > 0
"""


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")
    op.add_column("sweep_trials", sa.Column("gpus", sa.Integer(), nullable=False,
                                            server_default="1"))
    _backfill()
    op.execute(_best_view_sql(per_gpu=True))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")
    op.drop_column("sweep_trials", "gpus")
    op.execute(_best_view_sql(per_gpu=False))


def _backfill() -> None:
    """GPUs per replica of the trials stored before this revision: tensor × pipeline
    parallel size of their configuration (the rule of ``slotune.workers.contracts.replica_gpus``,
    restated so this revision does not change if that code does)."""
    bind = op.get_bind()
    trials = sa.table("sweep_trials", sa.column("id", sa.Integer),
                      sa.column("gpus", sa.Integer))
    for trial_id, config in bind.execute(sa.text("SELECT id, config FROM sweep_trials")).all():
        flags = _json(config)
        gpus = _size(flags.get("tensor_parallel_size")) * _size(
            flags.get("pipeline_parallel_size"))
        if gpus != 1:
            bind.execute(sa.update(trials).where(trials.c.id == trial_id).values(gpus=gpus))


def _size(value: Any) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def _json(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    return value if isinstance(value, dict) else dict(json.loads(value))
