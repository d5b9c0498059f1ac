"""The fixtures of the storage suite, run against SQLite (a temporary file) and a real
Postgres; the conftests of the folders whose tests use a store import them by name.

Postgres: a fresh database per test run, ``slotune_test_<random>``, created with psycopg
on ``SLOTUNE_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
and dropped at the end, with any extra empty databases tests asked for. An unreachable
server FAILS the Postgres half of the suite — it never skips (CI starts Postgres).

Isolation: the shared database is migrated once per run (by the migrations, never
``create_all``) and our tables are emptied before each test; tests that migrate up and
down get a database of their own (:func:`empty_url`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete

from slotune.tuner.db import migrate
from slotune.tuner.db.models import ExperimentCardRow, Sweep, SweepTrial, WorkloadRow
from slotune.tuner.db.session import make_db_engine
from slotune.tuner.db.store import Store
from tests.support.postgres import PostgresDatabases

__all__ = ["BACKENDS", "backend", "empty_url", "migrated_url", "new_database", "postgres_store",
           "postgres_url", "store", "venv_script"]

BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def new_database(backend: str, tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> Callable[[], str]:
    """A factory of empty databases of the current backend (URLs)."""
    counter = iter(range(1_000_000))

    def sqlite() -> str:
        path = tmp_path_factory.mktemp("db") / f"slotune-{next(counter)}.db"
        return f"sqlite:///{path}"

    if backend == "sqlite":
        return sqlite
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    return databases.create


@pytest.fixture(scope="session")
def migrated_url(new_database: Callable[[], str]) -> str:
    """One database per backend, brought to head by the migrations, shared by tests."""
    url = new_database()
    migrate.upgrade(url)
    return url


@pytest.fixture
def empty_url(new_database: Callable[[], str]) -> str:
    """A database of this test's own, without any tables."""
    return new_database()


@pytest.fixture
def store(migrated_url: str) -> Iterator[Store]:
    """A store on the shared migrated database, with our tables emptied first."""
    engine = make_db_engine(migrated_url)
    with engine.begin() as conn:
        for model in (ExperimentCardRow, SweepTrial, Sweep, WorkloadRow):
            conn.execute(delete(model))
    engine.dispose()
    with Store(migrated_url) as s:
        yield s


@pytest.fixture(scope="session")
def venv_script() -> Callable[[str], Path]:
    """Finds a console script installed next to this interpreter (``.venv/bin/optuna``)."""

    def find(name: str) -> Path:
        path = Path(sys.executable).parent / name
        assert path.exists(), f"{path} is missing (pip install -e '.[dev]')"
        return path

    return find


@pytest.fixture
def postgres_url(postgres_databases: PostgresDatabases) -> str:
    """A migrated Postgres database of this test's own."""
    url = postgres_databases.create()
    migrate.upgrade(url)
    return url


@pytest.fixture
def postgres_store(postgres_url: str) -> Iterator[Store]:
    with Store(postgres_url) as s:
        yield s
