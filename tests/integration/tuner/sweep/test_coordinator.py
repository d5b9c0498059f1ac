"""The coordinator on a real database (SQLite and Postgres), trials in virtual time.

Search logic is what these tests are about, so trials run on the simulated engine in
virtual time (``VirtualExecutor``); ``test_sweep_path.py`` runs the real path.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Hashable
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import pytest

from slotune.tuner.db.errors import StorageUnavailable
from slotune.tuner.db.store import Store
from slotune.tuner.strategies import params_key
from slotune.tuner.sweep.coordinator import Coordinator, SweepRunner
from slotune.tuner.sweep.executors import TrialExecutor, VirtualExecutor
from slotune.tuner.sweep.launcher import GpuShare
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from slotune.workers.contracts import TrialResult, TrialSpec
from tests.support.lab import TP_SPACE
from tests.support.sweep_data import LAB_4RPS


class RecordingExecutor(TrialExecutor):
    """A virtual executor that remembers what it ran and can lose chosen workers."""

    kind = "virtual"

    def __init__(self, gpus: int = 2, lose: set[str] | None = None,
                 overload: set[str] | None = None, fail_repeats: bool = False,
                 fail_baselines: bool = False) -> None:
        self.inner = VirtualExecutor(gpus)
        self.fail_repeats = fail_repeats
        self.fail_baselines = fail_baselines
        self.submitted: list[TrialSpec] = []
        self.lose = lose or set()
        self.overload = overload or set()
        self.in_flight: dict[Hashable, str] = {}
        self.peak: Counter[str] = Counter()  # most trials at once, while others shared
        self.share: GpuShare | None = None
        self.sharing_at_first_submit: int | None = None
        self._lock = threading.Lock()

    def submit(self, spec: TrialSpec) -> Hashable:
        with self._lock:
            self.submitted.append(spec)
            handle = self.inner.submit(spec)
            sweep = spec.run_id.split("-")[0]
            self.in_flight[handle] = sweep
            running = Counter(self.in_flight.values())
            if self.share is not None and self.sharing_at_first_submit is None:
                self.sharing_at_first_submit = self.share.active()
            if self.share is None or self.share.active() > 1:
                for name, count in running.items():
                    self.peak[name] = max(self.peak[name], count)
            return handle

    def wait(self, handles: list[Hashable], timeout_s: float) -> list[tuple[Hashable, TrialResult]]:
        out = []
        for handle, result in self.inner.wait(handles, timeout_s):
            with self._lock:
                self.in_flight.pop(handle, None)
            if self.fail_repeats and "confirm" in result.run_id:
                # The search's best runs were lucky: their repeats break the SLO.
                result = result.model_copy(update={"objective": 0.0, "gate_passed": False})
            if self.fail_baselines and "baseline" in result.run_id:
                result = TrialResult(run_id=result.run_id, status="failed",
                                     failure="oom", failure_message="CUDA out of memory")
            if result.run_id in self.overload:
                # What a run on an overloaded machine looks like: the client fell behind
                # its schedule and the latencies it saw broke the gate.
                self.overload.discard(result.run_id)
                result = result.model_copy(update={
                    "objective": 0.0, "gate_passed": False,
                    "metrics": {**result.metrics, "slotune": {
                        **result.metrics["slotune"], "client_bound": True,
                        "send_lag_ms": {"p99": 180.0}}}})
            if result.run_id in self.lose:
                self.lose.discard(result.run_id)
                result = TrialResult(run_id=result.run_id, status="failed",
                                     failure="worker_lost", failure_message="node died")
            out.append((handle, result))
        return out

    def gpu_count(self) -> int:
        return self.inner.gpu_count()

    def cancel(self, handle: Hashable) -> None:
        self.inner.cancel(handle)


def run(store: Store, url: str, request: SweepRequest,
        executor: TrialExecutor | None = None) -> Any:
    sweep = queue_sweep(store, request)
    coordinator = Coordinator(store, executor or VirtualExecutor(2), database_url=url)
    return coordinator.run_sweep(sweep.id)


def lab(strategy: str = "tpe", **budget: Any) -> SweepRequest:
    return SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS, strategy=strategy,
                        budget=SweepBudget(**{"max_trials": 8, "confirm_top": 2,
                                              "confirm_repeats": 2, **budget}))


def test_a_sweep_runs_to_its_budget_and_records_everything(store: Store,
                                                           migrated_url: str) -> None:
    final = run(store, migrated_url, lab())
    assert final.status == "done"
    assert final.stop_reason == "trial budget reached (8 trials)"
    rows = store.list_trials(final.id, role="any").data
    trials = [t for t in rows if t.role == "search"]
    assert trials == store.list_trials(final.id).data
    assert len(trials) == 8 and all(t.status == "ok" for t in trials)
    assert len({t.number for t in trials}) == 8
    assert final.progress["done"] == 8 and final.progress["best_objective"] > 0
    # The confirmed winner is what the view answers for this workload.
    [best] = store.best_for_workload(final.workload)
    assert best.confirmed and best.trial_id == final.progress["best_trial_id"]
    confirmation = final.progress["confirmation"]
    assert len(confirmation) == 2
    # Every repeat is a row of its own, linked to the trial it re-ran, with its whole
    # result: the objective the confirmation table shows, its timings, its engine facts.
    repeats = {(t.repeat_of, t.repeat): t for t in rows if t.role == "repeat"}
    assert set(repeats) == {(c["trial_id"], r) for c in confirmation for r in (1, 2)}
    for candidate in confirmation:
        original = next(t for t in trials if t.id == candidate["trial_id"])
        again = [repeats[(original.id, r)] for r in (1, 2)]
        assert [t.objective for t in again] == candidate["runs"]
        assert all(t.number == original.number and t.config == original.config
                   and t.params == original.params for t in again)
        assert all(t.timings and t.timings["total_s"] > 0 and t.timings["boot_s"] > 0
                   for t in again)
        assert all(t.result and t.result["engine"]["kv_cache_tokens"] for t in again)
    assert len([t for t in rows if t.role == "baseline"]) <= 1  # lossy proposals: one
    # Optuna's study in the same database holds every trial with its constraints.
    study = optuna.load_study(study_name=final.optuna_study_name,
                              storage=optuna_url(migrated_url))
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(complete) == 8
    assert all("fits" in t.constraints if hasattr(t, "constraints") else True
               for t in complete)


def optuna_url(url: str) -> optuna.storages.BaseStorage:
    from slotune.tuner.db.optuna_storage import optuna_storage

    return optuna_storage(url)


def test_configs_that_break_a_rule_are_infeasible_and_never_boot(store: Store,
                                                                migrated_url: str) -> None:
    space = {
        "name": "rules", "engine": "sim", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "rtx4090",
        "knobs": {"max_num_seqs": {"type": "values", "values": [64, 512], "default": 64},
                  "max_num_batched_tokens": {"type": "values", "values": [256, 2048],
                                             "default": 2048}},
        "workload": {"name": "small", "dataset": {"kind": "random", "input_len": 256,
                                                  "output_len": 32},
                     "arrivals": {"request_rate": 2}, "num_prompts": 40},
        "slo": "ttft:500,tpot:60",
    }
    executor = RecordingExecutor()
    final = run(store, migrated_url, SweepRequest(
        space=space, strategy="grid", budget=SweepBudget(max_trials=4, confirm_top=0)), executor)
    trials = store.list_trials(final.id).data
    infeasible = [t for t in trials if t.status == "infeasible"]
    assert {(t.params["max_num_seqs"], t.params["max_num_batched_tokens"])
            for t in infeasible} == {(512, 256)}
    assert all(t.result and "max_num_batched_tokens >= max_num_seqs" in t.result["violated_rule"]
               for t in infeasible)
    booted = {(s.knobs["max_num_seqs"], s.knobs["max_num_batched_tokens"])
              for s in executor.submitted}
    assert booted == {(64, 256), (64, 2048), (512, 2048)}


def test_a_lost_worker_is_retried_with_the_same_params(store: Store, migrated_url: str) -> None:
    sweep_probe = queue_sweep(store, lab(max_trials=1))  # learn the next sweep id
    store.cancel_sweep(sweep_probe.id)
    next_id = sweep_probe.id + 1
    executor = RecordingExecutor(lose={f"s{next_id}-t1-a1"})
    final = run(store, migrated_url, lab(max_trials=4, confirm_top=0), executor)
    assert final.id == next_id
    rows = [t for t in store.list_trials(final.id).data if t.number == 1]
    assert [(t.attempt, t.status) for t in rows] == [(1, "failed"), (2, "ok")]
    assert rows[0].failure_class == "worker_lost"
    assert rows[0].params == rows[1].params
    # Four configurations were measured; the lost attempt did not use up the budget.
    assert len({t.number for t in store.list_trials(final.id, status="ok").data}) == 4


def test_plateau_stops_the_search(store: Store, migrated_url: str) -> None:
    final = run(store, migrated_url, lab(max_trials=30, plateau_trials=4, confirm_top=0))
    assert final.stop_reason is not None and final.stop_reason.startswith("plateau")
    assert final.progress["trials"] < 30
    assert not final.progress.get("confirmation")  # confirm_top 0: nothing re-run


def test_gpu_hour_budget_stops_the_search(store: Store, migrated_url: str) -> None:
    final = run(store, migrated_url, lab(max_trials=30, max_gpu_hours=0.05, confirm_top=0))
    assert final.stop_reason is not None and "GPU-hour budget" in final.stop_reason
    assert final.progress["gpu_hours"] >= 0.05


def test_cancel_stops_a_running_sweep(store: Store, migrated_url: str) -> None:
    sweep = queue_sweep(store, lab(max_trials=200, confirm_top=0))
    coordinator = Coordinator(store, VirtualExecutor(2), database_url=migrated_url)
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("r", coordinator.run_sweep(sweep.id)))
    thread.start()
    deadline = time.monotonic() + 30
    while store.get_sweep(sweep.id).progress.get("trials", 0) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    store.cancel_sweep(sweep.id)
    thread.join(timeout=30)
    final = store.get_sweep(sweep.id)
    assert final.status == "cancelled"
    assert not store.list_trials(sweep.id, status=["running", "pending"]).data
    assert len(store.list_trials(sweep.id).data) < 200


def test_guided_writes_its_experiment_cards(store: Store, migrated_url: str) -> None:
    final = run(store, migrated_url, lab("guided", max_trials=12, confirm_top=0))
    cards = store.list_cards(final.id)
    assert cards and cards[0].step == 1
    assert all(c.variable and c.hypothesis and c.expected_direction for c in cards)
    assert any(c.verdict in ("supported", "rejected", "inconclusive") for c in cards)


def test_an_outage_while_syncing_cards_retries_the_sync_and_counts_each_result_once(
        store: Store, migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The database goes away just as the cards of the third result are synced: the
    # outbox keeps the rest of that result's steps, and the next drain writes them.
    real_list_cards, calls, raised = store.list_cards, iter(range(1_000)), []

    def list_cards(sweep_id: int) -> Any:
        if next(calls) == 2:
            raised.append(sweep_id)
            raise StorageUnavailable("database restarting")
        return real_list_cards(sweep_id)

    monkeypatch.setattr(store, "list_cards", list_cards)
    final = run(store, migrated_url, lab("guided", max_trials=6, confirm_top=0))
    trials = store.list_trials(final.id).data
    assert raised and final.status == "done" and len(trials) == 6
    counted = sum(final.progress[k] for k in ("done", "failed", "infeasible"))
    assert counted == 6, final.progress  # not 7: the result whose sync failed counts once
    assert store.list_cards(final.id)  # and the cards were written at the retry


def test_sweeps_at_once_share_the_gpus_fairly(store: Store, migrated_url: str) -> None:
    executor = RecordingExecutor(gpus=4)
    coordinator = Coordinator(store, executor, database_url=migrated_url)
    executor.share = coordinator.share
    ids = [queue_sweep(store, lab("random", max_trials=10, confirm_top=0)).id for _ in range(2)]
    coordinator.serve(poll_s=0.1, once=True)
    for sweep_id in ids:
        final = store.get_sweep(sweep_id)
        assert final.status == "done", final.stop_reason
        assert len(store.list_trials(sweep_id, role="search").data) == 10
    # Sweeps claimed together split the GPUs from the first trial on: the first one does
    # not start alone and take them all while the second is still being set up.
    assert executor.sharing_at_first_submit == 2
    # Both ran at once, and neither held more than its half of the four GPUs meanwhile.
    assert set(executor.peak) == {f"s{i}" for i in ids}
    assert max(executor.peak.values()) <= 2


def test_resume_finishes_a_sweep_whose_coordinator_died(store: Store,
                                                       migrated_url: str) -> None:
    """A runner that dies mid-search (its in-flight trials orphaned), then a new one."""
    sweep = queue_sweep(store, lab(max_trials=10, confirm_top=0))
    claimed = store.claim_sweep(sweep.id, "dead-coordinator")
    assert claimed is not None

    class Dies(Exception):
        pass

    executor = VirtualExecutor(2)
    runner = SweepRunner(store, claimed, executor, coordinator_id="dead-coordinator",
                         database_url=migrated_url)
    calls = {"n": 0}
    original = runner._finished

    def die_after_four(handle: Hashable, result: TrialResult) -> None:
        calls["n"] += 1
        if calls["n"] > 4:
            raise Dies  # like kill -9: nothing after this point runs
        original(handle, result)

    runner._finished = die_after_four  # type: ignore[method-assign]
    runner._abandon = lambda: None  # type: ignore[method-assign] # a kill -9 cleans nothing
    with pytest.raises(Dies):
        runner.run()
    assert store.list_trials(sweep.id, status="running").data  # orphans left behind
    # A new coordinator takes the stale sweep over and resumes it.
    coordinator = Coordinator(store, VirtualExecutor(2), database_url=migrated_url)
    store.update_sweep(sweep.id, status="failed")  # as `sweep resume` would find it
    store.requeue_sweep(sweep.id)
    final = coordinator.run_sweep(sweep.id)
    assert final.status == "done"
    rows = store.list_trials(sweep.id, role="search").data
    finished = [t for t in rows if t.status in ("ok", "failed", "infeasible")]
    lost = [t for t in rows if t.status == "lost"]
    assert lost, "the orphans were marked lost"
    assert not [t for t in rows if t.status in ("running", "pending")]
    # None lost: every orphan's params were measured after all. None duplicated: no
    # configuration was measured twice, and exactly the budget was measured.
    keys = [str(sorted(t.params.items())) for t in finished]
    assert len(keys) == len(set(keys)) == 10
    assert {str(sorted(t.params.items())) for t in lost} <= set(keys)


def test_a_run_distorted_by_an_overloaded_client_is_discarded_and_retried(
        store: Store, migrated_url: str) -> None:
    sweep_probe = queue_sweep(store, lab(max_trials=1))
    store.cancel_sweep(sweep_probe.id)
    next_id = sweep_probe.id + 1
    executor = RecordingExecutor(overload={f"s{next_id}-t0-a1"})
    final = run(store, migrated_url, lab(max_trials=3, confirm_top=0), executor)
    rows = [t for t in store.list_trials(final.id, role="search").data if t.number == 0]
    assert [(t.attempt, t.status) for t in rows] == [(1, "failed"), (2, "ok")]
    assert rows[0].failure_class == "client_bound"
    assert rows[0].result and "client-bound" in rows[0].result["failure_message"]
    assert "p99 send lag 180.0 ms" in rows[0].result["failure_message"]
    assert rows[1].objective and rows[1].objective > 0


def test_a_winner_whose_repeats_break_the_slo_is_not_confirmed(store: Store,
                                                              migrated_url: str) -> None:
    final = run(store, migrated_url, lab(max_trials=4), RecordingExecutor(fail_repeats=True))
    assert final.status == "done"
    assert not [t for t in store.list_trials(final.id).data if t.confirmed]
    assert final.progress["best_objective"] is None
    assert "did not hold the SLO when re-run" in final.progress["unconfirmed"]
    assert all(c["runs"] == [0.0, 0.0] for c in final.progress["confirmation"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the GPU share, not the backend
def test_a_sweep_waiting_for_gpus_other_sweeps_hold_waits_rather_than_ending(
        store: Store, migrated_url: str, tmp_path: Path) -> None:
    # Three sweeps on two GPUs: the third finds both held when it starts. It waits for
    # one (it used to end at once, "nothing left to try", with no trial run).
    workload = tmp_path / "slow.yaml"  # trials of a second or so: the wait is seen
    workload.write_text("name: slow\ndataset: {kind: random, input_len: 512, output_len: 128}"
                        "\narrivals: {request_rate: 4}\nnum_prompts: 1500\n")
    request = SweepRequest(space="lab", mode="goodput", strategy="random", workload=str(workload),
                           budget=SweepBudget(max_trials=3, confirm_top=0))
    sweeps = [queue_sweep(store, request) for _ in range(3)]
    coordinator = Coordinator(store, VirtualExecutor(2), database_url=migrated_url)
    serving = threading.Thread(target=coordinator.serve, kwargs={"poll_s": 0.1, "once": True})
    serving.start()
    seen: list[dict[str, Any]] = []
    while serving.is_alive():
        seen += [s.progress["waiting"] for s in store.list_sweeps().data
                 if "waiting" in s.progress]
        time.sleep(0.05)
    serving.join()
    # While it waited, its status said for what and since when.
    assert seen and seen[0]["for"] == (f"1 GPU(s), held by other sweeps of coordinator "
                                       f"{coordinator.coordinator_id}")
    assert datetime.fromisoformat(seen[0]["since"]).tzinfo is not None
    for sweep in sweeps:
        final = store.get_sweep(sweep.id)
        assert final.status == "done" and final.progress["trials"] == 3, final.stop_reason
        assert "waiting" not in final.progress
        assert store.list_trials(sweep.id, status="ok", role="search").count == 3


def test_trials_no_node_can_hold_are_infeasible_at_once_and_the_sweep_ends(
        store: Store, migrated_url: str) -> None:
    sweep = queue_sweep(store, SweepRequest(space=TP_SPACE, strategy="grid",
                                            budget=SweepBudget(max_trials=6, confirm_top=0)))
    final = Coordinator(store, VirtualExecutor(2), database_url=migrated_url).run_sweep(sweep.id)
    assert final.status == "done"
    rows = store.list_trials(sweep.id, role="search").data
    assert len(rows) == 6
    for row in rows:
        tp = row.params["tensor_parallel_size"]
        assert row.status == ("ok" if tp == 2 else "infeasible"), row
        if tp != 2:
            assert row.result is not None
            assert row.result["failure_message"] == (
                f"can never be placed: needs {tp} GPUs on one node; the virtual executor "
                "(--gpus 2) offers 2")
            assert row.result["constraints"]["fits"] > 0  # the sampler learns to avoid it


def test_a_guided_sweep_stores_every_card_with_all_nine_fields(
        store: Store, migrated_url: str) -> None:
    sweep = queue_sweep(store, SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS,
                                            strategy="guided",
                                            budget=SweepBudget(max_trials=14, confirm_top=0)))
    Coordinator(store, VirtualExecutor(2), database_url=migrated_url).run_sweep(sweep.id)
    cards = [c for c in store.list_cards(sweep.id) if c.verdict is not None]
    assert cards, "the guided loop wrote down at least one finished step"
    trials = {params_key(t.params): t for t in store.list_trials(sweep.id).data}
    for card in cards:
        assert card.symptom and card.hypothesis and card.variable and card.expected_direction
        assert card.controls is not None
        assert card.controls["model"] == "Qwen/Qwen2.5-7B-Instruct"
        assert card.controls["workload"] and card.controls["order"]
        assert card.variable not in card.controls["held_fixed"]  # the one variable moves
        assert card.stop_condition and any("early abort" in rule for rule in card.stop_condition)
        assert card.rollback["config"] and card.rollback["check"].startswith("re-measure")
        assert card.verdict in ("supported", "rejected", "inconclusive")
        assert card.result is not None
        rows = card.result["results"]
        # every value tried is listed, each with its own measured result
        assert card.values == [r["value"] for r in rows]
        for row in rows:  # ... the trial of that value against the step's incumbent
            params = {**card.rollback["config"], card.variable: row["value"]}
            trial = trials[params_key(params)]
            assert trial.result is not None
            assert (row["status"], row["objective"]) == (trial.status, trial.result["objective"])
            assert row["p99_ttft_ms"] == trial.result["metrics"].get("p99_ttft_ms")
    # and the report shows each card as a form with its values table, not as JSON
    from slotune.tuner.report import render_report

    markdown = render_report(store, sweep.id, "md")
    for card in cards:
        section = markdown.split(f"### Step {card.step}: {card.variable}", 1)[1].split("###")[0]
        assert "| stop condition |" in section and "| controls |" in section
        assert "| value | status | objective | p99 TTFT ms | p99 TPOT ms |" in section
        assert section.count("\n| ") >= len(card.values) + 12  # a row per field and value
        assert '{"' not in section  # no JSON blob


def _mixed_trace(folder: Path) -> Path:
    """Nine short prompts to one long one: the long prefills set the TTFT tail."""
    trace = folder / "mixed.jsonl"
    trace.write_text("".join(json.dumps({"prompt_len": 3500 if i % 10 == 5 else 200,
                                         "output_len": 64}) + "\n" for i in range(300)))
    return trace


def test_a_sweep_whose_ttft_tail_comes_from_its_longest_prompts_names_the_bucket(
        tmp_path: Path, store: Store, migrated_url: str) -> None:
    trace = _mixed_trace(tmp_path)
    workload = tmp_path / "mixed.yaml"
    workload.write_text(f"name: mixed\ndataset: {{kind: trace, path: {trace.name}, "
                        "use_trace_arrivals: false}\narrivals: {request_rate: 2}\n"
                        "num_prompts: 300\n")
    sweep = queue_sweep(store, SweepRequest(space="lab", mode="goodput", strategy="random",
                                            workload=str(workload),
                                            budget=SweepBudget(max_trials=2, confirm_top=0)))
    Coordinator(store, VirtualExecutor(2), database_url=migrated_url).run_sweep(sweep.id)
    trials = [t for t in store.list_trials(sweep.id, role="search").data if t.status == "ok"]
    assert trials
    for trial in trials:
        assert trial.diagnosis is not None
        tail = {s["kind"]: s for s in trial.diagnosis["symptoms"]}["tail_mixture"]
        assert tail["evidence"]["bucket"] == "2048–4095"  # the 3,500-token prompts
        assert "the 2048–4095-token bucket" in tail["symptom"]
        assert tail["next_step"].startswith("bucket by input length before blaming the engine")
    from slotune.tuner.report import render_report

    report = render_report(store, sweep.id, "md")
    assert "**Symptoms beside the wall:**" in report and "2048–4095-token bucket" in report




def test_a_conversation_sweep_reports_its_winner_turn_by_turn(
        store: Store, migrated_url: str) -> None:
    workload = {"name": "talk", "num_prompts": 60, "warmup_requests": 0,
                "arrivals": {"request_rate": 4},
                "dataset": {"kind": "multi_turn", "min_turns": 3, "max_turns": 3,
                            "system_prompt_len": 128, "input_len": 200, "output_len": 64,
                            "think_time_s": 0.5}}
    sweep = queue_sweep(store, SweepRequest(space="lab", mode="goodput", strategy="random",
                                            workload=workload,
                                            budget=SweepBudget(max_trials=2, confirm_top=0)))
    Coordinator(store, VirtualExecutor(2), database_url=migrated_url).run_sweep(sweep.id)
    from slotune.tuner.report import render_report

    report = render_report(store, sweep.id, "md")
    section = report.split("### Conversations, turn by turn", 1)[1].split("##", 1)[0]
    assert "20 of 20 sessions completed" in section
    assert "hit the prefix cache in session" in section
    rows = [line for line in section.splitlines() if line.startswith("| ") and
            line[2].isdigit()]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2", "3"]
    assert "Conversations, turn by turn" in render_report(store, sweep.id, "html")


FP8_SPACE: dict[str, Any] = {
    "name": "fp8-kv", "engine": "sim", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "rtx4090",
    # Every configuration is lossy: an fp8 KV cache, checked against the auto (lossless) one.
    "fixed": {"kv_cache_dtype": "fp8", "max_model_len": 4096},
    "knobs": {"max_num_seqs": {"type": "values", "values": [32, 64, 128], "default": 64}},
    "workload": {"name": "fp8-4rps", "dataset": {"kind": "random", "input_len": 256,
                                                  "output_len": 64},
                 "arrivals": {"request_rate": 4}, "num_prompts": 40, "warmup_requests": 2},
    "slo": "ttft:300,tpot:50",
}


def _fp8_sweep(**budget: Any) -> SweepRequest:
    return SweepRequest(space=FP8_SPACE, strategy="grid", mode="goodput",
                        budget=SweepBudget(**{"max_trials": 3, "confirm_top": 0, **budget}))


def test_three_lossy_trials_boot_one_baseline_and_each_is_checked_against_its_answers(
        store: Store, migrated_url: str) -> None:
    executor = RecordingExecutor()
    final = run(store, migrated_url, _fp8_sweep(confirm_top=1, confirm_repeats=2), executor)
    assert final.status == "done"
    baselines = [s for s in executor.submitted if s.golden_reference is not None]
    assert len(baselines) == 1
    [baseline] = baselines
    assert baseline.engine_flags["kv_cache_dtype"] == "auto" and baseline.quality is None
    # The baseline is a row of its own, with its boot's timings and its answers.
    [row] = store.list_trials(final.id, role="baseline").data
    assert row.status == "ok" and row.timings and row.timings["boot_s"] > 0
    assert row.config["kv_cache_dtype"] == "auto"
    answers = row.result and row.result["golden_answers"]
    assert answers and len(answers) == len(baseline.golden_reference.prompts)
    # Every lossy boot (three trials, two repeats) brought the answers and was checked
    # against them: none booted a baseline of its own.
    lossy = [s for s in executor.submitted if s.quality is not None]
    assert len(lossy) == 5
    assert all(s.quality.reference is not None
               and [list(a) for a in s.quality.reference] == answers for s in lossy)
    for trial in store.list_trials(final.id, role="any").data:
        if trial.role != "baseline":
            assert trial.result and trial.result["quality"]["checked"], trial.id
            assert trial.result["quality"]["agreement"] > 0.9  # fp8 KV moves few tokens
    # The configurations are counted once: three search trials, two repeats of the winner,
    # and the repeats served what their first run served.
    rows = store.list_trials(final.id, role="any").data
    assert Counter(t.role for t in rows) == {"search": 3, "repeat": 2, "baseline": 1}
    repeats = [t for t in rows if t.role == "repeat"]
    [first] = [t for t in rows if t.id == repeats[0].repeat_of]
    assert first.result and first.result["quality"]["answers"]
    assert all(t.result and t.result["quality"]["answers"] == first.result["quality"]["answers"]
               for t in repeats)


def test_a_resumed_sweep_reads_its_baseline_back_rather_than_booting_it_again(
        store: Store, migrated_url: str) -> None:
    sweep = queue_sweep(store, _fp8_sweep())
    claimed = store.claim_sweep(sweep.id, "dead-coordinator")
    assert claimed is not None

    class Dies(Exception):
        pass

    runner = SweepRunner(store, claimed, VirtualExecutor(1), coordinator_id="dead-coordinator",
                         database_url=migrated_url)
    original = runner._finished
    calls = {"n": 0}

    def die_after_the_baseline(handle: Hashable, result: TrialResult) -> None:
        calls["n"] += 1
        if calls["n"] > 2:  # the baseline, then one lossy trial
            raise Dies
        original(handle, result)

    runner._finished = die_after_the_baseline  # type: ignore[method-assign]
    runner._abandon = lambda: None  # type: ignore[method-assign] # a kill -9 cleans nothing
    with pytest.raises(Dies):
        runner.run()
    assert len(store.list_trials(sweep.id, role="baseline").data) == 1
    store.update_sweep(sweep.id, status="failed")  # as `sweep resume` would find it
    store.requeue_sweep(sweep.id)
    executor = RecordingExecutor(gpus=1)
    final = Coordinator(store, executor, database_url=migrated_url).run_sweep(sweep.id)
    assert final.status == "done"
    assert executor.submitted and not [s for s in executor.submitted if s.golden_reference]
    assert all(s.quality and s.quality.reference for s in executor.submitted)
    assert len(store.list_trials(sweep.id, role="baseline").data) == 1
    measured = store.list_trials(sweep.id, role="search", status="ok").data
    # The trial lost with the dead coordinator was measured again, against the answers
    # the first coordinator's baseline stored.
    assert {t.params["max_num_seqs"] for t in measured} >= {32, 64}


def test_a_baseline_that_cannot_boot_fails_the_check_of_every_lossy_trial_once(
        store: Store, migrated_url: str) -> None:
    executor = RecordingExecutor(fail_baselines=True)
    final = run(store, migrated_url, _fp8_sweep(max_trials=2), executor)
    assert final.status == "done"
    [row] = store.list_trials(final.id, role="baseline").data
    assert row.status == "failed" and row.failure_class == "oom"
    # Booted once: the lossy trials are told why rather than each booting it again.
    assert len([s for s in executor.submitted if s.golden_reference]) == 1
    trials = store.list_trials(final.id, role="search").data
    assert len(trials) == 2
    for trial in trials:
        assert trial.status == "ok" and trial.objective == 0.0
        quality = trial.result and trial.result["quality"]
        assert quality and quality["passed"] is False and not quality["checked"]
        assert "the sweep's lossless baseline" in quality["detail"]
        assert "CUDA out of memory" in quality["detail"]



def test_a_resume_takes_a_silent_sweep_after_the_window_and_leaves_a_live_one(
        store: Store, migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --takeover, a running sweep changes hands only once its heartbeat stood
    still for the stale window, as this coordinator watched it (issue 38)."""
    from slotune.tuner.db.errors import Conflict
    from slotune.tuner.sweep import coordinator as coordinator_module

    monkeypatch.setattr(coordinator_module, "STALE_AFTER_S", 0.8)
    monkeypatch.setattr(coordinator_module, "WATCH_POLL_S", 0.1)
    dead = queue_sweep(store, lab(max_trials=2, confirm_top=0))
    assert store.claim_sweep(dead.id, "dead-coordinator") is not None
    time.sleep(1.0)  # long dead, by any clock: still, this coordinator watches first
    began = time.monotonic()
    final = Coordinator(store, VirtualExecutor(2), database_url=migrated_url).run_sweep(dead.id)
    assert time.monotonic() - began >= 0.8
    assert final.status == "done" and final.claimed_by != "dead-coordinator"

    live = queue_sweep(store, lab(max_trials=2, confirm_top=0))
    held = store.claim_sweep(live.id, "live-coordinator")
    assert held is not None and held.lease is not None
    lease, stop = held.lease, threading.Event()

    def beat() -> None:
        while not stop.wait(0.2):
            store.heartbeat_sweep(lease)

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        with pytest.raises(Conflict, match="--takeover"):
            Coordinator(store, VirtualExecutor(2), database_url=migrated_url).run_sweep(live.id)
    finally:
        stop.set()
        beater.join()
    assert store.get_sweep(live.id).claimed_by == "live-coordinator"
