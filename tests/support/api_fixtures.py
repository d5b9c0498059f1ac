"""Fixtures of the API tests: the app over a real store, called through httpx.ASGITransport;
the conftests of the API's test folders import them by name.

Postgres as in ``tests/integration/tuner/db``: a fresh database per test run
(``slotune_api_test_…``) brought to head by the migrations, our tables emptied before each
test; an unreachable server fails the tests, never skips them. Tests marked for SQLite get a
migrated file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import delete

from slotune.tuner.api import create_app
from slotune.tuner.db import migrate
from slotune.tuner.db.models import ExperimentCardRow, Sweep, SweepTrial, WorkloadRow
from slotune.tuner.db.session import make_db_engine
from slotune.tuner.db.store import Store
from tests.support.api import ClientFactory, settings_for
from tests.support.postgres import ADMIN_URL, PostgresDatabases

__all__ = ["api_postgres", "backend", "client", "make_client", "postgres_url", "sqlite_url",
           "store"]


@pytest.fixture(scope="session")
def api_postgres() -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases(ADMIN_URL)
    databases.prefix = databases.prefix.replace("slotune_test", "slotune_api_test")
    yield databases
    databases.drop_all()


@pytest.fixture(scope="session")
def postgres_url(api_postgres: PostgresDatabases) -> str:
    url = api_postgres.create()
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('api-db') / 'slotune.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """``postgres`` unless a test parametrizes it (``indirect=True``) with ``sqlite``."""
    return str(getattr(request, "param", "postgres"))


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    url: str = request.getfixturevalue(f"{backend}_url")
    engine = make_db_engine(url)
    with engine.begin() as conn:
        for model in (ExperimentCardRow, SweepTrial, Sweep, WorkloadRow):
            conn.execute(delete(model))
    engine.dispose()
    with Store(url) as s:
        yield s


@pytest.fixture
def make_client(store: Store, backend: str,
                request: pytest.FixtureRequest) -> ClientFactory:
    """``async with make_client(token=…, read_token=…) as client`` on this test's store."""
    url: str = request.getfixturevalue(f"{backend}_url")

    @asynccontextmanager
    async def client(**settings: object) -> AsyncIterator[httpx.AsyncClient]:
        app: FastAPI = create_app(settings_for(url, **settings), store=store)  # type: ignore[arg-type]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://slotune.test") as c:
            yield c

    return client


@pytest.fixture
async def client(make_client: ClientFactory) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app with the write token configured and reads open."""
    async with make_client() as c:
        yield c
