"""The best configuration per workload and the capacity planner, over HTTP on real stores."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from slotune.tuner.db.store import Store
from slotune.tuner.planning.planner import replicas_for
from slotune.tuner.settings import DEFAULT_GPU_PRICES
from slotune.workers.contracts import SLO, EngineFacts, ObjectiveMode, Workload
from tests.support.api import ClientFactory
from tests.support.api_data import measure, queue, result

SLO_KEY = '{"percentile":99.0,"tpot":50.0,"ttft":300.0}'
TP2 = {"max_num_seqs": 128, "max_num_batched_tokens": 4096, "tensor_parallel_size": 2}


@pytest.mark.parametrize("backend", ["postgres", "sqlite"], indirect=True)
async def test_best_prefers_confirmed_then_highest(client: httpx.AsyncClient,
                                                   store: Store) -> None:
    sweep = await queue(client)
    measure(store, sweep["id"], 0, {"max_num_seqs": 256}, 3.98)
    confirmed = measure(store, sweep["id"], 1, {"max_num_seqs": 128,
                                                "enable_prefix_caching": False}, 3.91)
    best = (await client.get("/api/v1/workloads/lab-4rps/best")).json()
    assert best["count"] == 1 and best["data"][0]["objective"] == 3.98  # highest, none confirmed

    store.mark_confirmed(confirmed)
    row = (await client.get("/api/v1/workloads/lab-4rps/best")).json()["data"][0]
    assert (row["trial_id"], row["confirmed"], row["slo"]) == (confirmed, True, SLO_KEY)
    assert row["vllm_command"] == ("vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs=128 "
                                   "--no-enable-prefix-caching")

    for slo in ("ttft:300,tpot:50", SLO_KEY, "tpot:50,ttft:300,p:99"):
        same = (await client.get("/api/v1/workloads/lab-4rps/best", params={"slo": slo})).json()
        assert [r["trial_id"] for r in same["data"]] == [confirmed], slo
    other = await client.get("/api/v1/workloads/lab-4rps/best", params={"slo": "ttft:100"})
    assert other.json() == {"data": [], "count": 0, "without_passing": []}
    assert (await client.get("/api/v1/workloads/lab-4rps/best",
                             params={"gpu": "h100-sxm"})).json()["count"] == 0
    bad = await client.get("/api/v1/workloads/lab-4rps/best", params={"slo": "fast"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "slo"]
    missing = await client.get("/api/v1/workloads/unknown/best")
    assert missing.status_code == 404 and "unknown" in missing.json()["detail"]

    workloads = (await client.get("/api/v1/workloads")).json()
    assert workloads["count"] == 1 and workloads["data"][0]["name"] == "lab-4rps"
    assert [b["trial_id"] for b in workloads["data"][0]["best"]] == [confirmed]
    one = (await client.get("/api/v1/workloads/lab-4rps")).json()
    assert one["spec"]["arrivals"]["request_rate"] == 4
    every = (await client.get("/api/v1/best")).json()
    assert every["count"] == 1 and every["data"][0]["vllm_command"] == row["vllm_command"]


def _covers(plan: dict[str, float], target: float) -> None:
    usable = plan["per_replica_rps"] * (1 - plan["headroom"])
    assert isinstance(plan["replicas"], int) and plan["replicas"] >= 1
    assert plan["replicas"] * usable >= target
    assert (plan["replicas"] - 1) * usable < target


@pytest.mark.parametrize("backend", ["postgres", "sqlite"], indirect=True)
async def test_a_workload_where_nothing_met_the_slo_has_no_best_but_a_reason(
        client: httpx.AsyncClient, store: Store) -> None:
    sweep = await queue(client)
    missed = [measure(store, sweep["id"], n, {"max_num_seqs": 64 << n}, 0.0, gate=False)
              for n in range(2)]
    best = (await client.get("/api/v1/workloads/lab-4rps/best")).json()
    assert best["data"] == [] and best["count"] == 0
    [why] = best["without_passing"]
    assert why["closest"] in missed and why["trials"] == 2 and why["slo"] == SLO_KEY
    assert why["reason"].startswith("no configuration meets the SLO at 4 req/s (2 measured)")
    everything = (await client.get("/api/v1/best")).json()
    assert everything["data"] == [] and everything["without_passing"] == [why]
    # the dashboard's index reads the workload list: no winner there either
    listed = (await client.get("/api/v1/workloads")).json()["data"]
    assert [w["best"] for w in listed if w["name"] == "lab-4rps"] == [[]]


async def test_capacity_from_a_capacity_mode_sweep(client: httpx.AsyncClient,
                                                   store: Store) -> None:
    sweep = await queue(client, mode="capacity")
    first = measure(store, sweep["id"], 0, TP2, 37.5, capacity=37.5)
    measure(store, sweep["id"], 1, {**TP2, "max_num_seqs": 64}, 30.0, capacity=30.0)
    repeat = measure(store, sweep["id"], 2, TP2, 36.0, capacity=36.0, confirmed=True)

    response = await client.post("/api/v1/capacity",
                                 json={"workload": "lab-4rps", "target_rps": 100})
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["basis"] == "capacity" and "capacity mode" in plan["basis_note"]
    # The sweep confirmed an answer: it stands, on its own row (a confirmed row carries
    # its confirmation's measurement; the search's reading of the same configuration is
    # no second measurement), and the configuration read higher once does not beat it.
    assert plan["per_replica_rps"] == 36.0 and plan["headroom"] == 0.2
    _covers(plan, 100)
    assert plan["replicas"] == 4 and plan["gpus_per_replica"] == 2 and plan["gpus"] == 8
    assert plan["config"] == TP2 and plan["trial_ids"] == [repeat] and first != repeat
    assert plan["vllm_command"].startswith("vllm serve Qwen/Qwen2.5-7B-Instruct ")
    assert "--tensor-parallel-size=2" in plan["vllm_command"]
    assert plan["planned_rps"] >= 100 and plan["confirmed"] is True

    for target, headroom in ((100, 0.0), (100, 0.5), (7.5, 0.2), (1000, 0.35)):
        plan = (await client.post("/api/v1/capacity", json={
            "workload": "lab-4rps", "target_rps": target, "headroom": headroom})).json()
        assert plan["headroom"] == headroom
        _covers(plan, target)


async def test_a_plan_on_a_measurement_older_than_the_engine_says_so(
        client: httpx.AsyncClient, store: Store) -> None:
    sweep = await queue(client, mode="capacity")

    def measured(number: int, capacity: float, version: str, config: dict[str, int]) -> int:
        trial = store.start_trial(sweep["id"], number=number, params=config)
        stored = result(capacity, capacity=capacity).model_copy(
            update={"engine": EngineFacts(engine_version=version)})
        store.finish_trial(trial.id, stored)
        return trial.id

    before = measured(0, 37.5, "0.30.0", TP2)
    ask = {"workload": "lab-4rps", "target_rps": 100}
    plan = (await client.post("/api/v1/capacity", json=ask)).json()
    assert (plan["trial_ids"][0], plan["engine_version"], plan["stale"]) == (
        before, "0.30.0", None)
    assert plan["notes"] == []
    # The engine was upgraded and another configuration measured on it; the old one still
    # needs fewer GPUs (4 × 2 against 5 × 2) and wins, on a measurement that is now old.
    after = measured(1, 30.0, "0.33.0", {**TP2, "max_num_seqs": 64})
    plan = (await client.post("/api/v1/capacity", json=ask)).json()
    assert plan["trial_ids"][0] == before and plan["engine_version"] == "0.30.0"
    stale = (f"measured before the newest measurement (trial {after}) changed engine 0.30.0 → "
             "0.33.0: re-measure before sizing on it")
    assert plan["stale"] == stale and plan["notes"] == [
        f"The plan's configuration on rtx4090 was {stale}."]
    assert plan["options"][0]["stale"] == stale
    [row] = (await client.get("/api/v1/workloads/lab-4rps/best")).json()["data"]
    assert (row["trial_id"], row["stale"]) == (before, True)


async def test_capacity_from_goodput_only_is_a_lower_bound(client: httpx.AsyncClient,
                                                           store: Store) -> None:
    sweep = await queue(client, workload="chat")
    trial = measure(store, sweep["id"], 0, {"max_num_seqs": 256}, 3.96, confirmed=True)
    measure(store, sweep["id"], 1, {"max_num_seqs": 32}, 0.0, gate=False)
    plan = (await client.post("/api/v1/capacity", json={
        "workload": sweep["workload"], "target_rps": 100, "model": sweep["model"],
        "gpu": sweep["gpu"], "slo": "ttft:300,tpot:50"})).json()
    assert plan["basis"] == "goodput_lower_bound" and "lower bound" in plan["basis_note"]
    assert plan["per_replica_rps"] == 3.96 and plan["trial_ids"] == [trial]
    assert plan["confirmed"] is True and plan["gpus"] == plan["replicas"]
    _covers(plan, 100)


async def test_capacity_measurements_win_over_goodput(client: httpx.AsyncClient,
                                                      store: Store) -> None:
    goodput = await queue(client)
    measure(store, goodput["id"], 0, {"max_num_seqs": 256}, 3.97, confirmed=True)
    capacity = await queue(client, mode="capacity")
    chosen = measure(store, capacity["id"], 0, {"max_num_seqs": 128}, 9.5, capacity=9.5)
    plan = (await client.post("/api/v1/capacity",
                              json={"workload": "lab-4rps", "target_rps": 20})).json()
    assert (plan["basis"], plan["trial_ids"], plan["sweep_id"]) == ("capacity", [chosen],
                                                                    capacity["id"])


async def test_capacity_refusals(client: httpx.AsyncClient, store: Store) -> None:
    unknown = await client.post("/api/v1/capacity", json={"workload": "nope", "target_rps": 10})
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]

    sweep = await queue(client)
    nothing = await client.post("/api/v1/capacity",
                                json={"workload": "lab-4rps", "target_rps": 10})
    assert nothing.status_code == 404 and "nothing measured" in nothing.json()["detail"]

    measure(store, sweep["id"], 0, {"max_num_seqs": 256}, 0.0, gate=False)
    measure(store, sweep["id"], 1, {"max_num_seqs": 512}, 0.0, gate=False)
    never = await client.post("/api/v1/capacity", json={"workload": "lab-4rps", "target_rps": 10})
    assert never.status_code == 422
    error = never.json()["detail"][0]
    assert error["loc"] == ["body", "workload"]
    assert "no configuration met the SLO" in error["msg"] and "2 trial(s)" in error["msg"]

    loose = await queue(client, slo="ttft:1000,tpot:100")
    measure(store, loose["id"], 0, {"max_num_seqs": 256}, 3.99)
    ambiguous = await client.post("/api/v1/capacity",
                                  json={"workload": "lab-4rps", "target_rps": 10})
    assert ambiguous.status_code == 422
    assert ambiguous.json()["detail"][0]["loc"] == ["body", "slo"]
    named = await client.post("/api/v1/capacity", json={
        "workload": "lab-4rps", "target_rps": 10, "slo": "ttft:1000,tpot:100"})
    assert named.status_code == 200 and named.json()["per_replica_rps"] == 3.99


@pytest.mark.parametrize(("body", "field"), [
    ({"workload": "w", "target_rps": 0}, "target_rps"),
    ({"workload": "w", "target_rps": -5}, "target_rps"),
    ({"workload": "w", "target_rps": 10, "headroom": 1.0}, "headroom"),
    ({"workload": "w", "target_rps": 10, "headroom": -0.1}, "headroom"),
    ({"target_rps": 10}, "workload"),
    ({"workload": "w", "target_rps": 10, "replicas": 3}, "replicas"),
    ({"workload": "w", "target_rps": 10, "slo": "quick"}, "slo"),
])
async def test_capacity_bad_input_is_422_with_the_field(client: httpx.AsyncClient,
                                                        store: Store, body: dict[str, object],
                                                        field: str) -> None:
    if field == "slo":
        store.upsert_workload(Workload(name="w"))  # so the refusal is the SLO's, not a 404
    response = await client.post("/api/v1/capacity", json=body)
    assert response.status_code == 422, response.text
    assert ["body", field] in [e["loc"][:2] for e in response.json()["detail"]]


def test_replicas_is_the_fewest_that_cover_the_target() -> None:
    rng = random.Random(7)
    cases = [(100, 62.5, 0.2), (0.3, 0.1, 0.0), (100, 50, 0.0), (1, 1000, 0.9)]
    cases += [(rng.uniform(0.1, 5000), rng.uniform(0.01, 200), rng.choice([0, 0.1, 0.2, 0.5]))
              for _ in range(2000)]
    for target, per_replica, headroom in cases:
        n = replicas_for(target, per_replica, headroom)
        usable = per_replica * (1 - headroom)
        assert n >= 1 and n * usable >= target and (n == 1 or (n - 1) * usable < target)
    assert replicas_for(100, 62.5, 0.2) == 2 and replicas_for(100, 37.5, 0.2) == 4
    with pytest.raises(ValueError):
        replicas_for(100, 0.0, 0.2)


# --- the cost-aware planner: every measured configuration, on every GPU, by cost ----------

FLEET = Workload(name="fleet")
QWEN = "Qwen/Qwen2.5-7B-Instruct"
SEQS = {"max_num_seqs": 128}
STRICT, LOOSE = "ttft:300,tpot:50", "ttft:1000,tpot:100"
LOOSE_KEY = '{"percentile":99.0,"tpot":100.0,"ttft":1000.0}'


def on_gpu(store: Store, gpu: str, *, slo: str = STRICT,
           mode: ObjectiveMode = "capacity") -> int:
    """A sweep of the fleet workload on ``gpu``, stored the way the API queues one."""
    return store.create_sweep(name=f"{gpu}-{mode}-{slo}", workload=FLEET, slo=SLO.parse(slo),
                              space={}, model=QWEN, gpu=gpu, strategy="random",
                              mode=mode).id


def held(store: Store, sweep_id: int, number: int, config: dict[str, int], capacity: float,
         *, per_gpu: float, confirmed: bool = False) -> int:
    """A capacity-mode trial as the coordinator stores it: the per-replica capacity, and
    the objective per GPU of the replica (given, not derived here)."""
    return measure(store, sweep_id, number, config, per_gpu, capacity=capacity,
                   confirmed=confirmed)


async def plan_for(client: httpx.AsyncClient, **body: object) -> dict[str, Any]:
    response = await client.post("/api/v1/capacity", json={"workload": "fleet", **body})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _sides(plan: dict[str, Any]) -> list[tuple[object, ...]]:
    return [(o["gpu"], o["replicas"], o["gpus"], o["price_per_gpu_hour"], o["cost_per_hour"])
            for o in plan["options"]]


async def test_the_cheapest_plan_wins_even_with_more_gpus(client: httpx.AsyncClient,
                                                          store: Store) -> None:
    fast = held(store, on_gpu(store, "h100-sxm"), 0, SEQS, 30.0, per_gpu=30.0)
    slow = held(store, on_gpu(store, "l40s"), 0, SEQS, 12.0, per_gpu=12.0)
    # 48 req/s at 20% headroom: 2 × h100 (24 req/s usable each) or 5 × l40s (9.6 each).
    plan = await plan_for(client, target_rps=48, gpu_prices={"h100-sxm": 3.0, "l40s": 1.0})
    assert (plan["gpu"], plan["replicas"], plan["gpus"]) == ("l40s", 5, 5)
    assert (plan["price_per_gpu_hour"], plan["cost_per_hour"]) == (1.0, 5.0)
    assert plan["trial_ids"] == [slow] and plan["per_replica_rps"] == 12.0
    assert _sides(plan) == [("l40s", 5, 5, 1.0, 5.0), ("h100-sxm", 2, 2, 3.0, 6.0)]
    h100 = plan["options"][1]
    assert (h100["model"], h100["gpus_per_replica"], h100["per_replica_rps"]) == (QWEN, 1, 30.0)
    assert (h100["basis"], h100["config"], h100["trial_ids"]) == ("capacity", SEQS, [fast])
    assert h100["vllm_command"] == f"vllm serve {QWEN} --max-num-seqs=128"
    assert h100["planned_rps"] == pytest.approx(48.0) and h100["confirmed"] is False
    assert plan["notes"] == []

    flipped = await plan_for(client, target_rps=48, gpu_prices={"h100-sxm": 2.0, "l40s": 3.0})
    assert (flipped["gpu"], flipped["gpus"], flipped["cost_per_hour"]) == ("h100-sxm", 2, 4.0)
    assert flipped["trial_ids"] == [fast]
    assert _sides(flipped) == [("h100-sxm", 2, 2, 2.0, 4.0), ("l40s", 5, 5, 3.0, 15.0)]
    # The same cost both ways ($5/h): the plan with fewer GPUs.
    even = await plan_for(client, target_rps=48, gpu_prices={"h100-sxm": 2.5, "l40s": 1.0})
    assert (even["gpu"], even["cost_per_hour"]) == ("h100-sxm", 5.0)


async def test_request_prices_override_the_servers_per_gpu(
        make_client: ClientFactory, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    held(store, on_gpu(store, "h100-sxm"), 0, SEQS, 30.0, per_gpu=30.0)
    held(store, on_gpu(store, "l40s"), 0, SEQS, 12.0, per_gpu=12.0)
    monkeypatch.delenv("SLOTUNE_GPU_PRICES", raising=False)
    async with make_client() as shipped:  # no SLOTUNE_GPU_PRICES: the shipped list prices
        plan = await plan_for(shipped, target_rps=48)
    prices = {o["gpu"]: o["price_per_gpu_hour"] for o in plan["options"]}
    assert prices == {"h100-sxm": DEFAULT_GPU_PRICES["h100-sxm"],
                      "l40s": DEFAULT_GPU_PRICES["l40s"]}

    monkeypatch.setenv("SLOTUNE_GPU_PRICES", '{"h100-sxm": 2.0, "l40s": 1.5}')
    async with make_client() as client:
        server = await plan_for(client, target_rps=48)
        assert _sides(server) == [("h100-sxm", 2, 2, 2.0, 4.0), ("l40s", 5, 5, 1.5, 7.5)]
        cheap_l40s = await plan_for(client, target_rps=48, gpu_prices={"l40s": 0.5})
    # the request's l40s price wins; h100-sxm keeps the server's
    assert _sides(cheap_l40s) == [("l40s", 5, 5, 0.5, 2.5), ("h100-sxm", 2, 2, 2.0, 4.0)]


async def test_an_unpriced_gpu_ranks_after_the_priced_ones(client: httpx.AsyncClient,
                                                           store: Store) -> None:
    held(store, on_gpu(store, "l40s"), 0, SEQS, 12.0, per_gpu=12.0)
    big = held(store, on_gpu(store, "mi300x"), 0, SEQS, 100.0, per_gpu=100.0)
    plan = await plan_for(client, target_rps=48, gpu_prices={"l40s": 1.0})
    assert (plan["gpu"], plan["gpus"], plan["cost_per_hour"]) == ("l40s", 5, 5.0)
    assert _sides(plan) == [("l40s", 5, 5, 1.0, 5.0), ("mi300x", 1, 1, None, None)]
    [note] = plan["notes"]
    assert note.startswith("No price for mi300x: plans on them are ranked after the priced")

    priced = await plan_for(client, target_rps=48, gpu_prices={"mi300x": 4.0})
    assert (priced["gpu"], priced["cost_per_hour"], priced["trial_ids"]) == ("mi300x", 4.0,
                                                                            [big])
    assert priced["notes"] == []
    alone = await plan_for(client, target_rps=48, gpu="mi300x")
    assert (alone["gpu"], alone["price_per_gpu_hour"], alone["cost_per_hour"]) == (
        "mi300x", None, None)
    assert alone["notes"] and "compared by GPUs" in alone["notes"][0]


async def test_two_small_replicas_can_beat_one_big_one(client: httpx.AsyncClient,
                                                       store: Store) -> None:
    sweep = on_gpu(store, "h100-sxm")
    tp2 = held(store, sweep, 0, {**SEQS, "tensor_parallel_size": 2}, 20.0, per_gpu=10.0)
    tp4 = held(store, sweep, 1, {**SEQS, "tensor_parallel_size": 4}, 45.0, per_gpu=11.25)
    held(store, sweep, 2, {**SEQS, "tensor_parallel_size": 8}, 50.0, per_gpu=6.25)
    prices = {"h100-sxm": 3.0}
    # 60 req/s, no headroom: 3 × TP2 (6 GPUs), 2 × TP4 (8), 2 × TP8 (16).
    plan = await plan_for(client, target_rps=60, headroom=0, gpu_prices=prices)
    assert (plan["trial_ids"], plan["replicas"], plan["gpus_per_replica"], plan["gpus"]) == (
        [tp2], 3, 2, 6)
    assert plan["cost_per_hour"] == 18.0 and plan["per_replica_rps"] == 20.0
    assert len(plan["options"]) == 1 and plan["options"][0]["trial_ids"] == [tp2]
    # 30 req/s: 2 × TP2 and 1 × TP4 are both 4 GPUs; the higher per-replica rate breaks it.
    plan = await plan_for(client, target_rps=30, headroom=0, gpu_prices=prices)
    assert (plan["trial_ids"], plan["replicas"], plan["gpus"], plan["cost_per_hour"]) == (
        [tp4], 1, 4, 12.0)


async def test_old_capacity_rows_without_a_capacity_column_use_their_objective(
        client: httpx.AsyncClient, store: Store) -> None:
    old = measure(store, on_gpu(store, "l40s"), 0, SEQS, 9.5)  # objective = capacity, then
    plan = await plan_for(client, target_rps=19, headroom=0, gpu_prices={"l40s": 1.0})
    assert (plan["basis"], plan["per_replica_rps"], plan["replicas"], plan["trial_ids"]) == (
        "capacity", 9.5, 2, [old])


async def test_a_goodput_lower_bound_only_where_a_gpu_has_no_capacity_measurement(
        client: httpx.AsyncClient, store: Store) -> None:
    # rtx4090: a goodput run reached 20 req/s, a capacity search held 9.5: the measured
    # capacity is the answer there. l40s has only a goodput run: its lower bound stands in.
    measure(store, on_gpu(store, "rtx4090", mode="goodput"), 0, {"max_num_seqs": 64}, 20.0)
    searched = held(store, on_gpu(store, "rtx4090"), 0, SEQS, 9.5, per_gpu=9.5)
    bound = measure(store, on_gpu(store, "l40s", mode="goodput"), 0, SEQS, 4.0)
    plan = await plan_for(client, target_rps=19, headroom=0,
                          gpu_prices={"rtx4090": 0.5, "l40s": 1.0})
    assert (plan["gpu"], plan["basis"], plan["trial_ids"], plan["cost_per_hour"]) == (
        "rtx4090", "capacity", [searched], 1.0)
    assert [(o["gpu"], o["basis"], o["per_replica_rps"], o["trial_ids"])
            for o in plan["options"]] == [("rtx4090", "capacity", 9.5, [searched]),
                                          ("l40s", "goodput_lower_bound", 4.0, [bound])]


async def test_measurements_under_other_slos_are_named_not_used(client: httpx.AsyncClient,
                                                                store: Store) -> None:
    strict = held(store, on_gpu(store, "h100-sxm"), 0, SEQS, 30.0, per_gpu=30.0)
    held(store, on_gpu(store, "l40s", slo=LOOSE), 0, SEQS, 50.0, per_gpu=50.0)
    plan = await plan_for(client, target_rps=48, slo=STRICT)
    assert plan["trial_ids"] == [strict] and [o["gpu"] for o in plan["options"]] == ["h100-sxm"]
    assert plan["notes"] == [
        f"The same workload was also measured under another SLO {LOOSE_KEY}; those "
        "measurements were not used: the plan holds the SLO asked for."]
    only_h100 = await plan_for(client, target_rps=48, slo=STRICT, gpu="h100-sxm")
    assert only_h100["notes"] == []  # the other SLO's measurements are on another GPU

    missing = await client.post("/api/v1/capacity", json={
        "workload": "fleet", "target_rps": 48, "slo": "ttft:200"})
    assert missing.status_code == 404
    detail = missing.json()["detail"]
    assert "no finished trial under that SLO" in detail
    assert "2 other SLOs" in detail and LOOSE_KEY in detail and '"tpot":50.0' in detail
    ambiguous = await client.post("/api/v1/capacity", json={"workload": "fleet",
                                                             "target_rps": 48})
    assert ambiguous.status_code == 422 and ambiguous.json()["detail"][0]["type"] == (
        "ambiguous_slo")


@pytest.mark.parametrize(("prices", "reason"), [
    ('{"h100-sxm": -1}', "greater than or equal to 0"),
    ('{"h100-sxm": 2000000}', "less than or equal to 1000000"),
    ('{"h100-sxm": NaN}', "finite number"),
    ('{"h100-sxm": Infinity}', "finite number"),
    ('{"h100-sxm": 1e400}', "finite number"),
    ('{"h100-sxm": "3"}', "valid number"),
    ('{"h100-sxm": true}', "valid number"),
    ('{"": 1}', "at least 1 character"),
    ('{"h100\\u0000": 1}', "match pattern"),
    ("{" + ", ".join(f'"gpu{n}": 1' for n in range(65)) + "}", "at most 64 items"),
    ('[["h100-sxm", 3]]', "valid dictionary"),
])
async def test_bad_gpu_prices_are_422_with_the_reason(client: httpx.AsyncClient, prices: str,
                                                      reason: str) -> None:
    body = '{"workload": "fleet", "target_rps": 10, "gpu_prices": ' + prices + "}"
    response = await client.post("/api/v1/capacity", content=body,
                                 headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"][:2] == ["body", "gpu_prices"] and reason in error["msg"], error


@pytest.mark.parametrize("backend", ["postgres", "sqlite"], indirect=True)
async def test_best_shows_the_confirmed_interval_its_trial_number_and_equivalent_set(
        client: httpx.AsyncClient, store: Store) -> None:
    # Three configurations read by the search; two confirmed (their rows carry their
    # confirmation's interval), the third only ranked. The answer's interval overlaps one
    # confirmed and one ranked configuration per GPU: the API says so, and the planner
    # sizes on the winner's lower end.
    sweep = await queue(client, mode="capacity")
    winner = measure(store, sweep["id"], 3, {"max_num_seqs": 128}, 11.0, capacity=11.0)
    close = measure(store, sweep["id"], 4, {"max_num_seqs": 256}, 12.0, capacity=12.0)
    ranked = measure(store, sweep["id"], 5, {"max_num_seqs": 64}, 10.4, capacity=10.4)
    measure(store, sweep["id"], 6, {"max_num_seqs": 32}, 6.0, capacity=6.0)  # far below
    store.set_capacity(winner, low=9.8, high=11.5, capacity=10.6, gpus=1, repeats=2)
    store.set_capacity(close, low=10.9, high=12.4, gpus=1, repeats=2)
    store.mark_confirmed(winner, repeats=2)
    [row] = (await client.get("/api/v1/workloads/lab-4rps/best")).json()["data"]
    assert (row["trial_id"], row["number"], row["sweep_id"]) == (winner, 3, sweep["id"])
    assert (row["capacity"], row["capacity_low"], row["capacity_high"]) == (10.6, 9.8, 11.5)
    equivalent = {e["trial_id"]: e for e in row["equivalent"]}
    assert set(equivalent) == {close, ranked}
    assert equivalent[close]["confirmed"] and not equivalent[ranked]["confirmed"]
    assert (equivalent[close]["capacity_low"], equivalent[close]["capacity_high"]) == (
        10.9, 12.4)
    plan = (await client.post("/api/v1/capacity",
                              json={"workload": "lab-4rps", "target_rps": 20})).json()
    assert plan["trial_ids"] == [winner] and plan["per_replica_rps"] == 9.8
    assert plan["capacity_high_rps"] == 11.5
