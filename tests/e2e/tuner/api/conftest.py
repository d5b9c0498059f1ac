"""The API over a real store: the fixtures of :mod:`tests.support.api_fixtures`."""

from __future__ import annotations

from tests.support.api_fixtures import (  # noqa: F401 - fixtures are found by name
    api_postgres,
    backend,
    client,
    make_client,
    postgres_url,
    sqlite_url,
    store,
)
