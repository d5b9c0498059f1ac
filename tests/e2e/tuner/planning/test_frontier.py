"""The frontier as data: ``GET /api/v1/workloads/NAME/frontier`` (JSON, CSV) and
``slotune frontier``, on a real (virtual-time) capacity sweep stored in a real Postgres."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from slotune.tuner.api import create_app
from slotune.tuner.db.store import Store
from slotune.tuner.planning.frontier import CSV_FIELDS
from slotune.workers.contracts import TrialResult
from tests.support.api import settings_for
from tests.support.rescored import slotune

pytestmark = pytest.mark.slow


@pytest.fixture
async def client(swept: str) -> AsyncIterator[httpx.AsyncClient]:
    with Store(swept) as store:
        app = create_app(settings_for(swept), store=store)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            yield c


def _dominates(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a["output_tps_per_gpu"] >= b["output_tps_per_gpu"]
            and a["interactivity_tps"] >= b["interactivity_tps"] and a != b
            and (a["output_tps_per_gpu"], a["interactivity_tps"])
            != (b["output_tps_per_gpu"], b["interactivity_tps"]))


async def test_every_probe_is_a_point_the_frontier_is_undominated_and_the_winner_is_the_best(
        client: httpx.AsyncClient, swept: str) -> None:
    response = await client.get("/api/v1/workloads/lab/frontier")
    assert response.status_code == 200, response.text
    body = response.json()
    with Store(swept) as store:
        [sweep] = store.list_sweeps().data
        trials = [t for t in store.list_trials(sweep.id, status="ok", role="any").data
                  if t.role != "baseline"]
        [best] = store.best_for_workload("lab")
    probes = {(t.id, p.request_rate) for t in trials
              for p in TrialResult.model_validate(t.result).capacity_probes}
    points = body["points"]
    assert {(p["trial_id"], p["request_rate"]) for p in points} == probes
    assert body["slo_text"] == "p99 ttft ≤ 300 ms, tpot ≤ 50 ms"
    assert body["min_interactivity_tps"] == 20.0  # TPOT ≤ 50 ms is 20 tokens/s per user
    assert body["price_per_gpu_hour"] is not None and all(
        p["tokens_per_dollar"] and p["tokens_per_dollar"] > p["output_tps_per_gpu"]
        for p in points)
    # A point meets the SLO only where its stored p99s do.
    for p in points:
        if p["meets_slo"] == "pass":
            assert p["tpot_ms"] <= 50 and p["ttft_ms"] <= 300
    # The frontier: no point beats a frontier point on both axes; every other one is beaten.
    drawn = [p for p in points if p["interactivity_tps"] is not None]
    front = [p for p in drawn if p["on_frontier"]]
    assert front and all(not any(_dominates(o, f) for o in drawn) for f in front)
    assert all(any(_dominates(o, p) for o in drawn) for p in drawn if not p["on_frontier"])
    # The winner: the best-config view's trial, at the rate it carried.
    [winner] = [p for p in points if p["winner"]]
    assert body["winner"] == winner and winner["meets_slo"] == "pass"
    # (the highest rate its probes showed to pass: its interval's lower end)
    assert winner["trial_id"] == best.trial_id and winner["request_rate"] == best.capacity_low
    # The capacity grid: the SLO's own cell carries at least the rate the view's winner
    # was shown to carry, and a looser limit never carries less.
    grid = body["capacity"]
    i, j = grid["ttft_ms"].index(300), grid["tpot_ms"].index(50)
    assert best.capacity_low is not None
    assert grid["per_gpu"][i][j] >= best.capacity_low / best.gpus  # what its probes passed
    for row in grid["per_gpu"]:
        cells = [c or 0 for c in row]
        assert cells == sorted(cells)
    columns = list(zip(*grid["per_gpu"], strict=True))
    assert all([c or 0 for c in col] == sorted(c or 0 for c in col) for col in columns)


async def test_csv_by_format_or_accept_and_from_the_cli(client: httpx.AsyncClient,
                                                        swept: str) -> None:
    as_json = (await client.get("/api/v1/workloads/lab/frontier")).json()
    by_query = await client.get("/api/v1/workloads/lab/frontier", params={"format": "csv"})
    by_accept = await client.get("/api/v1/workloads/lab/frontier",
                                 headers={"Accept": "text/csv"})
    assert by_query.status_code == by_accept.status_code == 200
    assert by_query.headers["content-type"].startswith("text/csv")
    assert by_query.text == by_accept.text
    rows = list(csv.DictReader(io.StringIO(by_query.text)))
    assert tuple(rows[0]) == CSV_FIELDS and len(rows) == len(as_json["points"])
    assert [float(r["output_tps_per_gpu"]) for r in rows] == [
        p["output_tps_per_gpu"] for p in as_json["points"]]
    cli = slotune("frontier", "-w", "lab", "--database-url", swept)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == by_query.text


@pytest.mark.parametrize(("params", "status", "says"), [
    ({"format": "xml"}, 422, "'json' or 'csv'"),
    ({"slo": "fast"}, 422, "not an SLO"),
    ({"gpu": "h100-sxm"}, 404, "no capacity sweep of workload 'lab'"),
])
async def test_bad_questions_get_a_4xx_that_says_what_is_right(
        client: httpx.AsyncClient, params: dict[str, str], status: int, says: str) -> None:
    response = await client.get("/api/v1/workloads/lab/frontier", params=params)
    assert response.status_code == status and says in response.text, response.text
    unknown = await client.get("/api/v1/workloads/nope/frontier")
    assert unknown.status_code == 404 and "nope" in unknown.text
