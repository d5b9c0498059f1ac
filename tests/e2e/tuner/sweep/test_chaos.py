"""The chaos suite: the attacks an operator made on the overnight path, on a real Postgres
(and, where the database's clock matters, on SQLite too).

Each test attacks real ``slotune`` processes — ``kill -9`` at several moments, SIGSTOP of
an owner while a successor takes over and SIGCONT after, two coordinators on one queue, a
coordinator racing ``sweep run``, a coordinator whose clock is ten minutes fast (Debian's
``faketime``) beside a healthy one, a dead owner's sweep left to a serving coordinator,
twenty sweeps of another executor queued ahead of a claimable one — and then checks
what must hold of every sweep that survived (:func:`assert_survived`): done, every trial
measured once under a number never reused, nothing running in our tables or in the
Optuna study, the view's winner the best ok trial (confirmed first), and no process of
ours left.

Postgres stopped under a running and under a serving coordinator is in ``test_faults.py``
(marked ``chaos`` too). Marked ``chaos`` (and ``slow``); CI runs it; ``pytest -m chaos``
runs the suite alone. Trials run on the simulated engine in virtual time
(``--executor virtual``), so an attack lands on a coordinator, not on a GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import optuna
import pytest

from slotune.tuner.db import migrate
from slotune.tuner.db.optuna_storage import optuna_storage
from slotune.tuner.db.records import ExecutorChoice
from slotune.tuner.db.store import Store, TrialRecord
from slotune.tuner.strategies import params_key
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from tests.support.polling import wait_for
from tests.support.sweep_data import LAB_4RPS

pytestmark = [pytest.mark.slow, pytest.mark.chaos]

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
MEASURED = ("ok", "failed", "infeasible")


@pytest.fixture
def long_workload(tmp_path: Path) -> Path:
    """Trials of a few seconds each in virtual time: long enough to be hit mid-flight."""
    path = tmp_path / "long.yaml"
    path.write_text("name: chaos-long\ndataset: {kind: random, input_len: 512, output_len: 128}"
                    "\narrivals: {request_rate: 4}\nnum_prompts: 3000\nseed: 0\n")
    return path


@pytest.fixture(params=["postgres", "sqlite"])
def chaos_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, str]]:
    """(store, URL) of a migrated database of this test's own: a real Postgres, or a
    SQLite file, whose clock is each writer's host's own."""
    if request.param == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
    else:
        url = f"sqlite:///{tmp_path / 'chaos.db'}"
        migrate.upgrade(url)
    with Store(url) as store:
        yield store, url


class Processes:
    """The slotune processes a test starts; none outlives it."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([SLOTUNE, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped one cannot handle SIGTERM
                proc.terminate()
        for proc in self.started:
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


@pytest.fixture
def procs() -> Iterator[Processes]:
    running = Processes()
    yield running
    running.stop_all()
    assert all(p.returncode is not None for p in running.started)  # no process of ours left


def finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def resume(store: Store, url: str, sweep_id: int) -> None:
    """``sweep resume --takeover`` as an operator runs it after a crash."""
    run = subprocess.run([SLOTUNE, "sweep", "resume", str(sweep_id), "--takeover",
                          "--executor", "virtual", "--database-url", url],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert run.returncode in (0, 3), run.stderr[-2000:]
    assert "Traceback" not in run.stderr


def assert_survived(store: Store, url: str, sweep_id: int, *, trials: int) -> list[TrialRecord]:
    """The invariants of a sweep after any attack (see the module docstring)."""
    sweep = store.get_sweep(sweep_id)
    assert sweep.status == "done", sweep.stop_reason
    rows = store.list_trials(sweep_id).data
    assert not [t for t in rows if t.status in ("running", "pending")]
    assert len({(t.number, t.attempt) for t in rows}) == len(rows)  # no number reused
    measured = [params_key(t.params) for t in rows if t.status in MEASURED]
    assert len(measured) == len(set(measured)) == trials  # every trial counted once
    lost = {params_key(t.params) for t in rows if t.status == "lost"}
    assert lost <= set(measured)  # whatever a crash lost was measured after it
    assert sweep.optuna_study_name is not None
    study = optuna.load_study(study_name=sweep.optuna_study_name,
                              storage=optuna_storage(url))
    states = {t.state for t in study.get_trials(deepcopy=False)}
    assert optuna.trial.TrialState.RUNNING not in states
    return rows


def assert_view_winner(store: Store, workload: str) -> None:
    """The view shows, per workload, the best ok trial of all its sweeps, confirmed first."""
    ok = [t for s in store.list_sweeps(workload=workload).data
          for t in store.list_trials(s.id, status="ok").data]
    if not ok:
        assert store.best_for_workload(workload) == []
        return
    best = min(ok, key=lambda t: (not t.confirmed, -(t.objective or 0.0), t.id))
    rows = store.best_for_workload(workload)
    assert [r.trial_id for r in rows] == [best.id]


def sweep_run(procs: Processes, url: str, workload: Path, *extra: str) -> subprocess.Popen[str]:
    return procs.start("sweep", "run", "--executor", "virtual", "--strategy", "tpe",
                       "--mode", "goodput", "--seed", "11", "--workload", str(workload),
                       "--database-url", url, *extra)


def submit(url: str, workload: Path, *, trials: int) -> int:
    """``sweep submit`` of a random-search sweep for a serving coordinator; its id."""
    run = subprocess.run([SLOTUNE, "sweep", "submit", "--strategy", "random", "--trials",
                          str(trials), "--workload", str(workload), "--database-url", url],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.strip())


def the_sweep(store: Store) -> int | None:
    sweeps = store.list_sweeps().data
    return sweeps[0].id if sweeps else None


# --- kill -9 at several moments ----------------------------------------------------------


def _before_first_result(store: Store, sweep_id: int) -> bool:
    rows = store.list_trials(sweep_id).data
    return bool(rows) and all(t.status == "running" for t in rows)


def _mid_search(store: Store, sweep_id: int) -> bool:
    rows = store.list_trials(sweep_id).data
    return sum(t.status == "ok" for t in rows) >= 2 and any(t.status == "running" for t in rows)


def _mid_confirmation(store: Store, sweep_id: int) -> bool:
    return store.get_sweep(sweep_id).progress.get("phase") == "confirm"


@pytest.mark.parametrize("moment", [_before_first_result, _mid_search, _mid_confirmation],
                         ids=["before-the-first-result", "mid-search", "mid-confirmation"])
def test_kill_9_at_any_moment_then_resume_finishes_the_sweep(
        moment: Callable[[Store, int], bool], postgres_store: Store, postgres_url: str,
        long_workload: Path, procs: Processes) -> None:
    store = postgres_store
    proc = sweep_run(procs, postgres_url, long_workload, "--trials", "5", "--confirm-top", "2")
    sweep_id = wait_for(lambda: the_sweep(store), 60, "the sweep to be created")
    wait_for(lambda: moment(store, sweep_id), 120, f"the moment {moment.__name__}")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert store.get_sweep(sweep_id).status == "running"  # as a dead coordinator left it

    resume(store, postgres_url, sweep_id)
    rows = assert_survived(store, postgres_url, sweep_id, trials=5)
    if moment is _mid_confirmation:  # the confirmation ran again, whole, after the kill
        assert sum(t.confirmed for t in rows) <= 1
    assert_view_winner(store, "chaos-long")


# --- a stalled owner and its successor ---------------------------------------------------


@pytest.mark.timeout(600)  # its waits add up past the suite's 300 s on a loaded machine
def test_a_stalled_owner_woken_after_a_takeover_stops_and_its_successor_finishes(
        postgres_store: Store, postgres_url: str, long_workload: Path,
        procs: Processes) -> None:
    store = postgres_store
    owner = sweep_run(procs, postgres_url, long_workload, "--trials", "6", "--confirm-top", "0",
                      "--parallel", "2")
    sweep_id = wait_for(lambda: the_sweep(store), 60, "the sweep to be created")
    wait_for(lambda: _mid_search(store, sweep_id), 120, "the owner to be mid-search")
    first_holder = store.get_sweep(sweep_id).claimed_by
    owner.send_signal(signal.SIGSTOP)

    successor = procs.start("sweep", "resume", str(sweep_id), "--takeover", "--executor",
                            "virtual", "--database-url", postgres_url)

    def successor_trial() -> bool:
        holder = store.get_sweep(sweep_id).claimed_by
        return holder != first_holder and any(
            t.worker == holder for t in store.list_trials(sweep_id).data)

    # 180 s: a takeover and a whole trial, on a machine the other tests load too
    wait_for(successor_trial, 180, "the successor to run a trial of its own")
    new_holder = store.get_sweep(sweep_id).claimed_by
    owner.send_signal(signal.SIGCONT)

    # The old owner finds its lease gone and stops, one clear line, touching nothing.
    code, _, err = finish(owner, timeout=60)
    assert code == 1 and "Traceback" not in err, err[-2000:]
    assert "lease" in err and "taken over" in err
    assert store.get_sweep(sweep_id).claimed_by == new_holder
    code, _, err = finish(successor)
    assert code in (0, 3), err[-2000:]
    rows = assert_survived(store, postgres_url, sweep_id, trials=6)
    # The successor's trials were never marked lost by the old owner.
    assert not [t for t in rows if t.worker == new_holder and t.status == "lost"]
    assert_view_winner(store, "chaos-long")


# --- several coordinators on one database ------------------------------------------------


def test_two_coordinators_on_one_queue_run_every_sweep_once(
        postgres_store: Store, postgres_url: str, long_workload: Path,
        procs: Processes) -> None:
    store = postgres_store
    coordinators = [procs.start("coordinator", "--executor", "virtual", "--poll", "0.3",
                                "--database-url", postgres_url) for _ in range(2)]
    short = long_workload.with_name("short.yaml")
    short.write_text(long_workload.read_text().replace("num_prompts: 3000", "num_prompts: 400"))
    submitted = [submit(postgres_url, short, trials=3) for _ in range(3)]

    def all_finished() -> bool:
        return all(store.get_sweep(s).status in ("done", "failed") for s in submitted)

    wait_for(all_finished, 240, "every queued sweep to finish")
    for sweep_id in submitted:
        rows = assert_survived(store, postgres_url, sweep_id, trials=3)
        assert len({t.worker for t in rows}) == 1  # one coordinator ran it, start to end
    assert_view_winner(store, "chaos-long")
    assert all(c.poll() is None for c in coordinators)  # still serving


def test_a_polling_coordinator_never_takes_a_foreground_sweep(
        postgres_store: Store, postgres_url: str, long_workload: Path,
        procs: Processes) -> None:
    store = postgres_store
    poller = procs.start("coordinator", "--executor", "virtual", "--poll", "0.1",
                         "--database-url", postgres_url)
    assert poller.stdout is not None and "serving sweeps" in poller.stdout.readline()
    fg = sweep_run(procs, postgres_url, long_workload, "--trials", "3", "--confirm-top", "0")
    code, out, err = finish(fg)
    assert code in (0, 3), err[-2000:]
    sweep_id = the_sweep(store)
    assert sweep_id is not None and f"sweep {sweep_id} done" in out
    rows = assert_survived(store, postgres_url, sweep_id, trials=3)
    assert len({t.worker for t in rows}) == 1  # all the foreground run's own
    assert poller.poll() is None


# --- a skewed clock -------------------------------------------------------------------


def test_a_coordinator_with_a_fast_clock_takes_no_live_sweep(
        chaos_db: tuple[Store, str], long_workload: Path, procs: Processes) -> None:
    """A coordinator ten minutes fast (libfaketime) beside a healthy one on one queue, on
    Postgres and on SQLite (where the stored times are each host's own): a lease changes
    hands only when its heartbeat stood still on the taker's own monotonic clock, so no
    live sweep changes hands (issue 38: on SQLite the fast one took both)."""
    libfaketime = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    assert libfaketime, "Debian's faketime is not installed (.ci/run installs it)"
    store, url = chaos_db
    healthy = procs.start("coordinator", "--executor", "virtual", "--poll", "0.3",
                          "--database-url", url)
    submitted = [submit(url, long_workload, trials=20) for _ in range(2)]
    wait_for(lambda: all(store.get_sweep(s).status == "running" for s in submitted), 60,
             "the healthy coordinator to run both sweeps")
    holder = store.get_sweep(submitted[0]).claimed_by
    # Preloaded into the coordinator itself (the faketime wrapper would be a parent
    # process that a signal stops without its child).
    skewed = subprocess.Popen(
        [SLOTUNE, "coordinator", "--executor", "virtual", "--poll", "0.3", "--database-url",
         url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "LD_PRELOAD": str(libfaketime[0]), "FAKETIME": "+10m"})
    procs.started.append(skewed)
    # By its clock every heartbeat is ten minutes stale: comparing clocks, it would take
    # both sweeps at its first poll, a second after it starts.
    time.sleep(6)
    assert skewed.poll() is None  # it serves: a skew is said, not fatal
    assert [s for s in submitted if store.get_sweep(s).status == "running"], \
        "the sweeps ended before the skewed coordinator could try"
    for sweep_id in submitted:
        sweep = store.get_sweep(sweep_id)
        assert sweep.claimed_by == holder and sweep.lease_epoch == 1  # never claimed again
    skewed.terminate()
    _, err = skewed.communicate(timeout=30)
    if url.startswith("postgresql"):  # SQLite's clock is the host's: no skew to see
        assert "s ahead of the database's" in err, err[-2000:]

    wait_for(lambda: all(store.get_sweep(s).status == "done" for s in submitted), 240,
             "both sweeps to finish")
    assert healthy.poll() is None
    now = datetime.now(UTC) + timedelta(seconds=1)  # this host's clock is the database's
    for sweep_id in submitted:
        rows = assert_survived(store, url, sweep_id, trials=20)
        assert {t.worker for t in rows} == {holder}
        assert not [t for t in rows if t.status == "lost"]
        sweep = store.get_sweep(sweep_id)
        assert sweep.finished_at is not None and sweep.finished_at <= now  # none from the future
        assert all(t.finished_at is not None and t.finished_at <= now for t in rows)


def test_a_dead_owners_sweep_is_taken_over_by_a_serving_coordinator_after_the_window(
        chaos_db: tuple[Store, str], long_workload: Path, procs: Processes) -> None:
    """``kill -9`` of a foreground sweep; a serving coordinator started after it watches
    the heartbeat stand still for the stale window on its own clock, then takes the
    sweep over and finishes it, on Postgres and on SQLite."""
    from slotune.tuner.sweep.coordinator import STALE_AFTER_S

    store, url = chaos_db
    owner = sweep_run(procs, url, long_workload, "--trials", "4", "--confirm-top", "0")
    sweep_id = wait_for(lambda: the_sweep(store), 60, "the sweep to be created")
    wait_for(lambda: _mid_search(store, sweep_id), 120, "the owner to be mid-search")
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=10)
    dead = store.get_sweep(sweep_id).claimed_by

    successor = procs.start("coordinator", "--executor", "virtual", "--poll", "0.3",
                            "--database-url", url)
    assert successor.stdout is not None and "serving sweeps" in successor.stdout.readline()
    began = time.monotonic()
    wait_for(lambda: store.get_sweep(sweep_id).claimed_by != dead, STALE_AFTER_S + 60,
             "the serving coordinator to take the dead owner's sweep over")
    assert time.monotonic() - began >= STALE_AFTER_S - 1  # not before it watched the window
    wait_for(lambda: store.get_sweep(sweep_id).status == "done", 240, "the sweep to finish")
    rows = assert_survived(store, url, sweep_id, trials=4)
    assert {t.worker for t in rows if t.status == "lost"} <= {dead}
    assert successor.poll() is None


