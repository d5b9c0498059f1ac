"""`slotune sweep …` as users run it: subprocesses, real databases, a real kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.procscan import engine_pids
from tuner.store import Store

pytestmark = pytest.mark.slow

SLOTUNE = str(Path(sys.executable).with_name("slotune"))


def slotune(*args: str, timeout: float = 600, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLOTUNE, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload, no-any-return]


def test_kill_9_mid_sweep_then_resume_accounts_for_every_trial(store: Store,
                                                              migrated_url: str) -> None:
    proc = subprocess.Popen(
        [SLOTUNE, "sweep", "run", "--executor", "virtual", "--strategy", "tpe",
         "--trials", "24", "--confirm-top", "0", "--database-url", migrated_url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    sweep_id = None
    while time.monotonic() < deadline:
        sweeps = store.list_sweeps().data
        if sweeps and len(store.list_trials(sweeps[0].id, status="ok").data) >= 6:
            sweep_id = sweeps[0].id
            break
        time.sleep(0.02)
    assert sweep_id is not None, "the sweep did not get going"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert store.get_sweep(sweep_id).status == "running"
    done = slotune("sweep", "resume", str(sweep_id), "--takeover", "--executor", "virtual",
                   "--database-url", migrated_url)
    assert done.returncode in (0, 3), done.stderr
    final = store.get_sweep(sweep_id)
    assert final.status == "done"
    rows = store.list_trials(sweep_id).data
    assert not [t for t in rows if t.status in ("running", "pending")]
    measured = [t for t in rows if t.status in ("ok", "failed", "infeasible")]
    keys = [repr(sorted(t.params.items())) for t in measured]
    assert len(keys) == len(set(keys)) == 24  # none duplicated, the whole budget measured
    lost = {repr(sorted(t.params.items())) for t in rows if t.status == "lost"}
    assert lost <= set(keys)  # none lost: every orphan was measured after the restart


def test_sweep_run_with_ray_and_the_simulated_engine(backend: str, migrated_url: str,
                                                     store: Store,
                                                     venv_script: Callable[[str], Path]) -> None:
    """The path end to end: local Ray, simulated GPUs, engine processes, the view, Optuna."""
    if backend != "postgres":
        pytest.skip("one backend is enough for this minute-long path; SQLite runs it in "
                    "test_kill_9_mid_sweep_then_resume_accounts_for_every_trial")
    result = slotune("sweep", "run", "--space", "lab", "--strategy", "tpe", "--trials", "2",
                     "--confirm-top", "2", "--confirm-repeats", "2",
                     "--database-url", migrated_url, "--report-dir", "/tmp/slotune-test-report")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vllm serve Qwen/Qwen2.5-7B-Instruct" in result.stdout
    assert "report:" in result.stdout
    [sweep] = store.list_sweeps().data
    assert sweep.status == "done"
    assert len(store.list_trials(sweep.id).data) == 2
    [best] = store.best_for_workload(sweep.workload)
    assert best.confirmed and best.objective > 0
    studies = subprocess.run([str(venv_script("optuna")), "studies", "--storage",
                              migrated_url.replace("postgresql://", "postgresql+psycopg://")],
                             capture_output=True, text=True, timeout=120)
    assert sweep.optuna_study_name in studies.stdout, studies.stderr
    assert engine_pids() == []


def test_user_mistakes_get_one_line_and_exit_2(migrated_url: str) -> None:
    for args, fragment in (
        (["sweep", "run", "--space", "no-such-space", "--database-url", migrated_url],
         "unknown search space"),
        (["sweep", "run", "--strategy", "annealing", "--database-url", migrated_url],
         "unknown strategy"),
        (["sweep", "status", "999999", "--database-url", migrated_url], "999999"),
        (["sweep", "cancel", "999999", "--database-url", migrated_url], "999999"),
    ):
        result = slotune(*args, timeout=60)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert fragment in result.stderr
        assert "Traceback" not in result.stderr
