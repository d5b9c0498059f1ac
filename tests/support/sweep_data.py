"""A realistic finished sweep, written through the store, for the report and dashboard tests.

The seed's lab (Qwen2.5-7B on one RTX 4090, p99 TTFT ≤ 300 ms, TPOT ≤ 50 ms) just past
4 req/s, where the knobs start to matter: a grid over max_num_seqs × max_num_batched_tokens
measured by the virtual-time simulator (real TrialResults: metrics, diagnosis, early
aborts), one config refused by a known rule (infeasible), one OOM at start-up, the top
two re-run three times each (interleaved, noisy) with the winner confirmed, two
experiment cards, and the coordinator's progress and stop reason.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from slotune.tuner.db.store import Store
from slotune.tuner.spaces import load_space
from slotune.tuner.strategies import infeasible_result, params_key, rank
from slotune.workers.contracts import KnobValue, TrialResult
from slotune.workers.engines.sim import SimOptions
from slotune.workers.trial.virtual import run_virtual_trial

__all__ = ["LAB_4RPS", "RATE", "WORKLOAD", "SweepData", "populate_finished_sweep"]

RATE = 4.3
WORKLOAD = "lab-4.3rps"
SEQS = (32, 64, 128, 256)
TOKENS = (512, 1024, 2048, 4096)
LAB_4RPS: dict[str, object] = {
    "name": "lab-4rps", "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
    "arrivals": {"request_rate": 4}, "num_prompts": 160, "warmup_requests": 10}
"""The lab traffic at 4 req/s, where its configurations differ in goodput: the workload
of tests that run the lab space in goodput mode (its own is the seed's 20 req/s)."""


@dataclass(frozen=True, slots=True)
class SweepData:
    sweep_id: int
    winner_id: int
    winner_params: dict[str, KnobValue]
    trial_ids: tuple[int, ...]


def populate_finished_sweep(store: Store) -> SweepData:
    space = load_space("lab")
    base = space.resolve_workload()
    # Pinned here (not read from the shipped space, whose demo defaults may change): the
    # assertions below were worked out for this exact sweep.
    workload = base.model_copy(update={
        "name": WORKLOAD, "description": "seed lab traffic just past the knee",
        "num_prompts": 200,
        "arrivals": base.arrivals.model_copy(update={"request_rate": RATE})})
    slo = space.resolve_slo()
    sweep = store.create_sweep(
        name="lab-grid", workload=workload, slo=slo, space=space.model_dump(mode="json"),
        model=space.model, gpu=space.gpu, strategy="grid", mode="goodput",
        budget={"max_trials": 40})
    store.claim_sweep(sweep.id, "coordinator-test")
    number = 0
    ids: list[int] = []
    measured: list[tuple[dict[str, KnobValue], TrialResult]] = []

    def record(params: dict[str, KnobValue], result: TrialResult) -> int:
        nonlocal number
        spec = space.to_trial_spec(params, result.run_id, workload=workload, mode="goodput")
        trial = store.start_trial(sweep.id, number=number, params=params, spec=spec)
        store.finish_trial(trial.id, result)
        number += 1
        ids.append(trial.id)
        return trial.id

    def run(params: dict[str, KnobValue], seed: int) -> TrialResult:
        spec = space.to_trial_spec(params, f"sweep{sweep.id}-{number}", workload=workload,
                                   mode="goodput",
                                   options=SimOptions(noise=0.02, seed=seed, time_scale=2))
        return run_virtual_trial(spec, per_request=False)

    for seqs, tokens in itertools.product(SEQS, TOKENS):
        params = {**space.defaults(), "max_num_seqs": seqs, "max_num_batched_tokens": tokens}
        result = run(params, seed=1)
        record(params, result)
        measured.append((params, result))
    bad = {**space.defaults(), "max_num_seqs": 256, "max_num_batched_tokens": 128}
    record(bad, infeasible_result(f"sweep{sweep.id}-{number}",
                                  "max_num_batched_tokens >= max_num_seqs"))
    oom = {**space.defaults(), "gpu_memory_utilization": 0.95, "max_num_seqs": 256}
    record(oom, TrialResult(
        run_id=f"sweep{sweep.id}-{number}", status="failed", failure="oom",
        failure_message="CUDA out of memory while capturing CUDA graphs (23.6 GiB in use)",
        constraints={"fits": 1.0}))
    # confirm: the top two, three runs each, interleaved (A B A B A B), other noise seeds
    order = rank([r for _, r in measured])
    top = [measured[i][0] for i in order[:2]]
    runs: dict[str, list[tuple[int, TrialResult]]] = {params_key(p): [] for p in top}
    for repeat in range(3):
        for params in top:
            result = run(params, seed=10 + repeat)
            runs[params_key(params)].append((record(params, result), result))
    winner_params = top[0]
    winner_runs = runs[params_key(winner_params)]
    winner_id = max(winner_runs, key=lambda tr: tr[1].objective)[0]
    store.mark_confirmed(winner_id)
    store.add_card(
        sweep.id, step=1, symptom="prefill-bound: TTFT near target with prefill the larger "
        "part of it", evidence={"p99_ttft_ms": 305.6, "prefill_time_mean_ms": 61.2},
        hypothesis="max_num_batched_tokens moves the prefill wall",
        variable="max_num_batched_tokens", values=list(TOKENS),
        expected_direction="smaller chunks lower TTFT; larger ones raise prefill throughput",
        result={"summary": "max_num_batched_tokens=2048: objective 0 → 4.24, headroom 1.02 "
                "→ 0.82", "results": [
                    {"value": v, "status": "ok", "objective": 4.24 if v == 2048 else 0.0,
                     "p99_ttft_ms": 240.0 + 30 * i, "p99_tpot_ms": 31.0, "headroom": 0.82,
                     "failure": None} for i, v in enumerate(TOKENS)]},
        verdict="supported",
        controls={"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "rtx4090", "workload": WORKLOAD,
                  "workload_seed": 0, "engine": "sim", "engine_version": "slotune-sim",
                  "held_fixed": {"max_num_seqs": 256}, "order": "the incumbent first, then "
                  "one value at a time outward from it, nearest first"},
        stop_condition=["p99 TTFT above 300 ms on more requests than a p99 can absorb: the "
                        "run stops (early abort), objective 0"],
        rollback={"to": "max_num_batched_tokens=1024",
                  "config": {"max_num_batched_tokens": 1024, "max_num_seqs": 256},
                  "check": "re-measure it: objective 0 within 2%", "applied": False})
    store.add_card(
        sweep.id, step=2, symptom="prefill-bound: TTFT at 82% of target",
        evidence={"p99_ttft_ms": 244.5}, hypothesis="max_num_seqs moves the decode wall",
        variable="max_num_seqs", values=list(SEQS),
        expected_direction="a wider batch raises throughput until TPOT and KV pressure bite",
        result={"summary": "best objective 4.24 vs incumbent 4.24: no gain beyond noise (2%)"},
        verdict="rejected", rollback="rolled back to max_num_seqs=256")
    trials = store.list_trials(sweep.id).data
    ok = [t for t in trials if t.status == "ok"]
    best = max(ok, key=lambda t: t.objective or 0.0)
    store.update_sweep(sweep.id, status="done", stop_reason="budget: grid exhausted; "
                       "confirmed the top 2 (3 runs each)", progress={
                           "done": len(trials), "running": 0,
                           "failed": sum(t.status == "failed" for t in trials),
                           "infeasible": sum(t.status == "infeasible" for t in trials),
                           "best_objective": best.objective, "best_trial_id": winner_id,
                           "eta_s": 0})
    return SweepData(sweep.id, winner_id, dict(winner_params), tuple(ids))
