"""Migrations on both backends: up, down, up again; the models agree with them; the
CLI runs them; Optuna's tables in the same database are never touched."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from slotune.tuner.db import migrate
from slotune.tuner.db.errors import MigrationError, StorageUnavailable
from slotune.tuner.db.models import BEST_CONFIG_VIEW, OUR_TABLES, Base
from slotune.tuner.db.optuna_storage import create_or_load_study, optuna_storage
from slotune.tuner.db.session import make_db_engine
from slotune.tuner.db.store import Store
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from slotune.workers.contracts import SLO, EngineFacts, TrialResult, TrialSpec, Workload

OURS = {*OUR_TABLES, migrate.VERSION_TABLE}


def _tables_and_views(url: str) -> tuple[set[str], set[str]]:
    engine = make_db_engine(url)
    try:
        inspector = inspect(engine)
        return set(inspector.get_table_names()), set(inspector.get_view_names())
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    assert migrate.current_revision(empty_url) is None

    migrate.upgrade(empty_url)
    tables, views = _tables_and_views(empty_url)
    assert tables >= OURS
    assert BEST_CONFIG_VIEW in views
    assert migrate.current_revision(empty_url) == migrate.head_revision()

    migrate.downgrade(empty_url, "base")
    tables, views = _tables_and_views(empty_url)
    assert not (set(OUR_TABLES) & tables)
    assert BEST_CONFIG_VIEW not in views
    assert migrate.current_revision(empty_url) is None

    migrate.upgrade(empty_url)
    tables, views = _tables_and_views(empty_url)
    assert tables >= OURS and BEST_CONFIG_VIEW in views


def test_models_match_the_migrations(migrated_url: str) -> None:
    engine = make_db_engine(migrated_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={
                "compare_type": True,
                "include_object": lambda obj, name, type_, reflected, other:
                    type_ != "table" or name in OUR_TABLES,
            })
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_optuna_and_our_schema_coexist_both_orders(empty_url: str) -> None:
    import optuna

    # Optuna first (it stamps its own alembic_version), then ours on top.
    create_or_load_study("before-ours", url=empty_url)
    migrate.upgrade(empty_url)
    tables, _ = _tables_and_views(empty_url)
    assert {"studies", "trials", "alembic_version"} <= tables
    assert tables >= OURS

    # Our downgrade drops only ours: Optuna's studies survive it.
    migrate.downgrade(empty_url, "base")
    tables, _ = _tables_and_views(empty_url)
    assert {"studies", "trials", "alembic_version"} <= tables
    assert not (set(OUR_TABLES) & tables)
    assert "before-ours" in optuna.get_all_study_names(optuna_storage(empty_url))

    # Ours again, then Optuna opens the same database without complaint.
    migrate.upgrade(empty_url)
    create_or_load_study("after-ours", url=empty_url)
    names = optuna.get_all_study_names(optuna_storage(empty_url))
    assert {"before-ours", "after-ours"} <= set(names)


def test_cli_db_upgrade_and_downgrade(empty_url: str,
                                      venv_script: Callable[[str], Path]) -> None:
    slotune = str(venv_script("slotune"))
    up = subprocess.run([slotune, "db", "upgrade", "--database-url", empty_url],
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    assert migrate.current_revision(empty_url) == migrate.head_revision()

    down = subprocess.run([slotune, "db", "downgrade", "base", "--database-url", empty_url],
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert migrate.current_revision(empty_url) is None


def test_cli_unreachable_database_is_one_redacted_line(
        venv_script: Callable[[str], Path]) -> None:
    url = "postgresql://slotune:hunter2@127.0.0.1:1/nowhere"
    run = subprocess.run([str(venv_script("slotune")), "db", "upgrade", "--database-url", url],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "hunter2" not in run.stderr + run.stdout
    assert "Traceback" not in run.stderr
    assert "unavailable" in run.stderr


def test_unreachable_and_unknown_revision_are_storage_errors(empty_url: str) -> None:
    with pytest.raises(StorageUnavailable) as unreachable:
        migrate.upgrade("postgresql://slotune:hunter2@127.0.0.1:1/nowhere")
    assert "hunter2" not in str(unreachable.value)
    with pytest.raises(MigrationError):
        migrate.upgrade(empty_url, "no-such-revision")


def test_the_view_revision_fills_in_trials_stored_before_it(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    with Store(empty_url) as store:
        sweep = store.create_sweep(name="s", workload=Workload(name="w"), slo=SLO(ttft=300),
                                   space={}, model="m", gpu="h100-sxm", strategy="tpe")
        spec = TrialSpec(run_id="t", engine="vllm", model="m", workload=Workload(name="w"),
                         slo=SLO(ttft=300))
        trial = store.start_trial(sweep.id, number=0, params={}, spec=spec)
        store.finish_trial(trial.id, TrialResult(run_id="t", status="ok", objective=5.0,
                                                 headroom=0.7, engine=EngineFacts(
                                                     engine_version="0.32.0")))
    migrate.downgrade(empty_url, "0002")  # as a database migrated before this revision
    engine = make_db_engine(empty_url)
    try:
        columns = {c["name"] for c in inspect(engine).get_columns(BEST_CONFIG_VIEW)}
        assert "engine_version" not in columns and "objective" in columns  # 0001's view
    finally:
        engine.dispose()
    migrate.upgrade(empty_url)
    with Store(empty_url) as store:
        filled = store.get_trial(trial.id)
        assert (filled.engine, filled.engine_version, filled.headroom) == ("vllm", "0.32.0", 0.7)
        [row] = store.best_for_workload("w")
        assert (row.trial_id, row.engine_version, row.stale) == (trial.id, "0.32.0", False)


def test_the_per_gpu_revision_counts_the_gpus_of_trials_stored_before_it(
        empty_url: str) -> None:
    migrate.upgrade(empty_url)
    with Store(empty_url) as store:
        sweep = store.create_sweep(name="s", workload=Workload(name="w"), slo=SLO(ttft=300),
                                   space={}, model="m", gpu="h200", strategy="grid",
                                   mode="capacity")
        ids = []
        for number, (tp, capacity) in enumerate(((4, 24.0), (1, 7.0))):
            spec = TrialSpec(run_id=f"t{number}", model="m", knobs={
                "tensor_parallel_size": tp}, workload=Workload(name="w"), slo=SLO(ttft=300))
            trial = store.start_trial(sweep.id, number=number, params=spec.knobs, spec=spec)
            store.finish_trial(trial.id, TrialResult(
                run_id=f"t{number}", status="ok", objective=capacity, capacity=capacity))
            ids.append(trial.id)
    migrate.downgrade(empty_url, "0004")  # as a database migrated before this revision
    engine = make_db_engine(empty_url)
    try:
        columns = {c["name"] for c in inspect(engine).get_columns(BEST_CONFIG_VIEW)}
        assert "capacity_per_gpu" not in columns and "capacity" in columns
    finally:
        engine.dispose()
    migrate.upgrade(empty_url)
    with Store(empty_url) as store:
        assert [store.get_trial(i).gpus for i in ids] == [4, 1]
        [row] = store.best_for_workload("w")
        # 24 req/s on 4 GPUs is 6 per GPU, below 7 on one: the TP-1 trial ranks first.
        assert (row.trial_id, row.gpus, row.capacity_per_gpu) == (ids[1], 1, 7.0)


def _stored_json(url: str, trial_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A trial's spec and result as stored, decoded from the row itself (no model)."""
    engine = make_db_engine(url)
    try:
        with engine.connect() as conn:
            spec, result = conn.execute(text("SELECT spec, result FROM sweep_trials "
                                             "WHERE id = :id"), {"id": trial_id}).one()
    finally:
        engine.dispose()
    decoded = [v if isinstance(v, dict) else json.loads(v) for v in (spec, result)]
    return decoded[0], decoded[1]


