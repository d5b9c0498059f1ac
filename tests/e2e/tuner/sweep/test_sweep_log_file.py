"""A sweep's log when stdout is not a terminal, end to end: ``slotune sweep run`` (and the
coordinator, and ``sweep resume``) as a process whose stdout is a file (as under ``nohup``
or systemd), that file read while the sweep still runs. (The lines themselves:
``tests/unit/tuner/sweep/test_sweep_log.py``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLOTUNE = str(Path(sys.executable).with_name("slotune"))


def _sweep(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "sweep.log"
    with log.open("wb") as out:  # the child's stdout is this file, as under nohup
        proc = subprocess.Popen(
            [SLOTUNE, "sweep", "run", "--executor", "virtual", "--trials", "6",
             "--database-url", f"sqlite:///{tmp_path / 'db.sqlite'}",
             "--report-dir", str(tmp_path / "report"), *extra],
            stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200"})
    return proc, log


@pytest.mark.slow
def test_sweep_run_into_a_file_writes_each_trial_as_it_ends(tmp_path: Path) -> None:
    proc, log = _sweep(tmp_path)
    seen_while_running = ""
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        text = log.read_text()
        if " trial 0 ok: " in text:
            seen_while_running = text
            break
        time.sleep(0.05)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    # The first trial's line was in the file before the sweep ended: written as it ended,
    # not held in a buffer until the final table.
    assert seen_while_running, "no trial line before the sweep ended:\n" + log.read_text()
    lines = log.read_text().splitlines()
    started = [x for x in lines if " started: " in x and " repeat " not in x]
    ended = [x for x in lines if " trial " in x and " ok: " in x and " repeat " not in x]
    assert len(started) == len(ended) == 6, lines
    assert "trial 0 started: defaults" in started[0]  # the engine defaults go first
    assert all("objective " in x and "best " in x and "ETA " in x and " s · " in x
               for x in ended), ended
    phases = [x.split(" phase ")[1].split(":")[0] for x in lines if " phase " in x]
    assert phases == ["search", "confirm", "done"], lines
    assert any(" repeat 1 ok: " in x for x in lines)  # confirmation runs are trials too
    assert "━" not in log.read_text()[:log.read_text().index("phase done")]  # no bar


@pytest.mark.slow
def test_log_format_json_is_one_object_per_line(tmp_path: Path) -> None:
    proc, log = _sweep(tmp_path, "--log-format", "json", "--confirm-top", "0")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "sweep_started" and kinds[-1] == "sweep_finished"
    assert kinds.count("trial_started") == kinds.count("trial_ended") == 6
    ended = [e for e in events if e["event"] == "trial_ended"]
    assert all(e["status"] == "ok" and e["objective"] > 0 and e["wall_s"] > 0
               and "best_objective" in e for e in ended)
    finished = events[-1]
    assert finished["status"] == "done" and "vllm serve" in finished["vllm_command"]
    assert Path(finished["report"]).is_file()


@pytest.mark.slow
def test_the_coordinator_logs_every_sweep_it_serves(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade = subprocess.run([SLOTUNE, "db", "upgrade", "--database-url", db],
                             capture_output=True, text=True, timeout=120)
    assert upgrade.returncode == 0, upgrade.stderr
    submitted = subprocess.run([SLOTUNE, "sweep", "submit", "--trials", "3",
                                "--database-url", db], capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL)
    assert submitted.returncode == 0, submitted.stderr
    sweep = int(submitted.stdout.strip())
    served = subprocess.run([SLOTUNE, "coordinator", "--executor", "virtual", "--once",
                             "--poll", "0.2", "--log-format", "json", "--database-url", db],
                            capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert served.returncode == 0, served.stderr
    events = [json.loads(line) for line in served.stdout.splitlines()]
    assert events[0]["event"] == "coordinator_started"
    assert "serving sweeps" in events[0]["message"]
    ended = [e for e in events if e["event"] == "trial_ended" and "repeat" not in e]
    assert [e["trial"] for e in ended] == [0, 1, 2] and all(e["sweep"] == sweep for e in ended)
    assert [e["phase"] for e in events if e["event"] == "phase"] == [
        "search", "confirm", "done"]


@pytest.mark.slow
def test_sweep_resume_into_a_file_logs_the_trials_it_runs(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert subprocess.run([SLOTUNE, "db", "upgrade", "--database-url", db],
                          capture_output=True, timeout=120).returncode == 0
    submitted = subprocess.run([SLOTUNE, "sweep", "submit", "--trials", "2",
                                "--database-url", db], capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL)
    sweep = submitted.stdout.strip()
    log = tmp_path / "resume.log"
    with log.open("wb") as out:
        resumed = subprocess.run([SLOTUNE, "sweep", "resume", sweep, "--executor", "virtual",
                                  "--database-url", db, "--report-dir",
                                  str(tmp_path / "report")], stdout=out,
                                 stderr=subprocess.PIPE, timeout=300,
                                 stdin=subprocess.DEVNULL)
    assert resumed.returncode == 0, resumed.stderr.decode()
    lines = log.read_text().splitlines()
    assert f"sweep {sweep}: resumes on the virtual executor" in lines[0]
    assert [x.split(" trial ")[1].split(":")[0] for x in lines
            if f"sweep {sweep} trial " in x and " repeat " not in x] == [
        "0 started", "0 ok", "1 started", "1 ok"]
