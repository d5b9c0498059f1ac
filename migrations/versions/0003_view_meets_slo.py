"""The best-config view holds only configurations that met the SLO, and says what it knows.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

``best_config_per_workload`` is a contract for the dashboard, external BI and the
capacity planner. From this revision (docs/reference/best-config-view.md says the same):

* a row exists only for a configuration that **met the SLO**: a trial ``ok`` with an
  objective above 0 (goodput is 0 when the gate failed; capacity is 0 when no rate held);
* columns keep their meaning from 0001 (workload, model, gpu, slo, config, objective,
  capacity, confirmed, trial_id, measured_at) and gain:

  ==============  =======  =========================================================
  engine          text     ``vllm`` or ``sim`` (the simulated engine)
  engine_version  text     what the engine said it was (``GET /version``), else NULL
  gpu_driver      text     the GPU driver's version (NVML), else NULL
  model_revision  text     the weights' revision (``--revision`` or the HF snapshot),
                           else NULL
  repeats         integer  confirmation re-runs the winner held up in (0: none)
  stale           boolean  the group's newest measurement ran another engine version,
                           GPU driver or model revision: re-measure before trusting it
  ==============  =======  =========================================================

``workloads_without_passing_config`` has one row per (workload, model, gpu, slo) that was
measured (some trial finished ``ok``) with no configuration meeting the SLO — a capacity
problem at that rate, not a winner: ``request_rate`` (the workload's, req/s; NULL in
capacity mode), the ``closest`` trial (the smallest worst observed/target ratio),
``closest_config``, ``closest_ratio`` (1.3: its worst SLO metric was 30 % over target),
``trials`` (how many finished ok) and ``measured_at`` (the newest of them).

New trial columns are filled in for trials stored before this revision from their stored
results; a downgrade drops them and restores 0001's view.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GROUP = "w.name, s.model, s.gpu, s.slo_key"

BEST_VIEW_SQL = f"""
CREATE VIEW best_config_per_workload AS
SELECT workload, model, gpu, slo, config, objective, capacity, confirmed, trial_id,
       measured_at, engine, engine_version, gpu_driver, model_revision, repeats,
       CASE WHEN COALESCE(engine_version, '') <> COALESCE(newest_version, '')
              OR COALESCE(gpu_driver, '') <> COALESCE(newest_driver, '')
              OR COALESCE(model_revision, '') <> COALESCE(newest_revision, '')
            THEN TRUE ELSE FALSE END AS stale
FROM (
    SELECT w.name AS workload, s.model AS model, s.gpu AS gpu, s.slo_key AS slo,
           t.config AS config, t.objective AS objective, t.capacity AS capacity,
           t.confirmed AS confirmed, t.id AS trial_id, t.finished_at AS measured_at,
           t.engine AS engine, t.engine_version AS engine_version,
           t.gpu_driver AS gpu_driver, t.model_revision AS model_revision,
           t.repeats AS repeats, t.status AS status,
           FIRST_VALUE(t.engine_version) OVER newest AS newest_version,
           FIRST_VALUE(t.gpu_driver) OVER newest AS newest_driver,
           FIRST_VALUE(t.model_revision) OVER newest AS newest_revision,
           ROW_NUMBER() OVER (
               PARTITION BY {_GROUP}, CASE WHEN t.objective > 0 THEN 0 ELSE 1 END
               ORDER BY CASE WHEN t.confirmed THEN 0 ELSE 1 END, t.objective DESC, t.id
           ) AS rank_in_group
    FROM sweep_trials t
    JOIN sweeps s ON s.id = t.sweep_id
    JOIN workloads w ON w.id = s.workload_id
    WHERE t.status = 'ok' AND t.objective IS NOT NULL
    WINDOW newest AS (PARTITION BY {_GROUP} ORDER BY t.finished_at DESC, t.id DESC)
) ranked
WHERE rank_in_group = 1 AND objective > 0
"""

_RATE = {
    "sqlite": "CAST(json_extract(w.spec, '$.arrivals.request_rate') AS REAL)",
    "postgresql": "CAST(w.spec -> 'arrivals' ->> 'request_rate' AS DOUBLE PRECISION)",
}


def _no_passing_view_sql(dialect: str) -> str:
    rate = _RATE.get(dialect, _RATE["postgresql"])
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
    WHERE t.status = 'ok'
) grouped
WHERE any_passing = 0 AND rank_in_group = 1
"""


_OLD_BEST_VIEW_SQL = """
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
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")
    op.add_column("sweep_trials", sa.Column("engine", sa.String(16), nullable=True))
    op.add_column("sweep_trials", sa.Column("engine_version", sa.String(64), nullable=True))
    op.add_column("sweep_trials", sa.Column("gpu_driver", sa.String(64), nullable=True))
    op.add_column("sweep_trials", sa.Column("model_revision", sa.String(128), nullable=True))
    op.add_column("sweep_trials", sa.Column("headroom", sa.Float(), nullable=True))
    op.add_column("sweep_trials", sa.Column("repeats", sa.Integer(), nullable=False,
                                            server_default="0"))
    _backfill()
    op.execute(BEST_VIEW_SQL)
    op.execute(_no_passing_view_sql(op.get_bind().dialect.name))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS workloads_without_passing_config")
    op.execute("DROP VIEW IF EXISTS best_config_per_workload")
    for column in ("repeats", "headroom", "model_revision", "gpu_driver", "engine_version",
                   "engine"):
        op.drop_column("sweep_trials", column)
    op.execute(_OLD_BEST_VIEW_SQL)


def _backfill() -> None:
    """Engine, version and headroom of trials stored before this revision, from the
    JSON they were stored with (row by row: JSON paths differ between dialects)."""
    bind = op.get_bind()
    trials = sa.table("sweep_trials", sa.column("id", sa.Integer), sa.column("spec"),
                      sa.column("result"), sa.column("engine", sa.String),
                      sa.column("engine_version", sa.String), sa.column("gpu_driver", sa.String),
                      sa.column("model_revision", sa.String), sa.column("headroom", sa.Float))
    rows = bind.execute(sa.text("SELECT id, spec, result FROM sweep_trials")).all()
    for trial_id, spec, result in rows:
        spec, result = _json(spec), _json(result)
        engine = spec.get("engine") if spec else None
        facts = (result or {}).get("engine") or {}
        headroom = (result or {}).get("headroom")
        if engine is None and not facts and headroom is None:
            continue
        bind.execute(sa.update(trials).where(trials.c.id == trial_id).values(
            engine=engine, engine_version=facts.get("engine_version"),
            gpu_driver=facts.get("gpu_driver"), model_revision=facts.get("model_revision"),
            headroom=headroom))


def _json(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    return value if isinstance(value, dict) else dict(json.loads(value))
