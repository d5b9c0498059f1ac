"""Capacity probes written by hand, and a real sweep's stored probes to re-score.

``probe`` builds a probe with the percentiles a probe stores; ``swept`` (a fixture of every
folder: ``tests/conftest.py`` registers this module) is a migrated Postgres holding one
finished capacity sweep of the lab space, run by ``slotune sweep run`` as a process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slotune.tuner.db import migrate
from slotune.workers.contracts import CapacityProbe
from tests.support.postgres import PostgresDatabases

__all__ = ["SLOTUNE", "probe", "slotune", "swept"]


def probe(rate: float, ttft_p99: float | None, tpot_p99: float | None, **kw: Any
          ) -> CapacityProbe:
    """A probe that kept p50 … p99.9; p99.9 above p99, p50 well below."""
    def row(p99: float | None) -> dict[str, float | None]:
        if p99 is None:
            return {"p50": 1.0, "p90": 2.0, "p95": 3.0, "p99": None, "p99.9": None}
        return {"p50": p99 / 3, "p90": p99 * 0.7, "p95": p99 * 0.85, "p99": p99,
                "p99.9": p99 * 1.2}
    fields: dict[str, Any] = dict(
        request_rate=rate, gate_passed=(ttft_p99 or 1e9) <= 300 and (tpot_p99 or 1e9) <= 50,
        request_goodput=rate, percentiles_ms={"ttft": row(ttft_p99), "tpot": row(tpot_p99)},
        num_requests=100, failed_requests=0, duration_s=10.0, request_throughput=rate,
        output_throughput=rate * 128, total_token_throughput=rate * 640,
        send_lag_p99_ms=1.0, client_bound=False)
    fields.update(kw)
    return CapacityProbe.model_validate(fields)


SLOTUNE = str(Path(sys.executable).with_name("slotune"))


def slotune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLOTUNE, *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "250"})


@pytest.fixture(scope="module")
def swept(postgres_databases: PostgresDatabases,
          tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated Postgres holding one finished capacity sweep of the lab space."""
    url = postgres_databases.create()
    migrate.upgrade(url)
    run = slotune("sweep", "run", "--executor", "virtual", "--trials", "5",
                  "--database-url", url,
                  "--report-dir", str(tmp_path_factory.mktemp("report")))
    assert run.returncode == 0, run.stdout + run.stderr
    return url
