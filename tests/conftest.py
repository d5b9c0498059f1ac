"""What every test shares: the engines' shared caches (``SLOTUNE_ENGINE_CACHE_DIR``) go to a
folder of the test session, never the developer's data directory. A run that sets the
variable itself (CI keeping compiled vLLM caches between runs) keeps its own."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from workers.engines.shared_cache import ENGINE_CACHE_ENV


@pytest.fixture(scope="session", autouse=True)
def _engine_caches_in_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if os.environ.get(ENGINE_CACHE_ENV):
        yield
        return
    os.environ[ENGINE_CACHE_ENV] = str(tmp_path_factory.mktemp("engine-cache"))
    try:
        yield
    finally:
        os.environ.pop(ENGINE_CACHE_ENV, None)
