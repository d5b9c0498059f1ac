"""The faults of a long night, survived — all on this machine, in CI.

* the engine is killed mid-trial: that trial is ``crashed``, the sweep goes on, no
  process is left;
* a Ray worker process is killed: the trial is retried, nothing is duplicated;
* (``kill -9`` of the coordinator at several moments, and the other attacks on it: the
  chaos suite, ``test_chaos.py``);
* Postgres is restarted mid-sweep: results that could not be written are kept and
  written once it is back; a coordinator started while it is down waits for it (or, with
  ``--database-wait``, gives up with one line) and then runs what is queued;
* the engine's log overflows its disk budget: the log is capped and the trial scores;
* the engine hangs (SIGSTOP): the trial fails ``hung`` once it has been silent for
  ``timeouts.unresponsive_s``;
* the Ray head is killed under ``sweep run``: one slotune line within seconds, the sweep
  left failed (resumable) with its running trials lost, no engine left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slotune.tuner.db.errors import StorageError
from slotune.tuner.db.models import Sweep
from slotune.tuner.db.store import Store
from slotune.tuner.sweep.coordinator import Coordinator, SweepRunner
from slotune.tuner.sweep.executors import RayExecutor, VirtualExecutor
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from slotune.workers.contracts import SLO, TrialResult, TrialSpec
from slotune.workers.trial.live import HEALTH_PROBE_S, run_trial
from tests.support.lab import TP_SPACE
from tests.support.polling import wait_for
from tests.support.procscan import command_name, descendants, engine_pids
from tests.support.sweep_data import LAB_4RPS

pytestmark = pytest.mark.slow

SLOTUNE = str(Path(sys.executable).with_name("slotune"))

# A small space whose trials take ~10 s on the simulated engine at 2x real time.
SMALL_SPACE: dict[str, Any] = {
    "name": "faults", "engine": "sim", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "rtx4090",
    "fixed": {"quantization": "fp8", "max_model_len": 4096},
    "knobs": {"max_num_seqs": {"type": "values", "values": [32, 64, 128, 256],
                               "default": 256}},
    "workload": {"name": "faults-4rps", "dataset": {"kind": "random", "input_len": 512,
                                                    "output_len": 128},
                 "arrivals": {"request_rate": 4}, "num_prompts": 100, "warmup_requests": 2},
    "slo": "ttft:300,tpot:50",
    "sim": {"time_scale": 2},
    # The faults here are the measured engine's: no quality check (and its baseline
    # engine) in front of it.
    "lossy": {"quantization": {"values": []}},
}


@pytest.fixture(scope="module")
def ray_executor() -> Iterator[RayExecutor]:
    executor = RayExecutor(num_gpus=2)
    yield executor
    executor.shutdown()


def _run_in_thread(coordinator: Coordinator, sweep_id: int) -> tuple[threading.Thread,
                                                                     dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["sweep"] = coordinator.run_sweep(sweep_id)
        except BaseException as exc:  # surfaced by the test's assertions
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


def _kill_an_engine_once_measuring(kill_parent: bool = False) -> None:
    """SIGKILL an engine (or the Ray worker that started it) ~3 s after it appeared."""
    first_seen: dict[int, float] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = time.monotonic()
        for pid in engine_pids():
            first_seen.setdefault(pid, now)
            if now - first_seen[pid] < 3.0:
                continue
            try:
                target = pid
                if kill_parent:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    target = int(stat.split(")")[1].split()[1])
                os.kill(target, signal.SIGKILL)
                return
            except (ProcessLookupError, FileNotFoundError):
                continue  # that trial just ended: take the next one
        time.sleep(0.1)
    raise AssertionError("no engine lived long enough to be killed")


def _no_engine_left() -> None:
    wait_for(lambda: not engine_pids(), 15, "every engine to be gone")


def test_engine_killed_mid_trial_is_crashed_and_the_sweep_goes_on(
        postgres_store: Store, postgres_url: str, ray_executor: RayExecutor) -> None:
    store, migrated_url = postgres_store, postgres_url  # the fault is Ray's: one backend
    sweep = queue_sweep(store, SweepRequest(space=SMALL_SPACE, strategy="grid",
                                            budget=SweepBudget(max_trials=4, confirm_top=0)))
    thread, box = _run_in_thread(Coordinator(store, ray_executor, database_url=migrated_url),
                                 sweep.id)
    _kill_an_engine_once_measuring()
    thread.join(timeout=300)
    assert "error" not in box, box.get("error")
    final = box["sweep"]
    assert final.status == "done"
    rows = store.list_trials(final.id).data
    crashed = [t for t in rows if t.failure_class == "crashed"]
    assert len(crashed) == 1 and crashed[0].result is not None
    assert crashed[0].result["log_tail"]
    assert len([t for t in rows if t.status == "ok"]) == 3
    _no_engine_left()


def test_killed_ray_worker_is_retried_without_duplicates(
        postgres_store: Store, postgres_url: str, ray_executor: RayExecutor) -> None:
    store, migrated_url = postgres_store, postgres_url  # the fault is Ray's: one backend
    sweep = queue_sweep(store, SweepRequest(space=SMALL_SPACE, strategy="grid",
                                            budget=SweepBudget(max_trials=3, max_parallel=1,
                                                               confirm_top=0)))
    thread, box = _run_in_thread(Coordinator(store, ray_executor, database_url=migrated_url),
                                 sweep.id)
    _kill_an_engine_once_measuring(kill_parent=True)  # the Ray worker running it dies
    thread.join(timeout=300)
    assert "error" not in box, box.get("error")
    rows = store.list_trials(box["sweep"].id).data
    lost = [t for t in rows if t.failure_class == "worker_lost"]
    assert len(lost) == 1
    retried = [t for t in rows if t.number == lost[0].number]
    assert [(t.attempt, t.status) for t in retried] == [(1, "failed"), (2, "ok")]
    measured = [repr(sorted(t.params.items())) for t in rows if t.status == "ok"]
    assert len(measured) == len(set(measured)) == 3
    _no_engine_left()


def _postgres(action: str) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action,
                    *(["-m", "fast"] if action == "stop" else [])],
                   check=True, capture_output=True, timeout=60)


@pytest.mark.exclusive  # it stops the Postgres server every other test uses
@pytest.mark.chaos  # with tests/e2e/tuner/sweep/test_chaos.py
def test_postgres_restart_mid_sweep_loses_nothing(postgres_store: Store, postgres_url: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    store, migrated_url = postgres_store, postgres_url
    # Five times the lab's requests a trial: virtual trials take a tenth of a second,
    # and forty of them must not all finish before the server is down.
    sweep = queue_sweep(store, SweepRequest(
        space="lab", mode="goodput", workload={**LAB_4RPS, "num_prompts": 800},
        strategy="random", budget=SweepBudget(max_trials=40, confirm_top=0)))
    thread, box = _run_in_thread(
        Coordinator(store, VirtualExecutor(2), database_url=migrated_url), sweep.id)
    wait_for(lambda: len(store.list_trials(sweep.id, status="ok").data) >= 4, 60,
              "the first results")
    assert len(store.list_trials(sweep.id).data) < 30  # mid-sweep: most is still to come
    try:
        _postgres("stop")
        time.sleep(4)  # trials keep finishing; their results cannot be written
    finally:
        _postgres("start")
    thread.join(timeout=300)
    assert "error" not in box, box.get("error")
    final = store.get_sweep(sweep.id)
    assert final.status == "done"
    rows = store.list_trials(sweep.id).data
    assert len(rows) == 40 and all(t.status == "ok" for t in rows)
    assert len({repr(sorted(t.params.items())) for t in rows}) == 40
    assert "database unavailable" in caplog.text
    assert "the database is back" in caplog.text


NOISY_ENGINE = '''#!{python}
"""A vllm stand-in that floods its log, then serves with the simulator."""
import os, sys
junk = ("x" * 199 + "\\n").encode()
for _ in range({lines}):
    os.write(1, junk)
os.execv({slotune_sim!r}, [{slotune_sim!r}, *sys.argv[1:]])
'''


@pytest.mark.chaos
def test_a_hanging_engine_fails_its_trial_hung_within_the_silence_limit(
        tmp_path: Path) -> None:
    """SIGSTOP of the engine under a trial: alive, silent. Without the hang watchdog the
    trial waited for its requests' own timeout (10 minutes) and scored a goodput of 0."""
    run_id = f"hang-{uuid.uuid4().hex[:6]}"
    spec = TrialSpec.model_validate({
        "run_id": run_id, "engine": "sim", "model": "Qwen/Qwen2.5-7B-Instruct",
        "gpu": "rtx4090", "knobs": {"quantization": "fp8"},
        "workload": {"dataset": {"kind": "random", "input_len": 256, "output_len": 64},
                     "arrivals": {"request_rate": 4}, "num_prompts": 400},
        "slo": SLO.parse("ttft:500,tpot:60"), "timeouts": {"unresponsive_s": 10},
    })
    stopped: list[float] = []

    def stop_the_engine_once_it_serves() -> None:
        pids = wait_for(lambda: engine_pids(run_id), 120, "the engine to start")
        wait_for(lambda: (tmp_path / "trial" / "engine.log").exists(), 60, "its log")
        time.sleep(8)  # booted and measuring
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        stopped.append(time.monotonic())

    attacker = threading.Thread(target=stop_the_engine_once_it_serves)
    attacker.start()
    result = run_trial(spec, workdir=tmp_path / "trial")
    ended = time.monotonic()
    attacker.join()
    assert stopped, "the engine was never stopped"
    assert result.status == "failed" and result.failure == "hung", result.failure_message
    assert "has not answered /health" in (result.failure_message or "")
    # The silence limit (10 s) plus one probe interval and the teardown, not 10 minutes.
    assert ended - stopped[0] < 10 + 2 * HEALTH_PROBE_S + spec.timeouts.teardown_grace_s + 5
    _no_engine_left()


