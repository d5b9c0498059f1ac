"""Sweeps, trials and cards over HTTP, and how bad input is refused (422 / 404 / 409 / 413)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from slotune.tuner.api.routes import dashboard
from slotune.tuner.db.store import Store
from slotune.workers.contracts import SLO, TrialSpec, Workload
from tests.support.api import ClientFactory
from tests.support.api_data import WRITE, measure, queue, result
from tests.support.lab import TP_SPACE


@pytest.mark.parametrize("backend", ["postgres", "sqlite"], indirect=True)
async def test_queue_list_get_cancel(client: httpx.AsyncClient, store: Store) -> None:
    first = await queue(client, name="night-1", owner="ann", budget={"max_trials": 8})
    second = await queue(client, name="capacity-1", mode="capacity", slo="ttft:500,tpot:60")
    assert first["workload"] == "lab-4rps" and first["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert second["mode"] == "capacity"
    assert second["slo_key"] == '{"percentile":99.0,"tpot":60.0,"ttft":500.0}'

    page = (await client.get("/api/v1/sweeps", params={"limit": 1})).json()
    assert page["count"] == 2 and [s["name"] for s in page["data"]] == ["capacity-1"]
    owned = (await client.get("/api/v1/sweeps", params={"owner": "ann"})).json()
    assert [s["id"] for s in owned["data"]] == [first["id"]]

    # the typed progress: every field present, an unknown key or a foreign shape not a 500
    store.update_sweep(first["id"], progress={"trials": 3, "best_objective": 3.9,
                                              "done": "three", "legacy": 1})
    got = (await client.get(f"/api/v1/sweeps/{first['id']}")).json()
    progress = got["progress"]
    assert (progress["trials"], progress["best_objective"], progress["done"]) == (3, 3.9, 0)
    assert progress["phase"] == "queued" and "legacy" not in progress

    cancelled = await client.post(f"/api/v1/sweeps/{first['id']}/cancel", headers=WRITE)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    only = (await client.get("/api/v1/sweeps", params={"status": "cancelled"})).json()
    assert only["count"] == 1 and only["data"][0]["id"] == first["id"]


async def test_cancel_a_finished_sweep_is_a_conflict(client: httpx.AsyncClient,
                                                     store: Store) -> None:
    sweep = await queue(client)
    store.claim_sweep(sweep["id"], "coord")
    store.update_sweep(sweep["id"], status="done")
    response = await client.post(f"/api/v1/sweeps/{sweep['id']}/cancel", headers=WRITE)
    assert response.status_code == 409 and "done" in response.json()["detail"]


async def test_trials_carry_the_compact_metrics(client: httpx.AsyncClient, store: Store) -> None:
    sweep = await queue(client)
    good = measure(store, sweep["id"], 0, {"max_num_seqs": 128}, 3.96)
    measure(store, sweep["id"], 1, {"max_num_seqs": 32}, 0.0, gate=False)
    store.start_trial(sweep["id"], number=2, params={"max_num_seqs": 64})  # still running

    page = (await client.get(f"/api/v1/sweeps/{sweep['id']}/trials")).json()
    assert page["count"] == 3 and [t["number"] for t in page["data"]] == [0, 1, 2]
    trial = page["data"][0]
    assert trial["id"] == good and trial["status"] == "ok" and trial["objective"] == 3.96
    assert trial["params"] == trial["config"] == {"max_num_seqs": 128}
    assert trial["timings"]["boot_s"] == 21.5 and trial["diagnosis"]["binding"] == "decode"
    metrics = trial["metrics"]
    assert metrics["p99_ttft_ms"] == 180.0 and metrics["p99_tpot_ms"] == 32.0
    assert metrics["gate_passed"] is True and metrics["request_goodput"] == 3.96
    assert set(metrics) == {
        "request_throughput", "request_goodput", "output_throughput", "p50_ttft_ms",
        "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
        "p99_itl_ms", "p99_e2el_ms", "gate_passed", "headroom", "constraints",
        "failure_message", "early_abort"}
    assert page["data"][1]["metrics"]["gate_passed"] is False
    assert page["data"][2]["status"] == "running" and page["data"][2]["metrics"]["gate_passed"] \
        is None

    ok = (await client.get(f"/api/v1/sweeps/{sweep['id']}/trials",
                           params={"status": "ok", "offset": 1, "limit": 5})).json()
    assert ok["count"] == 2 and [t["number"] for t in ok["data"]] == [1]


async def test_repeats_and_baselines_are_rows_a_client_can_tell_apart(
        client: httpx.AsyncClient, store: Store) -> None:
    sweep = await queue(client)
    first = measure(store, sweep["id"], 0, {"max_num_seqs": 128}, 3.96)
    spec = TrialSpec(run_id="r", model="Qwen/Qwen2.5-7B-Instruct", knobs={"max_num_seqs": 128},
                     workload=Workload(name="w"), slo=SLO(ttft=300, tpot=50))
    store.record_trial(sweep["id"], role="repeat", number=0, repeat=1, repeat_of=first,
                       params={"max_num_seqs": 128}, spec=spec, result=result(3.5))
    store.record_trial(sweep["id"], role="baseline", number=0, params={}, spec=spec,
                       result=result(0.0))

    every = (await client.get(f"/api/v1/sweeps/{sweep['id']}/trials")).json()
    assert [(t["role"], t["repeat"], t["repeat_of"]) for t in every["data"]] == [
        ("search", 0, None), ("repeat", 1, first), ("baseline", 0, None)]
    assert every["data"][1]["metrics"]["request_goodput"] == 3.5
    search = (await client.get(f"/api/v1/sweeps/{sweep['id']}/trials",
                               params={"role": "search"})).json()
    assert search["count"] == 1 and search["data"][0]["id"] == first
    bad = await client.get(f"/api/v1/sweeps/{sweep['id']}/trials", params={"role": "rerun"})
    assert bad.status_code == 422 and "search" in bad.text


async def test_cards(client: httpx.AsyncClient, store: Store) -> None:
    sweep = await queue(client, strategy="guided")
    store.add_card(sweep["id"], step=1, symptom="p99 TPOT near target",
                   hypothesis="fewer concurrent sequences cut decode time",
                   variable="max_num_seqs", values=[256, 128, 64], expected_direction="down",
                   evidence={"p99_tpot_ms": 48.0}, verdict="supported",
                   result={"best": 128})
    cards = (await client.get(f"/api/v1/sweeps/{sweep['id']}/cards")).json()
    assert cards["count"] == 1 and cards["data"][0]["variable"] == "max_num_seqs"
    assert cards["data"][0]["verdict"] == "supported"


async def test_unknown_ids_are_404(client: httpx.AsyncClient) -> None:
    for path in ("/api/v1/sweeps/4242", "/api/v1/sweeps/4242/trials",
                 "/api/v1/sweeps/4242/cards", "/api/v1/workloads/nope",
                 "/api/v1/workloads/nope/best"):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.json()["detail"], path
    cancel = await client.post("/api/v1/sweeps/4242/cancel", headers=WRITE)
    assert cancel.status_code == 404 and cancel.json()["detail"] == "no sweep 4242"


@pytest.mark.parametrize(("body", "field"), [
    ({"strategy": "hill-climb"}, ["body", "strategy"]),
    ({"budget": {"max_trials": 0}}, ["body", "budget", "max_trials"]),
    ({"budget": {"max_trials": 5, "max_gpus": 3}}, ["body", "budget", "max_gpus"]),
    ({"space": "no-such-space"}, ["body", "space"]),
    ({"space": "../../etc/passwd"}, ["body", "space"]),
    ({"space": "lab.yaml"}, ["body", "space"]),
    ({"workload": "/tmp/w.yaml"}, ["body", "workload"]),
    ({"workload": "no-such-workload"}, ["body", "workload"]),
    ({"slo": "ttft:fast"}, ["body", "slo"]),
    ({"mode": "fastest"}, ["body", "mode"]),
])
async def test_bad_sweep_requests_are_422_with_the_field(client: httpx.AsyncClient,
                                                         store: Store, body: dict[str, object],
                                                         field: list[str]) -> None:
    response = await client.post("/api/v1/sweeps", json=body, headers=WRITE)
    assert response.status_code == 422, response.text
    locs = [error["loc"][:len(field)] for error in response.json()["detail"]]
    assert field in locs, response.json()
    assert store.list_sweeps().count == 0


@pytest.mark.parametrize("query", [{"limit": 501}, {"limit": 0}, {"offset": -1},
                                   {"status": "sleeping"}])
async def test_bad_list_queries_are_422(client: httpx.AsyncClient,
                                        query: dict[str, int | str]) -> None:
    response = await client.get("/api/v1/sweeps", params=query)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", next(iter(query))]


async def test_bad_ids_are_422(client: httpx.AsyncClient) -> None:
    for sweep_id in ("abc", "0", str(2**40)):  # 2**40 would overflow Postgres' integer
        response = await client.get(f"/api/v1/sweeps/{sweep_id}")
        assert response.status_code == 422, sweep_id
        assert response.json()["detail"][0]["loc"] == ["path", "sweep_id"]


async def test_oversized_bodies_are_413(make_client: ClientFactory, store: Store) -> None:
    async with make_client(max_body_bytes=4096) as client:
        big = {"name": "x", "space": {"padding": "y" * 10_000}}
        response = await client.post("/api/v1/sweeps", json=big, headers=WRITE)
        assert response.status_code == 413 and "4096" in response.json()["detail"]

        async def stream() -> object:  # no Content-Length: counted as it arrives
            for _ in range(10):
                yield b"z" * 1000

        chunked = await client.post("/api/v1/sweeps", content=stream(),  # type: ignore[arg-type]
                                    headers={**WRITE, "Content-Type": "application/json"})
        assert chunked.status_code == 413
        small = await client.post("/api/v1/sweeps", json={"name": "ok"}, headers=WRITE)
        assert small.status_code == 201
    assert store.list_sweeps().count == 1


@pytest.mark.parametrize("body", [b"{not json", b'{"name": "\xff"}', b'{"a": 1}x'],
                         ids=["not-json", "not-utf8", "trailing"])
async def test_malformed_json_is_422(client: httpx.AsyncClient, body: bytes) -> None:
    for route in ("/api/v1/sweeps", "/api/v1/capacity"):
        response = await client.post(route, content=body,
                                     headers={**WRITE, "Content-Type": "application/json"})
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["type"] == "json_invalid"


async def test_a_key_given_twice_is_refused_not_overwritten(client: httpx.AsyncClient,
                                                            store: Store) -> None:
    body = (b'{"space": {"name": "dup", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "a100",'
            b' "knobs": {"max_num_seqs": {"type": "values", "values": [32, 64]},'
            b' "max_num_seqs": {"type": "values", "values": [128]}}}}')
    response = await client.post("/api/v1/sweeps", content=body,
                                 headers={**WRITE, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["type"] == "duplicate_key" and "'max_num_seqs' is given twice" in detail["msg"]
    assert store.list_sweeps().count == 0


@pytest.mark.parametrize("body", [{"name": "night\u0000"}, {"owner": "a\u0000"},
                                  {"space": {"model": "m\u0000"}}],
                         ids=["name", "owner", "inline-space"])
async def test_a_nul_is_refused_at_the_edge_and_no_error_names_the_database(
        client: httpx.AsyncClient, store: Store, body: dict[str, object]) -> None:
    response = await client.post("/api/v1/sweeps", json=body, headers=WRITE)
    assert response.status_code == 422
    text = response.text
    assert "NUL" in text
    for infrastructure in ("postgresql", "127.0.0.1", "5432", "postgres@", "sqlite"):
        assert infrastructure not in text, text
    assert store.list_sweeps().count == 0


async def test_report_renders_in_either_format_and_refuses_others(
        client: httpx.AsyncClient) -> None:
    sweep = await queue(client)
    response = await client.get(f"/api/v1/sweeps/{sweep['id']}/report", params={"format": "md"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/markdown")
    assert response.text.startswith(f"# Sweep {sweep['id']}: {sweep['name']}")
    html = await client.get(f"/api/v1/sweeps/{sweep['id']}/report")
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert html.text.lstrip().lower().startswith("<!doctype html")
    bad = await client.get(f"/api/v1/sweeps/{sweep['id']}/report", params={"format": "pdf"})
    assert bad.status_code == 422
    missing = await client.get("/api/v1/sweeps/999999/report")
    assert missing.status_code == 404, missing.text


async def test_health_and_openapi(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/v1/health")).json() == {"status": "ok", "database": "ok"}
    schema = (await client.get("/api/v1/openapi.json")).json()
    assert "/api/v1/capacity" in schema["paths"] and "/api/v1/workloads/{name}/best" in \
        schema["paths"]
    assert (await client.get("/api/v1/docs")).status_code == 200


async def test_dashboard_pages_are_served_when_installed(
        make_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with make_client() as client:
        monkeypatch.setattr(dashboard, "STATIC_DIR", tmp_path / "absent")
        missing = await client.get("/")
        assert missing.status_code == 404 and "dashboard" in missing.json()["detail"]
    (tmp_path / "index.html").write_text("<h1>workloads</h1>")
    (tmp_path / "sweep.html").write_text("<h1>sweep</h1>")
    (tmp_path / "app.js").write_text("console.log(1)")
    monkeypatch.setattr(dashboard, "STATIC_DIR", tmp_path)
    async with make_client() as client:
        assert (await client.get("/")).text == "<h1>workloads</h1>"
        page = await client.get("/sweeps/12")
        assert page.text == "<h1>sweep</h1>" and page.headers["content-type"].startswith(
            "text/html")
        assert (await client.get("/static/app.js")).text == "console.log(1)"


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"seed": -1}', ["body", "seed"]),
    (b'{"seed": 18446744073709551616}', ["body", "seed"]),  # 2**64
    (b'{"seed": 4294967296}', ["body", "seed"]),  # 2**32: past numpy's RandomState
    (b'{"budget": {"max_gpu_hours": NaN}}', ["body", "budget", "max_gpu_hours"]),
    (b'{"budget": {"max_gpu_hours": Infinity}}', ["body", "budget", "max_gpu_hours"]),
    (b'{"name": "\\ud800"}', ["body"]),
    (b'{"owner": "ops-\\udfff"}', ["body"]),
])
async def test_unrunnable_sweep_requests_are_422_and_the_next_request_still_works(
        client: httpx.AsyncClient, store: Store, raw: bytes, field: list[str]) -> None:
    response = await client.post("/api/v1/sweeps", content=raw,
                                 headers={**WRITE, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert field in [e["loc"][:len(field)] for e in response.json()["detail"]]
    assert store.list_sweeps().count == 0
    # The refusal was a whole response: the connection serves the next request.
    assert (await client.get("/api/v1/sweeps")).status_code == 200


@pytest.mark.parametrize("rps", [b"NaN", b"Infinity", b"-Infinity"])
async def test_non_finite_capacity_targets_are_422(client: httpx.AsyncClient,
                                                  rps: bytes) -> None:
    body = b'{"workload": "lab", "target_rps": ' + rps + b"}"
    response = await client.post("/api/v1/capacity", content=body,
                                 headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert ["body", "target_rps"] in [e["loc"] for e in response.json()["detail"]]


async def test_a_new_sweep_says_which_part_of_its_space_no_node_can_hold(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"space": TP_SPACE, "strategy": "grid", "budget": {"max_trials": 6}}
    undeclared = await client.post("/api/v1/sweeps", json=body, headers=WRITE)
    assert undeclared.status_code == 201 and undeclared.json()["warnings"] == []
    monkeypatch.setenv("SLOTUNE_MAX_NODE_GPUS", "4")
    declared = await client.post("/api/v1/sweeps", json=body, headers=WRITE)
    assert declared.status_code == 201
    assert declared.json()["warnings"] == [
        "tensor_parallel_size=8: needs 8 GPUs on one node; the largest node "
        "(SLOTUNE_MAX_NODE_GPUS) offers 4: those trials are recorded infeasible, never booted"]
    listed = (await client.get(f"/api/v1/sweeps/{declared.json()['id']}")).json()
    assert listed["warnings"] == []  # said when it was queued; the trials say it after
    monkeypatch.setenv("SLOTUNE_MAX_NODE_GPUS", "lots")  # the server's mistake, not the client's
    assert (await client.post("/api/v1/sweeps", json=body, headers=WRITE)).status_code == 201
