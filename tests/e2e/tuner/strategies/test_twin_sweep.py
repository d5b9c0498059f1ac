"""A twin sweep as a user runs it: `slotune sweep run --strategy twin` on the virtual
executor, against a perturbed truth the twin never reads; then a second sweep that
starts from the first one's calibration, and the report that shows the twin's work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slotune.tuner.db import migrate
from slotune.tuner.db.store import Store
from slotune.tuner.strategies import params_key
from slotune.tuner.strategies.twin.factors import TwinFactors
from slotune.tuner.strategies.twin.model import Twin
from slotune.tuner.sweep.progress import SweepProgress
from slotune.workers.sim.calibration import CALIBRATION_ENV
from slotune.workers.trial.virtual import run_virtual_trial
from tests.support.twin_truth import SMALL, TRUTH, small_space, write_truth

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
pytestmark = pytest.mark.slow


def sweep(space: Path, url: str, truth: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLOTUNE, "sweep", "run", "--space", str(space), "--strategy", "twin", "--executor",
         "virtual", "--trials", "15", "--confirm-top", "0", "--database-url", url],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env={**os.environ, CALIBRATION_ENV: str(truth)})


def test_two_twin_sweeps_find_the_optimum_and_the_second_starts_from_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space_file = tmp_path / "small.yaml"
    space_file.write_text(yaml.safe_dump(SMALL))
    truth = write_truth(tmp_path / "truth.json", "l40s", **TRUTH)
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    migrate.upgrade(url)
    monkeypatch.setenv(CALIBRATION_ENV, str(truth))
    space = small_space()
    # what the sweep's search measures of each configuration: its ranking probes
    ranking = space.capacity.for_ranking()
    grid = {params_key(p): run_virtual_trial(space.to_trial_spec(p, "g", capacity=ranking),
                                             per_request=False).objective
            for p in space.grid()}
    optimum = max(grid.values())

    first = sweep(space_file, url, truth)
    assert first.returncode == 0, first.stderr
    assert "the twin rules out the other " in first.stdout
    assert "the twin screened the rest" in first.stdout  # the answer says it
    second = sweep(space_file, url, truth)
    assert second.returncode == 0, second.stderr

    with Store(url) as store:
        one, two = store.get_sweep(1), store.get_sweep(2)
        twin_one = SweepProgress.of(one.progress).twin
        twin_two = SweepProgress.of(two.progress).twin
        best_one = max(t.objective or 0 for t in store.list_trials(1).data)
    assert one.stop_reason and one.stop_reason.startswith("the twin rules out the other ")
    assert best_one >= 0.98 * optimum
    assert twin_one is not None and twin_two is not None
    assert twin_one.booted < twin_one.candidates == 15
    # the calibration is stored with its residual and trials, and learned the truth's way
    assert twin_one.fit is not None and twin_one.fit.trials and twin_one.fit.residual < 0.2
    assert twin_one.factors != {"compute": 1.0, "memory": 1.0, "overhead": 1.0}
    first_call = twin_one.calls[0]
    assert first_call.error is not None and first_call.error > 0.2  # the prior, far off
    # the stored calibration predicts the best configuration; the prior did not
    best = max(grid, key=lambda key: grid[key])
    params = json.loads(best)
    calibrated = Twin(space, TwinFactors.from_dict(twin_one.factors)).predict(params, full=True)
    prior = Twin(space).predict(params, full=True)
    assert abs(calibrated.objective - grid[best]) / grid[best] < 0.1
    assert abs(prior.objective - grid[best]) / grid[best] > 0.2
    assert twin_two.warm_start is not None and twin_two.warm_start.startswith(
        "sweep 1's calibration")
    assert twin_two.start_factors == twin_one.factors
    # warm: its first boot is predicted with what the first sweep learned
    assert twin_two.calls[0].error is not None and twin_two.calls[0].error < 0.1

    report = subprocess.run([SLOTUNE, "sweep", "report", "1", "--output", str(tmp_path),
                             "--database-url", url], capture_output=True, text=True,
                            timeout=60)
    assert report.returncode == 0, report.stderr
    markdown = (tmp_path / "sweep-1.md").read_text()
    assert "## The twin" in markdown and "Predicted against measured" in markdown
    rows = [line for line in markdown.split("### Predicted against measured")[1]
            .split("###")[0].splitlines() if line.startswith("| #")]
    assert len(rows) == twin_one.booted  # one row per real trial
    html = (tmp_path / "sweep-1.html").read_text()
    assert "never booted" in html.lower()
