"""Queued sweeps: `sweep submit`, `slotune coordinator`, `sweep status|report`, `best`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tuner.store import Store

pytestmark = pytest.mark.slow

SLOTUNE = str(Path(sys.executable).with_name("slotune"))


def slotune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLOTUNE, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_submit_then_the_coordinator_runs_it_and_the_cli_reads_it_back(
        store: Store, migrated_url: str, tmp_path: Path) -> None:
    submitted = slotune("sweep", "submit", "--space", "lab", "--strategy", "random",
                        "--trials", "5", "--database-url", migrated_url)
    assert submitted.returncode == 0, submitted.stderr
    sweep_id = int(submitted.stdout.strip())
    assert store.get_sweep(sweep_id).status == "queued"
    served = slotune("coordinator", "--executor", "virtual", "--once", "--poll", "0.2",
                     "--database-url", migrated_url)
    assert served.returncode == 0, served.stderr
    final = store.get_sweep(sweep_id)
    assert final.status == "done" and len(store.list_trials(sweep_id).data) == 5
    status = slotune("sweep", "status", str(sweep_id), "--database-url", migrated_url)
    assert status.returncode == 0 and "done" in status.stdout
    report = slotune("sweep", "report", str(sweep_id), "--output", str(tmp_path / "r"),
                     "--database-url", migrated_url)
    assert report.returncode == 0, report.stderr
    html = Path(report.stdout.strip())
    assert html.exists() and "vllm serve" in html.read_text()
    best = slotune("best", "--database-url", migrated_url)
    assert best.returncode == 0 and final.workload in best.stdout
    assert "vllm serve Qwen/Qwen2.5-7B-Instruct" in best.stdout


def test_cancel_a_queued_sweep(store: Store, migrated_url: str) -> None:
    submitted = slotune("sweep", "submit", "--trials", "3", "--database-url", migrated_url)
    sweep_id = int(submitted.stdout.strip())
    cancelled = slotune("sweep", "cancel", str(sweep_id), "--database-url", migrated_url)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert store.get_sweep(sweep_id).status == "cancelled"
