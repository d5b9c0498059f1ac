"""A real Postgres for the tests: fresh databases on ``SLOTUNE_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), each dropped at the end of the run.

An unreachable server FAILS the tests that ask for one — never skips them (CI starts
Postgres). ``postgres_databases`` is a fixture of every folder (``tests/conftest.py``
registers this module).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

__all__ = ["ADMIN_URL", "PostgresDatabases", "postgres_databases"]

ADMIN_URL = os.environ.get("SLOTUNE_TEST_POSTGRES_URL",
                           "postgresql://postgres@127.0.0.1:5432/postgres")


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
