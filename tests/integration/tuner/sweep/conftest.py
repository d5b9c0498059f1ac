"""The storage fixtures of :mod:`tests.support.stores` (SQLite and a fresh Postgres), plus a
Postgres-only database of a test's own for what is Postgres' own (a server restart)."""

from __future__ import annotations

from tests.support.stores import (  # noqa: F401 - fixtures are found by name
    backend,
    migrated_url,
    new_database,
    postgres_store,
    postgres_url,
    store,
    venv_script,
)
