"""The store's contract, one suite for SQLite and Postgres (see conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from slotune.tuner.db.records import ExecutorChoice
from slotune.tuner.db.store import (
    Conflict,
    LeaseLost,
    NotFound,
    SchemaMissing,
    StorageError,
    StorageUnavailable,
    Store,
    SweepRecord,
)
from slotune.workers.contracts import SLO, EngineFacts, TrialResult, TrialSpec, Workload

SLO_A = SLO(ttft=300, tpot=50)
SLO_B = SLO(ttft=1000, tpot=100)


def _sweep(store: Store, *, workload: str = "chat", slo: SLO = SLO_A, model: str = "m-8b",
           gpu: str = "h100-sxm", name: str = "s", owner: str | None = None,
           rate: float = 20.0) -> SweepRecord:
    return store.create_sweep(
        name=name, workload=Workload(name=workload, arrivals={"request_rate": rate}), slo=slo,
        space={"knobs": ["x"]},
        model=model, gpu=gpu, strategy="tpe", budget={"max_trials": 10}, owner=owner)


def _ok(objective: float, **extra: Any) -> TrialResult:
    return TrialResult(run_id="t", status="ok", objective=objective, gate_passed=True,
                       **extra)


def _measured(store: Store, sweep_id: int, number: int, objective: float,
              params: dict[str, Any] | None = None) -> int:
    trial = store.start_trial(sweep_id, number=number, params=params or {"n": number})
    store.finish_trial(trial.id, _ok(objective))
    return trial.id


# --- workloads and sweeps --------------------------------------------------------------


def test_upsert_workload_updates_the_spec(store: Store) -> None:
    first = store.upsert_workload(Workload(name="rag", num_prompts=10))
    second = store.upsert_workload(Workload(name="rag", num_prompts=20))
    assert first.id == second.id
    assert store.get_workload("rag").spec["num_prompts"] == 20
    assert [w.name for w in store.list_workloads()] == ["rag"]
    with pytest.raises(NotFound):
        store.get_workload("nope")


def test_create_get_list_sweeps_with_filters_and_pages(store: Store) -> None:
    made = [_sweep(store, name=f"s{i}", workload="chat" if i % 2 else "rag",
                   owner="ann" if i < 3 else "bob") for i in range(5)]
    got = store.get_sweep(made[0].id)
    assert got.status == "queued" and got.workload == "rag"
    assert got.slo_key == '{"percentile":99.0,"tpot":50.0,"ttft":300.0}'
    assert got.optuna_study_name == f"slotune-sweep-{got.id}"

    page = store.list_sweeps(limit=2)
    assert page.count == 5 and [s.name for s in page.data] == ["s4", "s3"]  # newest first
    assert [s.name for s in store.list_sweeps(limit=2, offset=4).data] == ["s0"]
    assert store.list_sweeps(workload="chat").count == 2
    assert store.list_sweeps(owner="ann", workload="rag").count == 2
    store.cancel_sweep(made[1].id)
    assert [s.name for s in store.list_sweeps(status="cancelled").data] == ["s1"]
    assert store.list_sweeps(status=["queued", "cancelled"]).count == 5
    with pytest.raises(NotFound):
        store.get_sweep(10_000)


def test_claim_is_exclusive_until_the_holder_goes_stale(store: Store) -> None:
    sweep = _sweep(store)
    claimed = store.claim_sweep(sweep.id, "coord-a")
    assert claimed is not None and claimed.status == "running"
    assert claimed.claimed_by == "coord-a" and claimed.started_at is not None
    assert store.claim_sweep(sweep.id, "coord-b") is None
    assert store.claim_sweep(sweep.id, "coord-b", stale_after_s=3600) is None
    assert store.claim_sweep(sweep.id, "coord-a") is not None  # same coordinator, restarted

    # Its heartbeat seen standing still for the window: taken over.
    assert store.claim_sweep(sweep.id, "coord-b", stale_after_s=0.01) is None  # watching
    time.sleep(0.05)
    taken = store.claim_sweep(sweep.id, "coord-b", stale_after_s=0.01)
    assert taken is not None and taken.claimed_by == "coord-b"
    assert taken.started_at == claimed.started_at  # a takeover is not a new start
    assert claimed.lease is not None and taken.lease is not None
    with pytest.raises(LeaseLost):
        store.heartbeat_sweep(claimed.lease)  # a's heartbeat tells it to stop
    store.heartbeat_sweep(taken.lease)


def test_claim_next_takes_the_oldest_queued(store: Store) -> None:
    first, second = _sweep(store, name="first"), _sweep(store, name="second")
    got = store.claim_next_sweep("c1")
    assert got is not None and got.id == first.id
    got = store.claim_next_sweep("c2")
    assert got is not None and got.id == second.id
    assert store.claim_next_sweep("c3") is None


def test_cancel_and_status_transitions(store: Store) -> None:
    sweep = _sweep(store)
    claimed = store.claim_sweep(sweep.id, "c")
    assert claimed is not None and claimed.lease is not None
    cancelled = store.cancel_sweep(sweep.id, "user asked")
    assert cancelled.status == "cancelled" and cancelled.stop_reason == "user asked"
    assert cancelled.finished_at is not None
    assert store.cancel_sweep(sweep.id).status == "cancelled"  # idempotent
    with pytest.raises(Conflict):  # the coordinator's late "done" does not undo the cancel
        store.update_sweep(sweep.id, status="done")
    with pytest.raises(Conflict) as stopped:
        store.heartbeat_sweep(claimed.lease)
    assert not isinstance(stopped.value, LeaseLost)  # still its holder: it may tidy up

    resumed = store.requeue_sweep(sweep.id)
    assert resumed.status == "queued" and resumed.finished_at is None
    assert store.claim_sweep(sweep.id, "c") is not None
    done = store.update_sweep(sweep.id, status="done", stop_reason="plateau",
                              progress={"trials": 7, "best": 12.5})
    assert (done.status, done.stop_reason, done.progress) == ("done", "plateau",
                                                              {"trials": 7, "best": 12.5})
    with pytest.raises(Conflict):
        store.cancel_sweep(sweep.id)


# --- trials ----------------------------------------------------------------------------


def test_trial_lifecycle_keeps_the_whole_result(store: Store) -> None:
    sweep = _sweep(store)
    spec = TrialSpec(run_id="1-0", model="m-8b", knobs={"max_num_seqs": 64},
                     engine_args={"max_model_len": 4096, "max_num_seqs": 256},
                     workload=Workload(name="chat"), slo=SLO_A)
    trial = store.start_trial(sweep.id, number=0, params={"max_num_seqs": 64}, spec=spec,
                              worker="w-1", node="gpu-node-3")
    assert trial.status == "running" and trial.heartbeat_at is not None
    assert trial.config == {"max_model_len": 4096, "max_num_seqs": 64}
    store.heartbeat_trial(trial.id)

    result = _ok(12.5, capacity=14.0, diagnosis={"binding": "decode"},
                 metrics={"p99_ttft_ms": 210.0, "request_rate": float("inf")})
    done = store.finish_trial(trial.id, result)
    assert (done.status, done.objective, done.capacity) == ("ok", 12.5, 14.0)
    assert done.diagnosis == {"binding": "decode"} and done.finished_at is not None
    assert done.timings is not None and "total_s" in done.timings
    assert done.result is not None
    assert TrialResult.model_validate(done.result).metrics["p99_ttft_ms"] == 210.0

    failed = store.start_trial(sweep.id, number=1, params={"max_num_seqs": 4096})
    record = store.finish_trial(failed.id, TrialResult(
        run_id="t", status="failed", failure="oom", constraints={"fits": 1.0}))
    assert (record.status, record.failure_class, record.objective) == ("failed", "oom", 0.0)

    with pytest.raises(Conflict):
        store.finish_trial(trial.id, result)  # once only
    with pytest.raises(Conflict):
        store.heartbeat_trial(trial.id)
    page = store.list_trials(sweep.id)
    assert page.count == 2 and [t.number for t in page.data] == [0, 1]
    assert store.list_trials(sweep.id, status="failed").count == 1
    with pytest.raises(NotFound):
        store.start_trial(10_000, number=0, params={})


def test_a_finished_trial_keeps_the_node_its_result_names(store: Store) -> None:
    sweep = _sweep(store)
    ran = store.start_trial(sweep.id, number=0, params={"n": 0})
    assert ran.node is None
    assert store.finish_trial(ran.id, _ok(3.0, node="ray-node-a")).node == "ray-node-a"
    # A lost worker's result does not know where it ran: the row keeps what it had.
    lost = store.start_trial(sweep.id, number=1, params={"n": 1}, node="gpu-node-3")
    record = store.finish_trial(lost.id, TrialResult(
        run_id="t", status="failed", failure="worker_lost"))
    assert record.node == "gpu-node-3"
    assert {t.number: t.node for t in store.list_trials(sweep.id).data} == {
        0: "ray-node-a", 1: "gpu-node-3"}


def test_duplicate_trial_attempt_is_a_conflict(store: Store) -> None:
    sweep = _sweep(store)
    store.start_trial(sweep.id, number=3, params={"a": 1})
    with pytest.raises(Conflict) as info:
        store.start_trial(sweep.id, number=3, params={"a": 1})
    assert isinstance(info.value.__cause__, Exception)  # raised from the driver's error
    store.start_trial(sweep.id, number=3, params={"a": 1}, attempt=2)  # a retry is fine


def test_orphan_recovery_returns_exactly_the_unfinished_and_is_idempotent(store: Store) -> None:
    sweep, other = _sweep(store), _sweep(store, name="other")
    _measured(store, sweep.id, 0, 5.0)
    running = [store.start_trial(sweep.id, number=n, params={"max_num_seqs": 2 ** n})
               for n in (1, 2)]
    store.start_trial(other.id, number=0, params={"untouched": True})

    orphans = store.recover_orphans(sweep.id)
    assert [(o.trial_id, o.params) for o in orphans] == [(t.id, t.params) for t in running]
    assert store.recover_orphans(sweep.id) == []
    lost = store.list_trials(sweep.id, status="lost").data
    assert {t.id for t in lost} == {t.id for t in running}
    assert all(t.failure_class == "worker_lost" for t in lost)
    assert store.list_trials(other.id, status="running").count == 1
    with pytest.raises(Conflict):  # a late result of a lost trial is refused
        store.finish_trial(running[0].id, _ok(99.0))


def test_every_claim_starts_a_new_lease_and_fences_the_writes_of_the_old_one(
        store: Store) -> None:
    sweep = _sweep(store)
    first = store.claim_sweep(sweep.id, "coord-a")
    again = store.claim_sweep(sweep.id, "coord-a")  # the same id, restarted
    assert first is not None and again is not None
    assert first.lease is not None and again.lease is not None
    assert again.lease.epoch == first.lease.epoch + 1
    old, new = first.lease, again.lease
    mine = store.start_trial(sweep.id, number=0, params={"x": 1}, lease=new)
    with pytest.raises(LeaseLost):  # a process still running under the old claim
        store.start_trial(sweep.id, number=1, params={"x": 2}, lease=old)

    taken = store.claim_sweep(sweep.id, "coord-b", stale_after_s=0)  # a forced takeover
    assert taken is not None and taken.lease is not None
    successor = taken.lease
    refused: list[Any] = [
        lambda: store.heartbeat_sweep(new),
        lambda: store.recover_orphans(sweep.id, lease=new),
        lambda: store.finish_trial(mine.id, _ok(9.0), lease=new),
        lambda: store.heartbeat_trial(mine.id, lease=new),
        lambda: store.update_sweep(sweep.id, progress={"phase": "stale"}, lease=new),
        lambda: store.update_sweep(sweep.id, status="done", lease=new),
        lambda: store.add_card(sweep.id, step=1, symptom="s", hypothesis="h", variable="v",
                               values=[1], expected_direction="up", lease=new),
    ]
    for write in refused:
        with pytest.raises(LeaseLost):
            write()
    # Nothing the old holder tried landed: the successor finds the sweep as it left it.
    row = store.get_trial(mine.id)
    assert row.status == "running" and row.objective is None
    current = store.get_sweep(sweep.id)
    assert current.status == "running" and current.claimed_by == "coord-b"
    assert current.progress == {} and store.list_cards(sweep.id) == []
    # The successor's own writes go through.
    assert [o.trial_id for o in store.recover_orphans(sweep.id, lease=successor)] == [mine.id]
    redo = store.start_trial(sweep.id, number=0, params={"x": 1}, attempt=2, lease=successor)
    store.finish_trial(redo.id, _ok(7.0), lease=successor)
    with pytest.raises(LeaseLost):
        store.mark_confirmed(redo.id, lease=new)
    assert store.mark_confirmed(redo.id, lease=successor).confirmed
    store.heartbeat_sweep(successor)
    other = _sweep(store, name="other")
    with pytest.raises(Conflict):  # a lease covers its own sweep only
        store.start_trial(other.id, number=0, params={}, lease=successor)


# --- the view --------------------------------------------------------------------------


def test_view_picks_confirmed_first_then_highest_objective(store: Store) -> None:
    chat = _sweep(store)
    low = _measured(store, chat.id, 0, 10.0, {"max_num_seqs": 64})
    _measured(store, chat.id, 1, 30.0, {"max_num_seqs": 256})
    failed = store.start_trial(chat.id, number=2, params={"max_num_seqs": 4096})
    store.finish_trial(failed.id, TrialResult(run_id="t", status="failed", failure="oom",
                                              objective=0.0))

    best = store.best_for_workload("chat")
    assert len(best) == 1 and best[0].objective == 30.0
    assert best[0].config == {"max_num_seqs": 256} and not best[0].confirmed

    store.mark_confirmed(low)
    best = store.best_for_workload("chat")
    assert (best[0].trial_id, best[0].confirmed, best[0].objective) == (low, True, 10.0)
    assert (best[0].model, best[0].gpu) == ("m-8b", "h100-sxm")
    assert best[0].measured_at is not None
    with pytest.raises(Conflict):
        store.mark_confirmed(failed.id)


def _capacity_trial(store: Store, sweep_id: int, number: int, *, tp: int,
                    capacity: float) -> int:
    """A capacity-mode trial of a TP-``tp`` configuration: objective per GPU, as run."""
    params = {"tensor_parallel_size": tp, "max_num_seqs": 64 * (number + 1)}
    spec = TrialSpec(run_id=f"t{number}", model="m-70b", knobs=params,
                     workload=Workload(name="chat"), slo=SLO_A, mode="capacity")
    trial = store.start_trial(sweep_id, number=number, params=params, spec=spec)
    store.finish_trial(trial.id, _ok(capacity / tp, capacity=capacity))
    return trial.id


def test_view_ranks_capacity_per_gpu_not_per_replica(store: Store) -> None:
    chat = _sweep(store)
    _capacity_trial(store, chat.id, 0, tp=8, capacity=40.0)  # 5 req/s per GPU
    two = _capacity_trial(store, chat.id, 1, tp=2, capacity=16.0)  # 8 req/s per GPU
    _capacity_trial(store, chat.id, 2, tp=4, capacity=28.0)  # 7 req/s per GPU
    [best] = store.best_for_workload("chat")
    assert (best.trial_id, best.gpus, best.capacity) == (two, 2, 16.0)
    assert best.capacity_per_gpu == pytest.approx(8.0)
    assert store.get_trial(two).gpus == 2


def test_view_has_one_row_per_workload_model_gpu_slo(store: Store) -> None:
    _measured(store, _sweep(store, workload="chat").id, 0, 10.0)
    _measured(store, _sweep(store, workload="chat", slo=SLO_B).id, 0, 20.0)
    _measured(store, _sweep(store, workload="chat", gpu="a100").id, 0, 5.0)
    _measured(store, _sweep(store, workload="rag").id, 0, 7.0)
    only_failed = _sweep(store, workload="codegen")
    trial = store.start_trial(only_failed.id, number=0, params={})
    store.finish_trial(trial.id, TrialResult(run_id="t", status="infeasible",
                                             violated_rule="x >= y"))

    rows = store.best_config_per_workload()
    keys = [(r.workload, r.gpu, r.slo, r.objective) for r in rows]
    assert len(keys) == 4
    assert ("rag", "h100-sxm", rows[-1].slo, 7.0) in keys
    assert {r.objective for r in rows if r.workload == "chat"} == {10.0, 20.0, 5.0}
    assert store.best_for_workload("codegen") == []
    with pytest.raises(NotFound):
        store.best_for_workload("no-such-workload")


def _run(store: Store, sweep_id: int, number: int, *, objective: float, headroom: float,
         version: str | None = "0.32.0", params: dict[str, Any] | None = None) -> int:
    """A vLLM trial measured on engine ``version``: objective 0 means the SLO was missed."""
    params = params or {"max_num_seqs": 64 * (number + 1)}
    spec = TrialSpec(run_id=f"t{number}", engine="vllm", model="m-8b", knobs=params,
                     workload=Workload(name="chat"), slo=SLO_A)
    trial = store.start_trial(sweep_id, number=number, params=params, spec=spec)
    store.finish_trial(trial.id, TrialResult(
        run_id=f"t{number}", status="ok", objective=objective, gate_passed=objective > 0,
        headroom=headroom, engine=EngineFacts(engine_version=version)))
    return trial.id


def test_view_rule_a_configuration_that_missed_the_slo_is_never_a_best_row(
        store: Store) -> None:
    sweep = _sweep(store, workload="lab")
    _run(store, sweep.id, 0, objective=0.0, headroom=1.9)
    closest = _run(store, sweep.id, 1, objective=0.0, headroom=1.25)
    assert store.best_for_workload("lab") == []
    assert store.best_config_per_workload() == []
    [row] = store.without_passing_config("lab")
    assert (row.closest, row.closest_ratio, row.trials) == (closest, 1.25, 2)
    assert row.request_rate == 20.0
    assert row.closest_config["max_num_seqs"] == 128 and row.measured_at is not None
    assert row.reason == (
        f"no configuration meets the SLO at {row.request_rate:g} req/s (2 measured); the "
        f"closest (trial {closest}) missed its worst SLO target by 25%: a capacity problem "
        "(more replicas, a larger GPU, or capacity mode), not a tuning one")
    # One configuration that meets it: a best row, and the group leaves the other view.
    passing = _run(store, sweep.id, 2, objective=3.5, headroom=0.8)
    assert [r.trial_id for r in store.best_for_workload("lab")] == [passing]
    assert store.without_passing_config("lab") == []


def test_view_rule_a_best_row_says_what_measured_it_when_and_how_sure(store: Store) -> None:
    sweep = _sweep(store)
    best = _run(store, sweep.id, 0, objective=5.0, headroom=0.7)
    store.mark_confirmed(best, repeats=3)
    [row] = store.best_for_workload("chat")
    assert (row.trial_id, row.engine, row.engine_version) == (best, "vllm", "0.32.0")
    assert (row.confirmed, row.repeats, row.stale) == (True, 3, False)
    assert row.measured_at == store.get_trial(best).finished_at
    assert row.slo == '{"percentile":99.0,"tpot":50.0,"ttft":300.0}'


def test_view_rule_a_best_row_measured_on_an_older_engine_is_stale(store: Store) -> None:
    old = _sweep(store)
    best = _run(store, old.id, 0, objective=9.0, headroom=0.5, version="0.30.0")
    assert not store.best_for_workload("chat")[0].stale
    new = _sweep(store, name="after the upgrade")
    _run(store, new.id, 0, objective=4.0, headroom=0.9, version="0.33.0")
    [row] = store.best_for_workload("chat")
    assert (row.trial_id, row.engine_version, row.stale) == (best, "0.30.0", True)
    remeasured = _run(store, new.id, 1, objective=9.5, headroom=0.5, version="0.33.0",
                      params={"max_num_seqs": 512})
    [row] = store.best_for_workload("chat")
    assert (row.trial_id, row.stale) == (remeasured, False)
    # A new GPU driver or other weights make it stale just the same.
    for i, change in enumerate(({"gpu_driver": "560.35"}, {"model_revision": "b7c1"})):
        trial = store.start_trial(new.id, number=10 + i, params={"n": str(change)})
        store.finish_trial(trial.id, TrialResult(
            run_id="t", status="ok", objective=1.0, headroom=0.9,
            engine=EngineFacts(engine_version="0.33.0", **change)))
        [row] = store.best_for_workload("chat")
        assert (row.trial_id, row.stale) == (remeasured, True), change
        store.finish_trial(store.start_trial(new.id, number=20 + i, params={
            "m": str(change)}).id, TrialResult(run_id="t", status="ok", objective=1.0,
                                               engine=EngineFacts(engine_version="0.33.0")))


# --- experiment cards --------------------------------------------------------------------


def test_cards_are_added_resolved_and_listed_in_step_order(store: Store) -> None:
    sweep = _sweep(store)
    for step in (2, 1):
        store.add_card(sweep.id, step=step, symptom="p99 TPOT over target",
                       evidence={"p99_tpot_ms": 61.0}, hypothesis="decode-bound",
                       variable="max_num_seqs", values=[128, 64],
                       expected_direction="decrease")
    cards = store.list_cards(sweep.id)
    assert [c.step for c in cards] == [1, 2] and cards[0].verdict is None
    resolved = store.resolve_card(cards[0].id, result={"goodput": [9.0, 11.0]},
                                  verdict="supported", rollback={"max_num_seqs": 128})
    assert resolved.verdict == "supported" and resolved.rollback == {"max_num_seqs": 128}
    with pytest.raises(Conflict):
        store.add_card(sweep.id, step=1, symptom="s", hypothesis="h", variable="v",
                       values=[], expected_direction="increase")


# --- errors ------------------------------------------------------------------------------


def test_unreachable_database_is_unavailable_without_naming_the_infrastructure() -> None:
    with Store("postgresql://slotune:hunter2@127.0.0.1:1/slotune") as store, \
            pytest.raises(StorageUnavailable) as info:
        store.list_sweeps()
    message = str(info.value)
    assert message.startswith("database unavailable: ")
    for secret in ("hunter2", "127.0.0.1", "port 1", "slotune@", "postgresql://"):
        assert secret not in message, message
    assert info.value.__cause__ is not None


def test_missing_schema_says_run_the_migrations(empty_url: str) -> None:
    with Store(empty_url) as store, pytest.raises(SchemaMissing) as info:
        store.get_sweep(1)
    assert "slotune db upgrade" in str(info.value)
    assert isinstance(info.value, StorageError)


# --- concurrency and start-up ------------------------------------------------------------


def test_concurrent_coordinators_never_claim_the_same_sweep(store: Store,
                                                            migrated_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ids = {_sweep(store, name=f"s{i}").id for i in range(3)}
    stores = [Store(migrated_url) for _ in range(6)]  # one pool each, as separate processes
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            claims = list(pool.map(lambda i: stores[i].claim_next_sweep(f"c{i}"), range(6)))
    finally:
        for s in stores:
            s.close()
    won = [c for c in claims if c is not None]
    assert sorted(c.id for c in won) == sorted(ids)  # each sweep once, none twice
    assert {store.get_sweep(c.id).claimed_by for c in won} == {c.claimed_by for c in won}


def test_a_sweep_records_its_executor_and_only_that_kind_takes_it_over(store: Store) -> None:
    virtual, ray = ExecutorChoice(kind="virtual", gpus=3), ExecutorChoice(kind="ray", gpus=8)
    sweep = _sweep(store)
    claimed = store.claim_next_sweep("c1", executor=virtual)
    assert claimed is not None and claimed.executor == virtual  # recorded by the first claim
    # Its coordinator died: a Ray coordinator leaves it, a virtual one takes it over,
    # and the record stays as first written.
    assert store.claim_next_sweep("c2", stale_after_s=0.0, executor=ray) is None
    taken = store.claim_next_sweep("c3", stale_after_s=0.0,
                                   executor=ExecutorChoice(kind="virtual", gpus=1))
    assert taken is not None and taken.id == sweep.id and taken.executor == virtual
    # A queued sweep that recorded none is anyone's.
    fresh = _sweep(store, name="fresh")
    assert store.get_sweep(fresh.id).executor is None
    got = store.claim_next_sweep("c4", executor=ray)
    assert got is not None and got.id == fresh.id and got.executor == ray


def test_concurrent_writers_of_one_new_workload_both_succeed(store: Store,
                                                             migrated_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    stores = [Store(migrated_url) for _ in range(4)]
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            made = list(pool.map(lambda s: _sweep(s, workload="fresh"), stores))
    finally:
        for s in stores:
            s.close()
    assert len({m.workload_id for m in made}) == 1 and len({m.id for m in made}) == 4


def test_check_schema_refuses_an_unmigrated_database(store: Store, empty_url: str) -> None:
    store.check_schema()
    with Store(empty_url) as bare, pytest.raises(SchemaMissing, match="slotune db upgrade"):
        bare.check_schema()


# --- rows that are not configurations: repeats and baselines -----------------------------


def _spec(number: int) -> TrialSpec:
    return TrialSpec(run_id=f"t{number}", engine="vllm", model="m-8b",
                     knobs={"max_num_seqs": 64, "tensor_parallel_size": 2},
                     workload=Workload(name="chat"), slo=SLO_A)


def test_a_repeat_is_a_row_of_its_own_linked_to_its_trial_and_never_a_best_row(
        store: Store) -> None:
    sweep = _sweep(store, workload="lab")
    first = _measured(store, sweep.id, 0, 10.0)
    # The repeat measured more: were it counted as a configuration, it would be the best.
    repeat = store.record_trial(
        sweep.id, role="repeat", number=0, repeat=1, repeat_of=first, params={"n": 0},
        spec=_spec(0), result=_ok(30.0, timings={"boot_s": 40.0, "total_s": 100.0}))
    baseline = store.record_trial(sweep.id, role="baseline", number=0, params={},
                                  spec=_spec(0), result=_ok(0.0))

    rows = store.list_trials(sweep.id, role="any").data
    assert [(r.role, r.number, r.repeat, r.repeat_of) for r in rows] == [
        ("search", 0, 0, None), ("repeat", 0, 1, first), ("baseline", 0, 0, None)]
    got = store.get_trial(repeat.id)
    assert got.status == "ok" and got.objective == 30.0 and got.gpus == 2
    assert got.timings is not None and got.timings["boot_s"] == 40.0
    assert got.finished_at is not None and got.started_at is not None
    assert (got.finished_at - got.started_at).total_seconds() == pytest.approx(100.0)
    assert [r.id for r in store.list_trials(sweep.id).data] == [first]
    assert store.list_trials(sweep.id, role="baseline").data[0].id == baseline.id

    [best] = store.best_for_workload("lab")
    assert best.trial_id == first and best.objective == 10.0


def test_repeat_and_baseline_rows_are_checked_and_never_orphans(store: Store) -> None:
    sweep, other = _sweep(store, name="a"), _sweep(store, name="b")
    first = _measured(store, sweep.id, 0, 10.0)
    with pytest.raises(ValueError, match="repeat_of"):
        store.record_trial(sweep.id, role="repeat", number=0, params={}, spec=_spec(0),
                           result=_ok(1.0))
    with pytest.raises(Conflict, match="not a search trial of sweep"):
        store.record_trial(other.id, role="repeat", number=0, repeat=1, repeat_of=first,
                           params={}, spec=_spec(0), result=_ok(1.0))
    once = store.record_trial(sweep.id, role="repeat", number=0, repeat=1, repeat_of=first,
                              params={}, spec=_spec(0), result=_ok(1.0))
    # The same repeat's attempt again (a write retried after its reply was lost): stored once.
    again = store.record_trial(sweep.id, role="repeat", number=0, repeat=1, repeat_of=first,
                               params={}, spec=_spec(0), result=_ok(1.0))
    assert again.id == once.id
    assert len(store.list_trials(sweep.id, role="repeat").data) == 1
    assert store.recover_orphans(sweep.id) == []


# --- leases on one clock: the taker's own -------------------------------------------------

FAST_CLOCK_CLAIM = """
import sys
from slotune.tuner.db.store import Store
with Store(sys.argv[1]) as store:
    got = store.claim_next_sweep("coord-fast-clock", stale_after_s=60)
    print("none" if got is None else got.id)
