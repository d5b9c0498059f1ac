"""What every test shares: the engines' shared caches (``SLOTUNE_ENGINE_CACHE_DIR``) go to a
folder of the test session, never the developer's data directory. A run that sets the
variable itself (CI keeping compiled vLLM caches between runs) keeps its own.

Under pytest-xdist (``scripts/test.sh``) each worker gets a ``TMPDIR`` of its own before
any test runs: every process its tests start inherits it (engines too: it is one of
``BASE_ENV``), which is how ``tests/procscan.py`` tells this worker's engines from the
other's, and Ray's session folders of the two workers never meet. Short (Ray's Unix
sockets live under it, within a 107-byte path)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from workers.engines.shared_cache import ENGINE_CACHE_ENV


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    own = os.path.join(tempfile.gettempdir(), f"{worker}-{os.getpid()}")
    os.makedirs(own, exist_ok=True)
    os.environ["TMPDIR"] = own
    tempfile.tempdir = None  # tempfile caches the folder it found first
    # execnet starts the workers with COLUMNS=80 and LINES=24; the CLI reads COLUMNS as
    # the width of a file or pipe, and a plain run has neither.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # One real vLLM at a time: a boot takes both cores, so two at once only take twice as
    # long and run past their timeouts; under --dist loadgroup they share one worker.
    # A module's own fixture (a server, a fleet of live trials) is built once per worker
    # that runs any of its tests: the tests that share one run on one worker.
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.xdist_group("vllm"))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs[-1].scope in ("module", "class")
               for defs in info.name2fixturedefs.values() if defs)


def pytest_unconfigure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TMPDIR"):
        shutil.rmtree(os.environ["TMPDIR"], ignore_errors=True)


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
