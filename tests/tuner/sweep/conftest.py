"""The storage fixtures of tests/tuner/db (SQLite and a fresh Postgres), reused here,
plus a Postgres-only database for what is Postgres' own (a server restart)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slotune.tuner.db import migrate
from slotune.tuner.db.store import Store
from tests.tuner.db.conftest import (  # noqa: F401 - fixtures are found by name
    PostgresDatabases,
    backend,
    migrated_url,
    new_database,
    postgres_databases,
    store,
    venv_script,
)


@pytest.fixture
def postgres_url(postgres_databases: PostgresDatabases) -> str:  # noqa: F811
    """A migrated Postgres database of this test's own."""
    url = postgres_databases.create()
    migrate.upgrade(url)
    return url


@pytest.fixture
def postgres_store(postgres_url: str) -> Iterator[Store]:
    with Store(postgres_url) as s:
        yield s
