"""What every test shares: the engines' shared caches (``SLOTUNE_ENGINE_CACHE_DIR``) go to a
folder of the test session, never the developer's data directory. A run that sets the
variable itself (CI keeping compiled vLLM caches between runs) keeps its own.

Each test session — a pytest-xdist worker (``scripts/test.sh``) or a plain run — gets a
``TMPDIR`` of its own before any test runs: every process its tests start inherits it
(engines too: it is one of ``BASE_ENV``), which is how ``tests/support/procscan.py`` tells this
session's engines from another's (the other worker's, or another checkout's run on the
same machine), and Ray's session folders of two sessions never meet. Short (Ray's Unix
sockets live under it, within a 107-byte path)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from slotune.workers.engines.shared_cache import ENGINE_CACHE_ENV

try:  # pytest ≥ 9.2: structured node ids
    from _pytest.nodeid import NodeId
except ImportError:  # earlier: the _nodeid pytest-xdist writes is the id
    NodeId = None  # type: ignore[assignment,misc]

# Fixtures that tests of several folders ask for, under names no folder's conftest uses.
pytest_plugins = ["tests.support.postgres", "tests.support.rescored"]


SESSION_TMPDIR = "SLOTUNE_TEST_TMPDIR"
"""The session's own ``TMPDIR``, as ``tests/support/procscan.py`` reads it."""


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker and getattr(config.option, "numprocesses", None):
        return  # pytest-xdist's controller runs no test; each worker takes its own
    own = os.path.join(tempfile.gettempdir(), f"{worker or 'run'}-{os.getpid()}")
    os.makedirs(own, exist_ok=True)
    os.environ["TMPDIR"] = os.environ[SESSION_TMPDIR] = own
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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker sends the ids it collected
def pytest_collection_finish(session: pytest.Session) -> None:
    # pytest-xdist's loadgroup tells its scheduler an item's group by appending "@group"
    # to the item's _nodeid; pytest 9.2 reads node ids from a structured _id instead, so
    # the scheduler never saw a group and a group's tests ran on both workers
    # (pytest-xdist issue #1386). Carry the suffix into the id the worker sends.
    if NodeId is None:
        return
    for item in session.items:
        legacy = getattr(item, "_nodeid", None)
        if isinstance(legacy, str) and legacy != item.nodeid:
            item._id = NodeId.parse(legacy)


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs[-1].scope in ("module", "class")
               for defs in info.name2fixturedefs.values() if defs)


def pytest_unconfigure(config: pytest.Config) -> None:
    own = os.environ.pop(SESSION_TMPDIR, None)
    if own:
        shutil.rmtree(own, ignore_errors=True)


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