# --- the executor filter ----------------------------------------------------------------


def test_sweeps_recorded_for_another_executor_hide_no_claimable_one(
        chaos_db: tuple[Store, str]) -> None:
    """Twenty older queued sweeps recorded on Ray before a claimable one: a virtual
    coordinator runs the claimable one (issue 38: the filter came after ``LIMIT 20``,
    and it found nothing to claim)."""
    store, url = chaos_db
    on_ray = ExecutorChoice(kind="ray", gpus=4)

    def queue() -> int:
        return queue_sweep(store, SweepRequest(
            space="lab", mode="goodput", workload=LAB_4RPS, strategy="random",
            budget=SweepBudget(max_trials=2, confirm_top=0))).id

    for _ in range(20):  # a Ray coordinator claimed them, lost its cluster, requeued them
        sweep_id = queue()
        assert store.claim_sweep(sweep_id, "coordinator-ray", executor=on_ray) is not None
        store.update_sweep(sweep_id, status="failed")
        store.requeue_sweep(sweep_id)
    claimable = queue()
    run = subprocess.run([SLOTUNE, "coordinator", "--executor", "virtual", "--once",
                          "--poll", "0.3", "--database-url", url], capture_output=True,
                         text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr[-2000:]
    assert store.get_sweep(claimable).status == "done"
    assert_survived(store, url, claimable, trials=2)
    left = store.list_sweeps(status="queued").data
    assert len(left) == 20 and all(s.executor == on_ray for s in left)


# --- a resume keeps the executor -----------------------------------------------------


def test_a_killed_virtual_sweep_resumes_virtual_without_being_told(
        postgres_store: Store, postgres_url: str, long_workload: Path,
        procs: Processes) -> None:
    store = postgres_store
    proc = sweep_run(procs, postgres_url, long_workload, "--trials", "4", "--confirm-top", "0",
                     "--gpus", "3")
    sweep_id = wait_for(lambda: the_sweep(store), 60, "the sweep to be created")
    wait_for(lambda: _mid_search(store, sweep_id), 120, "the sweep to be mid-search")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    recorded = store.get_sweep(sweep_id).executor
    assert recorded is not None and (recorded.kind, recorded.gpus) == ("virtual", 3)

    run = subprocess.run([SLOTUNE, "sweep", "resume", str(sweep_id), "--takeover",
                          "--database-url", postgres_url], capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert run.returncode in (0, 3), run.stderr[-2000:]
    assert (f"sweep {sweep_id}: resumes on the virtual executor with 3 GPUs, as it ran "
            "before") in run.stdout
    assert "ray" not in (run.stdout + run.stderr).lower()  # no Ray was started
    assert_survived(store, postgres_url, sweep_id, trials=4)


# --- a bad file that reaches a worker ---------------------------------------------------

_TRACE_LINE = '{"timestamp": %d, "input_length": 600, "output_length": 16, "hash_ids": [0, 1]}\n'


@pytest.mark.parametrize("executor", ["virtual", "ray"])
def test_a_bad_file_that_reaches_a_worker_stops_the_sweep_with_its_line(
        executor: str, postgres_store: Store, postgres_url: str, tmp_path: Path) -> None:
    """The trace was good when the sweep was submitted (the submit checks it) and broken
    before a worker read it: an input error, not a lost worker — no retry, no traceback,
    the sweep stopped with the file's line and field, its trials left to run again once
    the file is fixed (``sweep resume``)."""
    store = postgres_store
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(_TRACE_LINE % (250 * i) for i in range(200)))
    workload = tmp_path / "trace.yaml"
    workload.write_text("name: chaos-trace\ndataset: {kind: mooncake_trace, path: trace.jsonl}"
                        "\nnum_prompts: 40\nseed: 0\n")
    sweep_id = submit(postgres_url, workload, trials=4)
    trace.write_text(_TRACE_LINE % 0 + '{"timestamp": 250, "input_length": -3, '
                     '"output_length": 16, "hash_ids": []}\n' + _TRACE_LINE % 500)
    served = subprocess.run(
        [SLOTUNE, "coordinator", "--executor", executor, "--once", "--poll", "0.5",
         "--database-url", postgres_url],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    output = served.stdout + served.stderr
    assert served.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "Exception in thread" not in output, output[-3000:]
    sweep = store.get_sweep(sweep_id)
    assert sweep.status == "failed", sweep.stop_reason
    reason = sweep.stop_reason or ""
    assert "line 2: field 'input_length'" in reason and "\n" not in reason, reason
    rows = store.list_trials(sweep_id).data
    assert rows and all(t.attempt == 1 for t in rows), [(t.number, t.attempt) for t in rows]
    assert not [t for t in rows if t.status in ("running", "pending")]
    assert not [t for t in rows if t.status == "ok"]  # nothing was measured on the bad file
