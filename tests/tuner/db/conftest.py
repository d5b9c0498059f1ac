"""One storage test suite, run against SQLite (a temporary file) and a real Postgres.

Postgres: a fresh database per test run, ``slotune_test_<random>``, created with psycopg
on ``SLOTUNE_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
and dropped at the end, with any extra empty databases tests asked for. An unreachable
server FAILS the Postgres half of the suite — it never skips (CI starts Postgres).

Isolation: the shared database is migrated once per run (by the migrations, never
``create_all``) and our tables are emptied before each test; tests that migrate up and
down get a database of their own (:func:`empty_url`).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import delete

from slotune.tuner.db import migrate
from slotune.tuner.db.models import ExperimentCardRow, Sweep, SweepTrial, WorkloadRow
from slotune.tuner.db.session import make_db_engine
from slotune.tuner.db.store import Store

ADMIN_URL = os.environ.get("SLOTUNE_TEST_POSTGRES_URL",
                           "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = ("sqlite", "postgres")


class PostgresDatabases:
    """Creates empty databases on the test server; drops every one of them at the end."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.prefix = f"slotune_test_{secrets.token_hex(4)}"
        self.created: list[str] = []
        # Fail loudly (not skip) when the server is not there.
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5):
            pass

    def create(self) -> str:
        name = f"{self.prefix}_{len(self.created)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        base = self.admin_url.rsplit("/", 1)[0]
        return f"{base}/{name}"

    def drop_all(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for name in self.created:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                             .format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases(ADMIN_URL)
    yield databases
    databases.drop_all()


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
