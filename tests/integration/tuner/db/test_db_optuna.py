"""Optuna's storage in our database: our studies are seen by Optuna's own tools."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import optuna
import psycopg
import pytest
from psycopg import sql

from slotune.tuner.db.errors import StorageUnavailable
from slotune.tuner.db.optuna_storage import create_or_load_study, optuna_storage, optuna_url
from slotune.tuner.db.store import Store, study_name_for
from slotune.workers.contracts import SLO, Workload
from tests.support.postgres import PostgresDatabases


def test_sweep_study_is_listed_by_optuna_api_and_cli(
        store: Store, migrated_url: str, venv_script: Callable[[str], Path]) -> None:
    sweep = store.create_sweep(name="s", workload=Workload(name="chat"), slo=SLO(ttft=300),
                               space={}, model="m", gpu="g", strategy="tpe")
    assert sweep.optuna_study_name == study_name_for(sweep.id)
    study = create_or_load_study(sweep.optuna_study_name, url=migrated_url)
    trial = study.ask()
    trial.suggest_int("max_num_seqs", 8, 512)
    study.tell(trial, 3.0)
    # Resume-safe: the same name loads the same study.
    again = create_or_load_study(sweep.optuna_study_name, url=migrated_url)
    assert len(again.trials) == 1

    assert sweep.optuna_study_name in optuna.get_all_study_names(optuna_storage(migrated_url))

    # Optuna's own CLI, given the URL our settings would give it.
    listed = subprocess.run(
        [str(venv_script("optuna")), "study-names", "--storage", optuna_url(migrated_url)],
        capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert sweep.optuna_study_name in listed.stdout
    studies = subprocess.run(
        [str(venv_script("optuna")), "studies", "--storage", optuna_url(migrated_url)],
        capture_output=True, text=True, timeout=60)
    assert studies.returncode == 0, studies.stderr
    assert sweep.optuna_study_name in studies.stdout


def test_postgres_urls_get_the_psycopg3_driver() -> None:
    assert optuna_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert optuna_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert optuna_url("sqlite:///x.db") == "sqlite:///x.db"


def test_unreachable_optuna_storage_is_unavailable_and_redacted() -> None:
    with pytest.raises(StorageUnavailable) as info:
        optuna_storage("postgresql://slotune:hunter2@127.0.0.1:1/x")
    assert "hunter2" not in str(info.value)


def test_a_study_whose_database_goes_away_raises_ours_and_goes_on_once_it_is_back(
        postgres_databases: PostgresDatabases) -> None:
    # The coordinator retries only StorageUnavailable: every call a study makes on its
    # storage must say that (not SQLAlchemy's error, not Optuna's wrapper of it) while
    # the server refuses it, and work again once the server takes it back.
    url = postgres_databases.create()
    name = url.rsplit("/", 1)[1]
    study = create_or_load_study("goes-away", url=url)
    trial = study.ask()

    def allow(allowed: bool) -> None:
        with psycopg.connect(postgres_databases.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.Literal(allowed)))
            if not allowed:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = %s", (name,))

    allow(False)
    try:
        with pytest.raises(StorageUnavailable):
            study.tell(trial, 1.0)
        with pytest.raises(StorageUnavailable):
            study.ask()
        with pytest.raises(StorageUnavailable):
            create_or_load_study("goes-away", url=url)
    finally:
        allow(True)
    study.tell(trial, 1.0)
    assert [t.value for t in create_or_load_study("goes-away", url=url).trials] == [1.0]
