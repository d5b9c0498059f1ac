"""The storage fixtures of tests/tuner/db (SQLite and a fresh Postgres), reused here."""

from tests.tuner.db.conftest import (  # noqa: F401 - fixtures are found by name
    backend,
    migrated_url,
    new_database,
    postgres_databases,
    store,
    venv_script,
)
