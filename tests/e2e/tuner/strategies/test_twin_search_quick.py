"""The twin benchmark's smallest case, in CI: on one perturbed truth of the prefill-bound
space the twin reaches 98% of the grid's optimum and stops with its own reason."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO


@pytest.mark.slow
def test_the_twin_reaches_the_optimum_of_a_perturbed_truth() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "twin_search.py"), "--quick"],
        capture_output=True, text=True, timeout=280, check=True, cwd=REPO / "benchmarks",
    ).stdout
    seed = re.search(r"prefill-bound seed 0 .*: twin ([\d.]+)% of the grid \((\d+) boots", out)
    assert seed is not None, out  # a share, not "not reached"
    boots = int(seed.group(2))
    assert 1 <= boots < 72 // 4, out  # a small fraction of the 72 configurations
    assert "stop: the twin rules out the other " in out
    assert re.search(r"^## prefill-bound .*never-booted error after 3 [\d.]+%", out,
                     re.MULTILINE), out
    assert re.search(r"^overall: \d/4 targets met", out, re.MULTILINE), out