def test_the_run_id_revision_renames_the_key_of_specs_and_results_stored_before_it(
        empty_url: str) -> None:
    migrate.upgrade(empty_url)
    with Store(empty_url) as store:
        sweep = store.create_sweep(name="s", workload=Workload(name="w"), slo=SLO(ttft=300),
                                   space={}, model="m", gpu="h100-sxm", strategy="tpe")
        spec = TrialSpec(run_id="s1-t0-a1", engine="vllm", model="m",
                         workload=Workload(name="w"), slo=SLO(ttft=300))
        trial = store.start_trial(sweep.id, number=0, params={}, spec=spec)
        store.finish_trial(trial.id, TrialResult(run_id="s1-t0-a1", status="ok",
                                                 objective=5.0))
        running = store.start_trial(sweep.id, number=1, params={})  # no spec, no result
    migrate.downgrade(empty_url, "0007")  # the rows as a database before this revision
    old_spec, old_result = _stored_json(empty_url, trial.id)
    assert old_spec["trial_id"] == old_result["trial_id"] == "s1-t0-a1"
    assert "run_id" not in old_spec and "run_id" not in old_result
    # The old spelling still loads, wherever it comes from (a file written before, too).
    assert TrialSpec.model_validate(old_spec).run_id == "s1-t0-a1"
    assert TrialResult.model_validate(old_result).run_id == "s1-t0-a1"

    migrate.upgrade(empty_url)
    new_spec, new_result = _stored_json(empty_url, trial.id)
    assert new_spec["run_id"] == new_result["run_id"] == "s1-t0-a1"
    assert "trial_id" not in new_spec and "trial_id" not in new_result
    assert {k: v for k, v in new_spec.items() if k != "run_id"} == \
        {k: v for k, v in old_spec.items() if k != "trial_id"}  # nothing else changed
    with Store(empty_url) as store:
        stored = store.get_trial(trial.id)
        assert stored.spec is not None and stored.result is not None
        assert TrialSpec.model_validate(stored.spec) == spec
        assert TrialResult.model_validate(stored.result).run_id == "s1-t0-a1"
        assert (stored.status, stored.objective) == ("ok", 5.0)
        assert store.get_trial(running.id).spec is None
        [row] = store.best_for_workload("w")
        assert row.trial_id == trial.id  # trial_id: still the row's id


