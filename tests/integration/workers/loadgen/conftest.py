"""Fixtures: the known-timing streaming stub as a real process on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.loadgen_procs import start_stub, stop


@pytest.fixture(scope="session")
def stub_url() -> Iterator[str]:
    """First chunk 100 ms after the request, then one every 20 ms; serves /metrics."""
    url, proc = start_stub()
    yield url
    stop(proc)


@pytest.fixture(scope="session")
def stub_url_no_metrics() -> Iterator[str]:
    """The same stub, answering 404 on /metrics."""
    url, proc = start_stub("--no-metrics")
    yield url
    stop(proc)


@pytest.fixture(scope="session")
def stub_url_big_metrics() -> Iterator[str]:
    """The same stub with a /metrics page larger than vLLM's (5,000 lines it does not read)."""
    url, proc = start_stub("--metrics-padding", "5000")
    yield url
    stop(proc)