def test_engine_log_over_its_disk_budget_is_capped_and_the_trial_scores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    budget = 1 << 20
    binary = tmp_path / "vllm"
    binary.write_text(NOISY_ENGINE.format(
        python=sys.executable, lines=25_000,  # 5 MB of noise before start-up
        slotune_sim=str(Path(sys.executable).with_name("slotune-sim"))))
    binary.chmod(0o755)
    monkeypatch.setenv("SLOTUNE_ENGINE_LOG_MAX_BYTES", str(budget))
    monkeypatch.setenv("SLOTUNE_SIM_GPU", "rtx4090")
    spec = TrialSpec.model_validate({
        "run_id": f"noisy-{uuid.uuid4().hex[:6]}", "engine": "vllm", "model":
        "Qwen/Qwen2.5-7B-Instruct", "engine_binary": str(binary),
        "env_passthrough": ["SLOTUNE_SIM_GPU"], "knobs": {"quantization": "fp8"},
        "workload": {"dataset": {"kind": "random", "input_len": 256, "output_len": 32},
                     "arrivals": {"request_rate": 4}, "num_prompts": 20},
        "slo": SLO.parse("ttft:500,tpot:60"), "gpu": "rtx4090",
    })
    workdir = tmp_path / "trial"
    result = run_trial(spec, workdir=workdir)
    assert result.status == "ok" and result.objective > 0
    log = workdir / "engine.log"
    assert log.stat().st_size <= budget + 4096
    text = log.read_text()
    assert "bytes of engine log dropped" in text
    # The newest output (the engine's start-up lines) survived, and was read for facts.
    assert "GPU KV cache size" in text
    assert result.engine.kv_cache_tokens and result.engine.kv_cache_tokens > 100_000


