"""The best configuration per workload and the capacity planner, over HTTP on real stores."""

from __future__ import annotations

import random

import httpx
import pytest

from tests.tuner.api.data import measure, queue, result
from tuner.planner import replicas_for
from tuner.store import Store
from workers.contracts import EngineFacts, Workload

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
    chosen = measure(store, sweep["id"], 0, TP2, 37.5, capacity=37.5)
    measure(store, sweep["id"], 1, {**TP2, "max_num_seqs": 64}, 30.0, capacity=30.0)
    repeat = measure(store, sweep["id"], 2, TP2, 36.0, capacity=36.0)

    response = await client.post("/api/v1/capacity",
                                 json={"workload": "lab-4rps", "target_rps": 100})
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["basis"] == "capacity" and "capacity mode" in plan["basis_note"]
    assert plan["per_replica_rps"] == 37.5 and plan["headroom"] == 0.2
    _covers(plan, 100)
    assert plan["replicas"] == 4 and plan["gpus_per_replica"] == 2 and plan["gpus"] == 8
    assert plan["config"] == TP2 and plan["trial_ids"] == [chosen, repeat]
    assert plan["vllm_command"].startswith("vllm serve Qwen/Qwen2.5-7B-Instruct ")
    assert "--tensor-parallel-size=2" in plan["vllm_command"]
    assert plan["planned_rps"] >= 100 and plan["confirmed"] is False

    for target, headroom in ((100, 0.0), (100, 0.5), (7.5, 0.2), (1000, 0.35)):
        plan = (await client.post("/api/v1/capacity", json={
            "workload": "lab-4rps", "target_rps": target, "headroom": headroom})).json()
        assert plan["headroom"] == headroom
        _covers(plan, target)


async def test_a_plan_on_a_measurement_older_than_the_engine_says_so(
        client: httpx.AsyncClient, store: Store) -> None:
    sweep = await queue(client, mode="capacity")

    def measured(number: int, capacity: float, version: str) -> int:
        trial = store.start_trial(sweep["id"], number=number, params=TP2)
        stored = result(capacity, capacity=capacity).model_copy(
            update={"engine": EngineFacts(engine_version=version)})
        store.finish_trial(trial.id, stored)
        return trial.id

    before = measured(0, 37.5, "0.30.0")
    ask = {"workload": "lab-4rps", "target_rps": 100}
    plan = (await client.post("/api/v1/capacity", json=ask)).json()
    assert (plan["trial_ids"][0], plan["engine_version"], plan["stale"]) == (
        before, "0.30.0", None)
    after = measured(1, 30.0, "0.33.0")  # the engine was upgraded; the old best still wins
    plan = (await client.post("/api/v1/capacity", json=ask)).json()
    assert plan["trial_ids"][0] == before and plan["engine_version"] == "0.30.0"
    assert plan["stale"] == (f"measured before the newest measurement (trial {after}) changed "
                             "engine 0.30.0 → 0.33.0: re-measure before sizing on it")
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
