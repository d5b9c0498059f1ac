"""One storage test suite, run against SQLite and a real Postgres: the store fixtures of
:mod:`tests.support.stores` (``backend`` is parametrized over both)."""

from __future__ import annotations

from tests.support.stores import (  # noqa: F401 - fixtures are found by name
    backend,
    empty_url,
    migrated_url,
    new_database,
    store,
    venv_script,
)