def _stored_budget(url: str, sweep_id: int) -> dict[str, Any]:
    engine = make_db_engine(url)
    try:
        with engine.connect() as conn:
            budget = conn.execute(text("SELECT budget FROM sweeps WHERE id = :id"),
                                  {"id": sweep_id}).scalar_one()
    finally:
        engine.dispose()
    return budget if isinstance(budget, dict) else json.loads(budget)


def test_the_seed_revision_moves_a_sweeps_seed_out_of_its_budget(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    seeded = 2**32 - 1  # Optuna's largest seed: past a 32-bit integer column
    with Store(empty_url) as store:
        ids = [store.create_sweep(name=f"s{seed}", workload=Workload(name="w"),
                                  slo=SLO(ttft=300), space={}, model="m", gpu="h100-sxm",
                                  strategy="tpe", budget={"max_trials": 5}, seed=seed).id
               for seed in (seeded, 0)]
    migrate.downgrade(empty_url, "0008")  # the rows as a database before this revision
    assert [_stored_budget(empty_url, i) for i in ids] == [
        {"max_trials": 5, "seed": seeded}, {"max_trials": 5, "seed": 0}]

    migrate.upgrade(empty_url)
    assert [_stored_budget(empty_url, i) for i in ids] == [{"max_trials": 5}] * 2
    with Store(empty_url) as store:
        assert [store.get_sweep(i).seed for i in ids] == [seeded, 0]
        # Queued as the API and the CLI queue it: the seed beside the budget, not in it.
        queued = queue_sweep(store, SweepRequest(space="lab", seed=11,
                                                 budget=SweepBudget(max_trials=2)))
        assert queued.seed == 11 and "seed" not in queued.budget
