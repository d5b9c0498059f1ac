"""The search-efficiency benchmark's smoke run prints its table and the target verdict."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO


@pytest.mark.slow
def test_quick_run_prints_a_row_per_strategy_and_the_verdict() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "search_efficiency.py"), "--quick",
         "--strategies", "grid,random,tpe-plain,tpe,guided"],
        capture_output=True, text=True, timeout=240, check=True, cwd=REPO,
    ).stdout
    assert "## prefill-bound" in out
    for name in ("grid", "random", "tpe-plain", "tpe", "guided"):
        row = re.search(rf"^{re.escape(name)}\s+(\S+(?: reached)?)\s", out, re.MULTILINE)
        assert row is not None, f"no row for {name}:\n{out}"
    grid_row = re.search(r"^grid\s+([\d.]+)\s+([\d.]+)%", out, re.MULTILINE)
    assert grid_row is not None and float(grid_row.group(2)) <= 100.0
    assert re.search(r"^overall target: (MET|NOT MET)", out, re.MULTILINE)
