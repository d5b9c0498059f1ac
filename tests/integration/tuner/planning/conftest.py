"""The planner's tests read a real store: the fixtures of :mod:`tests.support.stores`."""

from __future__ import annotations

from tests.support.stores import (  # noqa: F401 - fixtures are found by name
    backend,
    migrated_url,
    new_database,
    store,
)
