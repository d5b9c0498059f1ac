"""The planner's price table (settings) and the planner as a library call, on both stores."""

from __future__ import annotations

import pytest

from slotune.tuner.db.snapshot import load_workload
from slotune.tuner.db.store import Store
from slotune.tuner.planning.planner import plan_capacity
from slotune.tuner.settings import DEFAULT_GPU_PRICES, PlannerSettings, Settings, get_settings
from slotune.workers.contracts import SLO, TrialSpec, Workload
from tests.support.api_data import measure, result


@pytest.fixture(autouse=True)
def _no_prices_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLOTUNE_GPU_PRICES", raising=False)
    get_settings.cache_clear()


def test_the_shipped_prices_cover_the_simulated_gpus_and_not_cpu() -> None:
    prices = Settings().planner.gpu_prices
    assert set(prices) == {"a100-80g", "h100-sxm", "h200", "l40s", "rtx4090"}
    assert all(0 < p < 50 for p in prices.values()) and "cpu" not in prices


def test_slotune_gpu_prices_merge_over_the_shipped_ones_and_requests_over_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOTUNE_GPU_PRICES", '{"h100-sxm": 2.25, "mi300x": 4, "cpu": 0}')
    planner = get_settings().planner
    assert planner.gpu_prices == {**DEFAULT_GPU_PRICES, "h100-sxm": 2.25, "mi300x": 4.0,
                                  "cpu": 0.0}
    assert planner.prices({"mi300x": 3.5})["mi300x"] == 3.5
    assert planner.prices({"mi300x": 3.5})["h100-sxm"] == 2.25
    assert planner.prices(None) == planner.gpu_prices


@pytest.mark.parametrize(("value", "reason"), [
    ('{"h100-sxm": -3}', "price of 'h100-sxm': Input should be greater than or equal to 0"),
    ('{"h100-sxm": "cheap"}', "price of 'h100-sxm': Input should be a valid number"),
    ('{"h100-sxm": 1e999}', "finite number"),
    ("h100-sxm=3", "Invalid JSON"),
    ("[3.0]", "Input should be an object"),
    ('{"": 1}', "GPU name '': String should have at least 1 character"),
])
def test_a_bad_slotune_gpu_prices_fails_at_start_naming_it(
        monkeypatch: pytest.MonkeyPatch, value: str, reason: str) -> None:
    monkeypatch.setenv("SLOTUNE_GPU_PRICES", value)
    with pytest.raises(ValueError, match="SLOTUNE_GPU_PRICES") as caught:
        Settings()
    message = str(caught.value)
    assert "expected a JSON object of GPU name → USD per GPU-hour" in message
    assert '{"h100-sxm": 3.0' in message and reason in message
    with pytest.raises(ValueError, match="SLOTUNE_GPU_PRICES"):
        PlannerSettings()


def test_without_prices_the_plan_with_fewest_gpus_wins(store: Store) -> None:
    fleet, slo = Workload(name="fleet"), SLO.parse("ttft:300,tpot:50")
    trials = {}
    for gpu, capacity in (("h100-sxm", 30.0), ("l40s", 12.0)):
        sweep = store.create_sweep(name=gpu, workload=fleet, slo=slo, space={},
                                   model="Qwen/Qwen2.5-7B-Instruct", gpu=gpu,
                                   strategy="random", mode="capacity")
        trials[gpu] = measure(store, sweep.id, 0, {"max_num_seqs": 128}, capacity,
                              capacity=capacity)
    plan = plan_capacity(load_workload(store, "fleet"), target_rps=48)
    assert (plan.gpu, plan.gpus, plan.trial_ids) == ("h100-sxm", 2, [trials["h100-sxm"]])
    assert (plan.price_per_gpu_hour, plan.cost_per_hour) == (None, None)
    assert [(o.gpu, o.gpus, o.cost_per_hour) for o in plan.options] == [
        ("h100-sxm", 2, None), ("l40s", 5, None)]
    assert len(plan.notes) == 1 and "compared by GPUs" in plan.notes[0]
    priced = plan_capacity(load_workload(store, "fleet"), target_rps=48,
                           gpu_prices={"h100-sxm": 3.0, "l40s": 1.0})
    assert (priced.gpu, priced.cost_per_hour, priced.notes) == ("l40s", 5.0, [])