"""


def test_a_process_with_a_fast_clock_takes_no_live_sweep(store: Store,
                                                         migrated_url: str) -> None:
    """Issue 38: ten minutes fast (libfaketime), a poller saw every heartbeat as stale
    on SQLite, whose clock is each host's own, and took a sweep claimed a moment before."""
    libfaketime = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    assert libfaketime, "Debian's faketime is not installed (.ci/run installs it)"
    sweep = _sweep(store)
    claimed = store.claim_sweep(sweep.id, "coord-live")
    assert claimed is not None
    run = subprocess.run([sys.executable, "-c", FAST_CLOCK_CLAIM, migrated_url],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LD_PRELOAD": str(libfaketime[0]),
                              "FAKETIME": "+10m"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "none"
    after = store.get_sweep(sweep.id)
    assert (after.claimed_by, after.lease_epoch) == ("coord-live", claimed.lease_epoch)


def test_a_lease_is_taken_over_only_after_its_heartbeat_stood_still_for_the_window(
        store: Store, migrated_url: str) -> None:
    sweep = _sweep(store)
    claimed = store.claim_sweep(sweep.id, "coord-a")
    assert claimed is not None and claimed.lease is not None
    time.sleep(0.4)  # by anyone's wall clock the heartbeat is older than the window now
    with Store(migrated_url) as taker:  # another process: its own observations
        # But a taker that has not watched it stand still for the window does not take it.
        assert taker.claim_sweep(sweep.id, "coord-b", stale_after_s=0.3) is None
        assert taker.claim_next_sweep("coord-b", stale_after_s=0.3) is None
        time.sleep(0.2)
        store.heartbeat_sweep(claimed.lease)  # alive: the window starts again
        time.sleep(0.2)
        assert taker.claim_sweep(sweep.id, "coord-b", stale_after_s=0.3) is None
        assert taker.claim_next_sweep("coord-b", stale_after_s=0.3) is None
        time.sleep(0.35)  # silent for the whole window, as the taker's clock measures it
        taken = taker.claim_next_sweep("coord-b", stale_after_s=0.3)
        assert taken is not None and taken.id == sweep.id and taken.claimed_by == "coord-b"
        assert taken.lease is not None and taken.lease.epoch == claimed.lease.epoch + 1
    with pytest.raises(LeaseLost):
        store.heartbeat_sweep(claimed.lease)


def test_a_forced_takeover_needs_no_window(store: Store) -> None:
    sweep = _sweep(store)
    claimed = store.claim_sweep(sweep.id, "coord-a")
    assert claimed is not None
    taken = store.claim_sweep(sweep.id, "coord-b", stale_after_s=0)  # resume --takeover
    assert taken is not None and taken.claimed_by == "coord-b"


def test_no_number_of_sweeps_for_another_executor_hides_a_claimable_one(store: Store) -> None:
    """Issue 38: the executor was filtered after LIMIT 20, so twenty older sweeps recorded
    on the virtual executor left a Ray coordinator with nothing to claim."""
    virtual, ray = ExecutorChoice(kind="virtual", gpus=2), ExecutorChoice(kind="ray", gpus=4)
    for i in range(25):
        store.create_sweep(name=f"virtual-{i}", workload=Workload(name="chat"), slo=SLO_A,
                           space={"knobs": ["x"]}, model="m-8b", gpu="h100-sxm",
                           strategy="tpe", executor=virtual)
    claimable = _sweep(store, name="anyone's")
    got = store.claim_next_sweep("coord-ray", executor=ray)
    assert got is not None and got.id == claimable.id and got.executor == ray
    assert store.claim_next_sweep("coord-ray-2", executor=ray) is None
    # A sweep stored with a JSON null (not SQL NULL) for its executor is anyone's too.
    late = _sweep(store, name="late")
    got = store.claim_next_sweep("coord-ray-3", executor=ray)
    assert got is not None and got.id == late.id
