"""A sweep's log when stdout is not a terminal: one line per trial as it starts and ends.

The lines themselves, and the CLI refusing an unknown format; a sweep run as a process into
a file is ``tests/e2e/tuner/sweep/test_sweep_log_file.py``.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from slotune.tuner.sweep.log import SweepLog, config_delta
from slotune.tuner.sweep.progress import SweepProgress
from slotune.workers.contracts import TrialResult

SLOTUNE = str(Path(sys.executable).with_name("slotune"))


def test_a_failed_and_an_infeasible_trial_say_their_status_word_and_why() -> None:
    out = io.StringIO()
    log = SweepLog(out)
    failed = TrialResult(run_id="t5", status="failed", failure="oom",
                         failure_message="CUDA out of memory\n  at step 3")
    infeasible = TrialResult(run_id="t6", status="infeasible",
                             violated_rule="max_num_batched_tokens >= max_num_seqs")
    progress = SweepProgress(phase="search", done=3, failed=1, max_trials=10,
                             best_objective=4.2, eta_s=60)
    log.trial_ended(1, 5, {"gpu_memory_utilization": 0.99}, failed, progress, best_number=2)
    log.trial_ended(1, 6, {}, infeasible, progress, best_number=2)
    first, second = out.getvalue().splitlines()
    assert "sweep 1 trial 5 failed: gpu_memory_utilization=0.99 · oom: CUDA out of " \
        "memory at step 3" in first
    assert "best 4.200 (trial 2)" in first and "4/10" in first and "ETA 60 s" in first
    assert "trial 6 infeasible: defaults · infeasible: max_num_batched_tokens >= " \
        "max_num_seqs" in second


def test_the_delta_names_only_what_differs_from_the_defaults() -> None:
    assert config_delta({"max_num_seqs": 128, "enable_prefix_caching": True},
                        {"max_num_seqs": 256, "enable_prefix_caching": True}) == {
        "max_num_seqs": 128}


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="valid: text, json"):
        SweepLog(io.StringIO(), "yaml")  # type: ignore[arg-type]


def test_a_bad_log_format_is_exit_2_with_the_valid_ones(tmp_path: Path) -> None:
    run = subprocess.run([SLOTUNE, "sweep", "run", "--log-format", "xml", "--database-url",
                          f"sqlite:///{tmp_path / 'db.sqlite'}"], capture_output=True,
                         text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and "--log-format 'xml': valid: text, json" in run.stderr