@pytest.mark.exclusive  # it stops the Postgres server every other test uses
@pytest.mark.chaos  # with tests/e2e/tuner/sweep/test_chaos.py
def test_serving_coordinator_rides_out_a_postgres_stop_then_runs_what_is_queued(
        postgres_store: Store, postgres_url: str) -> None:
    store = postgres_store
    coordinator = subprocess.Popen(
        [SLOTUNE, "coordinator", "--executor", "virtual", "--poll", "0.5",
         "--database-url", postgres_url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert coordinator.stdout is not None
        assert "serving sweeps" in coordinator.stdout.readline()
        try:
            _postgres("stop")
            time.sleep(12)
            assert coordinator.poll() is None, "the coordinator died with the database"
        finally:
            _postgres("start")
        sweep = wait_for(lambda: _queue_when_up(store), 60, "Postgres to accept a sweep")
        final = wait_for(lambda: (s := store.get_sweep(sweep)).status in ("done", "failed")
                          and s, 120, "the sweep queued after the outage to finish")
        assert final.status == "done", final.stop_reason
        assert coordinator.poll() is None
    finally:
        coordinator.terminate()
        _, err = coordinator.communicate(timeout=30)
    # One line when the outage began and one when it ended, not one per retry.
    lines = err.splitlines()
    assert sum("retrying with backoff" in line for line in lines) == 1, err[-2000:]
    assert sum("the database is back" in line for line in lines) == 1, err[-2000:]
    assert "Traceback" not in err


@pytest.mark.exclusive  # it stops the Postgres server every other test uses
@pytest.mark.chaos
def test_a_coordinator_started_before_its_database_waits_for_it_then_runs_the_queue(
        postgres_store: Store, postgres_url: str) -> None:
    store = postgres_store
    queued = _queue_when_up(store)
    assert queued is not None
    args = ["coordinator", "--executor", "virtual", "--poll", "0.5", "--database-url",
            postgres_url]
    try:
        _postgres("stop")
        patient = subprocess.Popen([SLOTUNE, *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        bounded = subprocess.run([SLOTUNE, *args, "--database-wait", "2"], capture_output=True,
                                 text=True, timeout=60, stdin=subprocess.DEVNULL)
        time.sleep(2)
        assert patient.poll() is None, "the coordinator exited without its database"
    finally:
        _postgres("start")
    # The bounded one gave up with one slotune line, no traceback.
    assert bounded.returncode == 1, bounded.stderr
    assert "Traceback" not in bounded.stderr
    assert "gave up waiting for the database after 2 s at start" in bounded.stderr
    try:
        final = wait_for(lambda: (s := store.get_sweep(queued)).status in ("done", "failed")
                          and s, 120, "the queued sweep to run once the database is up")
        assert final.status == "done", final.stop_reason
    finally:
        patient.terminate()
        _, err = patient.communicate(timeout=30)
    lines = err.splitlines()
    assert sum("retrying with backoff" in line for line in lines) == 1, err[-2000:]
    assert sum("the database is back" in line for line in lines) == 1, err[-2000:]
    assert "Traceback" not in err


@pytest.mark.chaos
def test_a_lost_ray_head_ends_the_sweep_with_one_line_and_a_resumable_row(
        postgres_store: Store, postgres_url: str, tmp_path: Path) -> None:
    store = postgres_store
    space = tmp_path / "faults.yaml"
    space.write_text(json.dumps(SMALL_SPACE))
    sweep_run = subprocess.Popen(
        [SLOTUNE, "sweep", "run", "--space", str(space), "--executor", "ray", "--strategy",
         "random", "--trials", "4", "--confirm-top", "0", "--database-url", postgres_url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        def running() -> int | None:
            sweeps = store.list_sweeps().data
            return sweeps[0].id if sweeps and store.list_trials(
                sweeps[0].id, status="running").count else None

        sweep_id = wait_for(running, 120, "a trial to run on Ray")
        _kill_the_ray_head_of(sweep_run.pid)
        killed = time.monotonic()
        _, err = sweep_run.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if sweep_run.poll() is None:
            sweep_run.kill()
            sweep_run.communicate()
    assert sweep_run.returncode == 1 and "Traceback" not in err, err[-3000:]
    said = [line for line in err.splitlines() if line.startswith("slotune:")]
    assert len(said) == 1 and "the Ray head stopped answering" in said[0], err[-3000:]
    assert f"slotune sweep resume {sweep_id}" in said[0]
    assert took < 20, f"{took:.0f} s from the kill to the line"  # Ray alone: 60 s, silent
    sweep = store.get_sweep(sweep_id)
    assert sweep.status == "failed" and "Ray head" in (sweep.stop_reason or "")
    assert not store.list_trials(sweep_id, status="running").count
    _no_engine_left()


@pytest.mark.chaos
def test_a_serving_coordinator_that_loses_its_ray_head_requeues_its_sweep_and_exits(
        postgres_store: Store, postgres_url: str, tmp_path: Path) -> None:
    store = postgres_store
    space = tmp_path / "faults.yaml"
    space.write_text(json.dumps(SMALL_SPACE))
    coordinator = subprocess.Popen(
        [SLOTUNE, "coordinator", "--executor", "ray", "--poll", "0.5", "--database-url",
         postgres_url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        submitted = subprocess.run(
            [SLOTUNE, "sweep", "submit", "--space", str(space), "--strategy", "random",
             "--trials", "4", "--database-url", postgres_url],
            capture_output=True, text=True, timeout=60, check=True)
        sweep_id = int(submitted.stdout.strip())
        wait_for(lambda: store.list_trials(sweep_id, status="running").count, 120,
                 "a trial to run on Ray")
        _kill_the_ray_head_of(coordinator.pid)
        _, err = coordinator.communicate(timeout=60)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.communicate()
    assert coordinator.returncode == 1 and "Traceback" not in err, err[-3000:]
    said = [line for line in err.splitlines() if line.startswith("slotune:")]
    assert len(said) == 1 and "back in the queue" in said[0], err[-3000:]
    sweep = store.get_sweep(sweep_id)
    assert sweep.status == "queued"  # the next coordinator claims it
    assert not store.list_trials(sweep_id, status="running").count
    _no_engine_left()


def _kill_the_ray_head_of(driver: int) -> None:
    """``kill -9`` of the local Ray head a slotune process started (GCS and raylet)."""
    def both() -> list[int] | None:
        found = [pid for pid in descendants(driver)
                 if command_name(pid) in ("gcs_server", "raylet")]
        return found if len(found) == 2 else None

    for pid in wait_for(both, 10, "the Ray head's GCS and raylet"):
        os.kill(pid, signal.SIGKILL)


def _queue_when_up(store: Store) -> int | None:
    try:
        request = SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS,
                               strategy="random", budget=SweepBudget(max_trials=3, confirm_top=0))
        return queue_sweep(store, request).id
    except StorageError:
        return None


def test_a_sweep_that_cannot_start_fails_alone_and_the_next_one_runs(
        store: Store, migrated_url: str) -> None:
    # A row queued before seeds were checked at the edge: its sampler refuses the seed.
    bad = queue_sweep(store, SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS,
                                          budget=SweepBudget(max_trials=2)))
    with Store(migrated_url) as raw, raw._sessions.begin() as session:
        row = session.get(Sweep, bad.id)
        assert row is not None
        row.seed = -1
    good = queue_sweep(store, SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS,
                                           strategy="random",
                                           budget=SweepBudget(max_trials=2, confirm_top=0)))
    Coordinator(store, VirtualExecutor(2), database_url=migrated_url).serve(poll_s=0.2,
                                                                            once=True)
    assert store.get_sweep(bad.id).status == "failed"
    assert "seed" in (store.get_sweep(bad.id).stop_reason or "").lower()
    assert store.get_sweep(good.id).status == "done"


def test_a_stalled_owner_that_wakes_after_a_takeover_touches_nothing_of_its_successor(
        store: Store, migrated_url: str) -> None:
    sweep = queue_sweep(store, SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS,
                                            strategy="random",
                                            budget=SweepBudget(max_trials=4, confirm_top=0)))
    old = store.claim_sweep(sweep.id, "coordinator-old")
    assert old is not None
    stalled = SweepRunner(store, old, VirtualExecutor(2), coordinator_id="coordinator-old",
                          database_url=migrated_url)
    mine = store.start_trial(sweep.id, number=0, params={"max_num_seqs": 64}, attempt=1,
                             worker="coordinator-old")
    # The owner stalls (SIGSTOP); a successor takes over, recovers the orphan, runs its own.
    assert store.claim_sweep(sweep.id, "coordinator-new", stale_after_s=0) is not None
    assert [o.number for o in store.recover_orphans(sweep.id)] == [0]
    theirs = store.start_trial(sweep.id, number=1, params={"max_num_seqs": 128}, attempt=1,
                               worker="coordinator-new")
    # The old owner wakes up: its late result is refused and dropped, its heartbeat finds
    # the lease gone, and it stops without recovering orphans of a sweep it lost.
    late = TrialResult(run_id="late", status="ok", objective=3.0)
    stalled.recorder.add(lambda: store.finish_trial(mine.id, late, lease=stalled.lease))
    assert stalled.recorder.drain() and stalled.lease_lost
    assert stalled._beat() is False  # never throttled once the lease is lost
    rows = {t.number: t for t in store.list_trials(sweep.id).data}
    assert rows[0].status == "lost" and rows[0].objective is None  # dropped, not kept twice
    assert rows[1].id == theirs.id and rows[1].status == "running"  # the successor's, intact
    current = store.get_sweep(sweep.id)
    assert current.status == "running" and current.claimed_by == "coordinator-new"


def test_a_foreground_sweep_is_born_held_so_a_polling_coordinator_cannot_take_it(
        store: Store, migrated_url: str) -> None:
    request = SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS, strategy="random",
                           budget=SweepBudget(max_trials=2, confirm_top=0))
    sweep = queue_sweep(store, request, claimed_by="coordinator-foreground")
    assert sweep.status == "running" and sweep.claimed_by == "coordinator-foreground"
    assert store.claim_next_sweep("coordinator-poller", stale_after_s=15.0) is None
    final = Coordinator(store, VirtualExecutor(2), database_url=migrated_url,
                        coordinator_id="coordinator-foreground").run_sweep(sweep.id)
    assert final.status == "done"


def test_sweep_run_with_an_unknown_executor_leaves_no_row(store: Store,
                                                         migrated_url: str) -> None:
    proc = subprocess.run([SLOTUNE, "sweep", "run", "--executor", "slurm", "--database-url",
                           migrated_url], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert store.list_sweeps().count == 0


def test_a_tp_space_on_a_two_gpu_local_ray_ends_with_its_big_trials_infeasible(
        postgres_store: Store, postgres_url: str, ray_executor: RayExecutor) -> None:
    store = postgres_store
    sweep = queue_sweep(store, SweepRequest(space=TP_SPACE, strategy="grid",
                                            budget=SweepBudget(max_trials=6, confirm_top=0)))
    final = Coordinator(store, ray_executor, database_url=postgres_url).run_sweep(sweep.id)
    assert final.status == "done"
    final_attempts = {r.number: r for r in store.list_trials(sweep.id).data}  # by attempt
    rows = list(final_attempts.values())
    by_tp = {tp: [r for r in rows if r.params["tensor_parallel_size"] == tp] for tp in (2, 4, 8)}
    summary = [(r.number, r.attempt, r.status, r.params, r.failure_class) for r in rows]
    assert [r.status for r in by_tp[2]] == ["ok", "ok"], summary  # booted on the two GPUs
    for tp in (4, 8):
        assert [r.status for r in by_tp[tp]] == ["infeasible", "infeasible"], summary
        for row in by_tp[tp]:
            assert row.result is not None and row.result["failure_message"] == (
                f"can never be placed: needs {tp} GPUs on one node; this machine's local Ray "
                "offers 2")
            assert row.result["timings"]["boot_s"] is None  # never booted
    _no_engine_left()