def test_the_confirmed_answer_stands_and_is_sized_from_its_interval_s_lower_end(
        store: Store) -> None:
    # The main job: the confirmed winner (its confirmation read 24-26 req/s on
    # fresh samples) lost to a configuration the search read once at 40. A confirmed
    # configuration's search row carries its confirmation's interval, and where a sweep
    # confirmed one, that answer stands; repeat rows and the baseline are no candidates.
    fleet, slo = Workload(name="fleet"), SLO.parse("ttft:300,tpot:50")
    sweep = store.create_sweep(name="s", workload=fleet, slo=slo, space={},
                               model="Qwen/Qwen2.5-7B-Instruct", gpu="h100-sxm",
                               strategy="random", mode="capacity")
    winner = measure(store, sweep.id, 0, {"max_num_seqs": 128}, 30.0, capacity=30.0)
    once = measure(store, sweep.id, 1, {"max_num_seqs": 64}, 40.0, capacity=40.0)
    spec = TrialSpec(run_id="r", model="Qwen/Qwen2.5-7B-Instruct",
                     knobs={"max_num_seqs": 128}, workload=fleet, slo=slo, mode="capacity")
    store.record_trial(sweep.id, role="repeat", number=0, repeat=1, repeat_of=winner,
                       params={"max_num_seqs": 128}, spec=spec,
                       result=result(22.0, capacity=22.0))
    store.record_trial(sweep.id, role="baseline", number=0, params={}, spec=spec,
                       result=result(0.0, capacity=90.0))
    store.set_capacity(winner, low=24.0, high=26.0, gpus=1, repeats=2)
    store.mark_confirmed(winner, repeats=2)
    plan = plan_capacity(load_workload(store, "fleet"), target_rps=48)
    assert len(plan.options) == 1 and plan.trial_ids == [winner] and plan.confirmed
    assert plan.per_replica_rps == 24.0 and plan.replicas == 3  # 48 / (24 × 0.8)
    assert (plan.capacity_rps, plan.capacity_high_rps) == (pytest.approx(24.98, abs=0.01),
                                                           26.0)
    best = store.best_for_workload("fleet")
    assert [(b.trial_id, b.capacity_low, b.capacity_high, b.number) for b in best] == [
        (winner, 24.0, 26.0, 0)]
    assert once not in {e.trial_id for e in best[0].equivalent}  # 40 per GPU: no overlap


def test_a_configuration_whose_repeat_held_nothing_sizes_nothing(
        store: Store) -> None:
    # The sweep's confirmation did not crown a configuration whose repeat broke the SLO
    # at its lowest probed rate; the planner must not size the fleet on its search run.
    fleet, slo = Workload(name="fleet"), SLO.parse("ttft:300,tpot:50")
    sweep = store.create_sweep(name="s", workload=fleet, slo=slo, space={},
                               model="Qwen/Qwen2.5-7B-Instruct", gpu="h100-sxm",
                               strategy="random", mode="capacity")
    lucky = measure(store, sweep.id, 0, {"max_num_seqs": 256}, 40.0, capacity=40.0)
    steady = measure(store, sweep.id, 1, {"max_num_seqs": 128}, 30.0, capacity=30.0)
    spec = TrialSpec(run_id="r", model="Qwen/Qwen2.5-7B-Instruct",
                     knobs={"max_num_seqs": 256}, workload=fleet, slo=slo, mode="capacity")
    store.record_trial(sweep.id, role="repeat", number=0, repeat=1, repeat_of=lucky,
                       params={"max_num_seqs": 256}, spec=spec,
                       result=result(0.0, capacity=0.0))
    plan = plan_capacity(load_workload(store, "fleet"), target_rps=48)
    assert plan.trial_ids == [steady] and plan.per_replica_rps == 30.0
    assert len(plan.options) == 1
