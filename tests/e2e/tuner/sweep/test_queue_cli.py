"""Queued sweeps: `sweep submit`, `slotune coordinator`, `sweep status|report`, `best`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slotune.tuner.db.store import Store
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from tests.support.sweep_data import LAB_4RPS

pytestmark = pytest.mark.slow

SLOTUNE = str(Path(sys.executable).with_name("slotune"))


def slotune(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLOTUNE, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env=env, cwd=cwd)


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
    assert "carries " in html.read_text() and "20 req/s needs " in html.read_text()
    best = slotune("best", "--database-url", migrated_url)
    assert best.returncode == 0 and final.workload in best.stdout
    assert "vllm serve Qwen/Qwen2.5-7B-Instruct" in best.stdout


def test_a_sweep_submitted_with_a_trace_workload_file_runs_under_the_coordinator(
        store: Store, migrated_url: str, tmp_path: Path) -> None:
    # The trace passed the path rule at submit (it lies beside its workload file); the
    # coordinator runs the stored space as it is, with no $SLOTUNE_HOME to judge it by.
    folder = tmp_path / "night"
    folder.mkdir()
    (folder / "short.jsonl").write_text("".join(
        json.dumps({"prompt_len": 64, "output_len": 16}) + "\n" for _ in range(40)))
    (folder / "short.yaml").write_text(
        "name: short\ndataset: {kind: trace, path: short.jsonl, use_trace_arrivals: false}\n"
        "arrivals: {request_rate: 2}\nnum_prompts: 40\n")
    env = {k: v for k, v in os.environ.items() if k != "SLOTUNE_HOME"}
    submitted = slotune("sweep", "submit", "--space", "lab", "--strategy", "random",
                        "--trials", "2", "--mode", "goodput",
                        "--workload", str(folder / "short.yaml"),
                        "--database-url", migrated_url, env=env)
    assert submitted.returncode == 0, submitted.stderr
    sweep_id = int(submitted.stdout.strip())
    served = slotune("coordinator", "--executor", "virtual", "--once", "--poll", "0.2",
                     "--database-url", migrated_url, env=env)
    assert served.returncode == 0, served.stderr
    final = store.get_sweep(sweep_id)
    assert final.status == "done", final.stop_reason
    trials = store.list_trials(sweep_id).data
    assert len(trials) == 2 and all(t.status == "ok" for t in trials)


def test_cancel_a_queued_sweep(store: Store, migrated_url: str) -> None:
    submitted = slotune("sweep", "submit", "--trials", "3", "--database-url", migrated_url)
    sweep_id = int(submitted.stdout.strip())
    cancelled = slotune("sweep", "cancel", str(sweep_id), "--database-url", migrated_url)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert store.get_sweep(sweep_id).status == "cancelled"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the mapping, not the backend
def test_one_error_exits_the_same_way_from_every_command(
        store: Store, migrated_url: str, tmp_path: Path) -> None:
    def refused(*args: str, url: str = migrated_url) -> tuple[int, str]:
        run = slotune(*args, "--database-url", url)
        assert "Traceback" not in run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1, run.stderr
        return run.returncode, lines[0]

    # Naming what is not there is a usage mistake: 2, from every command.
    for args in (["sweep", "status", "999"], ["sweep", "cancel", "999"],
                 ["sweep", "resume", "999", "--executor", "virtual"],
                 ["sweep", "report", "999", "--output", str(tmp_path / "r")]):
        assert refused(*args) == (2, "slotune: error: no sweep 999"), args
    # The sweep's state forbids it: 1, from every command.
    request = SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS, strategy="random",
                           budget=SweepBudget(max_trials=1))
    finished = queue_sweep(store, request, claimed_by="coordinator-x")
    store.update_sweep(finished.id, status="done", lease=finished.lease)
    for args in (["sweep", "cancel", str(finished.id)],
                 ["sweep", "resume", str(finished.id), "--executor", "virtual"]):
        code, line = refused(*args)
        assert code == 1 and f"sweep {finished.id} is done" in line, (args, line)
    # A database without our schema: the setup step is missing, 2, and it is named.
    bare = f"sqlite:///{tmp_path / 'bare.db'}"
    for args in (["sweep", "status"], ["sweep", "cancel", "1"], ["best"]):
        code, line = refused(*args, url=bare)
        assert code == 2 and "slotune db upgrade" in line, (args, line)
    # A database that does not answer: 1, with its address redacted.
    away = "postgresql://slotune:hunter2@127.0.0.1:1/nowhere"
    for args in (["sweep", "status"], ["best"], ["db", "upgrade"]):
        code, line = refused(*args, url=away)
        assert code == 1 and "unavailable" in line and "hunter2" not in line, (args, line)


def test_two_databases_sweep_1_reports_land_in_their_own_folders(tmp_path: Path) -> None:
    """Issue 38: the default report folder was the sweep number only, so one database's
    sweep 1 overwrote another's. It carries a short digest of the database now, and no
    line names the database's URL."""
    from slotune.tuner.db import migrate
    from tests.support.sweep_data import populate_finished_sweep

    env = {**os.environ, "SLOTUNE_HOME": str(tmp_path / "home")}
    paths = []
    for name in ("lab-a", "lab-b"):
        url = f"sqlite:///{tmp_path / name / 'secret-name.db'}"
        migrate.upgrade(url)
        with Store(url) as store:
            sweep_id = populate_finished_sweep(store).sweep_id
        assert sweep_id == 1
        run = slotune("sweep", "report", "1", "--database-url", url, env=env)
        assert run.returncode == 0, run.stderr
        assert "secret-name" not in run.stdout + run.stderr and name not in run.stdout
        paths.append(Path(run.stdout.strip()))
    assert paths[0] != paths[1] and all(p.is_file() for p in paths)
    assert all(p.is_relative_to(tmp_path / "home" / "reports") for p in paths)
    # The same database (here by a relative spelling of its path) keeps its folder.
    again = slotune("sweep", "report", "1", "--database-url",
                    "sqlite:///lab-b/secret-name.db", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert Path(again.stdout.strip()) == paths[1]


def test_best_as_tsv_never_starts_a_cell_a_spreadsheet_would_evaluate(
        store: Store, migrated_url: str) -> None:
    """Issue 38: a workload named ``=HYPERLINK(…)`` came out first in its cell, where a
    spreadsheet evaluates it. Cells that begin with ``= + - @``, a tab or a CR get a
    leading quote (OWASP's CSV-injection advice); a tab or line break inside a value
    would split the row, so it becomes a space."""
    from slotune.workers.contracts import TrialResult

    names = ['=HYPERLINK("http://evil.example/","open")', "@SUM(A1:A9)", "+1+2", "-1+2",
             "\tleading-tab", "\rleading-cr", "inner\ttab\nline"]
    for name in names:
        workload = {**LAB_4RPS, "name": name}
        sweep = queue_sweep(store, SweepRequest(space="lab", mode="goodput", workload=workload,
                                                budget=SweepBudget(max_trials=1)),
                            claimed_by="coordinator-tsv")
        trial = store.start_trial(sweep.id, number=0, params={"max_num_seqs": 64},
                                  lease=sweep.lease)
        store.finish_trial(trial.id, TrialResult(run_id="t0", status="ok", objective=1.5,
                                                 gate_passed=True), lease=sweep.lease)
    run = slotune("best", "--output", "tsv", "--database-url", migrated_url)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split("\n")[:-1]
    header = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:]]
    assert len(rows) == len(names) and all(len(r) == len(header) for r in rows)
    for row in rows:
        for cell in row:
            assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r"), row
    workloads = {r[header.index("workload")] for r in rows}
    assert workloads == {"'" + names[0], "'@SUM(A1:A9)", "'+1+2", "'-1+2", "' leading-tab",
                         "' leading-cr", "inner tab line"}
