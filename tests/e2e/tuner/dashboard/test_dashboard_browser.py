"""The dashboard in a real headless Chromium, against the real API on a real database.

A migrated SQLite database is filled through the store with a finished sweep
(:mod:`tests.support.sweep_data`), the API runs as ``uvicorn --factory
slotune.tuner.api.app:create_app`` on a free port, and Chromium loads ``/`` and ``/sweeps/{id}``:
the workload and its best config are shown with the API's own numbers, the charts drew
their points, the trial table has a row per trial. Screenshots are kept under
``tests/artifacts/`` (paths printed).

Driver: Selenium with Debian's Chromium and its driver (:mod:`tests.support.browser`).
Playwright would need its own pinned browser build (or a CDP-version gamble against
Debian's) and a bundled Node driver for no gain here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from slotune.tuner.db import migrate
from slotune.tuner.db.store import Store
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from slotune.workers.contracts import EngineFacts, TrialResult
from tests.support.browser import api_server, get_json, load_page, screenshot
from tests.support.sweep_data import LAB_4RPS, WORKLOAD, SweepData, populate_finished_sweep

pytestmark = pytest.mark.slow

TWIN_PROGRESS = {
    "candidates": 800, "screened": 800, "booted": 2, "band": 0.12, "gpu": "rtx4090",
    "factors": {"compute": 0.8, "memory": 1.1, "overhead": 1.3},
    "warm_start": "sweep 1's calibration (4 trials, residual 0.031, engine slotune-sim)",
    "fit": {"residual": 0.042, "trials": ["s3-t0-a1", "s3-t1-a1"], "probes": 6,
            "fitted": ["compute", "overhead"]},
    "calls": [
        {"number": 0, "params": {"max_num_seqs": 64}, "predicted": 4.1, "band": 0.5,
         "measured": 3.2, "status": "ok", "error": 0.28125},
        {"number": 1, "params": {"max_num_seqs": 256}, "predicted": 3.9, "band": 0.12,
         "measured": 3.95, "status": "ok", "error": 0.0},
    ],
    "ranking": [{"params": {"max_num_seqs": 128}, "predicted": 3.7},
                {"params": {"max_num_seqs": 32}, "predicted": 2.1}],
}
"""What a twin sweep stores in its progress (the shape TwinStrategy.summary writes)."""


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SweepData]]:
    """The API on a database holding one finished sweep: (base URL, what was stored)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'slotune.db'}"
    migrate.upgrade(url)
    with Store(url) as store:
        data = populate_finished_sweep(store)
        # and one that waits for GPUs other sweeps of its coordinator hold
        waiting = queue_sweep(store, SweepRequest(space="lab", mode="goodput",
                                                  workload=LAB_4RPS,
                                                  budget=SweepBudget(max_trials=2)),
                              claimed_by="coordinator-w")
        _measure(store, "lab-20rps", [(0.0, 1.4, "slotune-sim"), (0.0, 1.2, "slotune-sim")])
        _measure(store, "chat-upgraded", [(5.0, 0.6, "0.30.0"), (3.0, 0.9, "0.33.0")])
        store.update_sweep(waiting.id, lease=waiting.lease, progress={
            "phase": "search", "trials": 0, "done": 0, "running": 0, "failed": 0,
            "infeasible": 0, "waiting": {"for": "2 GPU(s), held by other sweeps of "
                                                "coordinator coordinator-w",
                                         "since": "2026-12-01T10:00:00+00:00"}})
        twin = queue_sweep(store, SweepRequest(space="lab", mode="goodput", workload=LAB_4RPS,
                                               strategy="twin",
                                               budget=SweepBudget(max_trials=2)),
                           claimed_by="coordinator-t")
        store.update_sweep(twin.id, lease=twin.lease, progress={
            "phase": "search", "trials": 2, "done": 2, "running": 0, "failed": 0,
            "infeasible": 0, "twin": TWIN_PROGRESS})
    with api_server(url, tmp_path_factory.mktemp("uvicorn") / "uvicorn.log") as base:
        yield base, data


def _measure(store: Store, workload: str, runs: list[tuple[float, float, str]]) -> None:
    """A sweep of ``workload`` (at 20 req/s) whose trials score (objective, headroom, engine
    version) in order."""
    spec = {"name": workload, "dataset": {"kind": "random", "input_len": 512,
                                          "output_len": 128},
            "arrivals": {"request_rate": 20}, "num_prompts": 100}
    sweep = queue_sweep(store, SweepRequest(
        space="lab", mode="goodput", workload=spec,
        budget=SweepBudget(max_trials=len(runs))), claimed_by="coordinator-m")
    for number, (objective, headroom, version) in enumerate(runs):
        trial = store.start_trial(sweep.id, number=number, params={"max_num_seqs": 64 << number},
                                  lease=sweep.lease)
        store.finish_trial(trial.id, TrialResult(
            run_id=f"t{number}", status="ok", objective=objective, headroom=headroom,
            gate_passed=objective > 0, engine=EngineFacts(engine_version=version)),
            lease=sweep.lease)


def _cell(row: Any, field: str) -> Any:
    return row.find_element(By.CSS_SELECTOR, f'[data-field="{field}"]')


def test_index_shows_the_workload_and_its_best_config(api: tuple[str, SweepData],
                                                      browser: WebDriver) -> None:
    base, data = api
    best = get_json(base, f"/api/v1/workloads/{WORKLOAD}/best")["data"]
    assert len(best) == 1 and best[0]["trial_id"] == data.winner_id
    load_page(browser, base + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, f'#workloads tr[data-workload="{WORKLOAD}"]')
    assert len(rows) == 1
    row = rows[0]
    assert row.get_attribute("data-trial-id") == str(data.winner_id)
    assert _cell(row, "model").text == best[0]["model"]
    assert _cell(row, "gpu").text == best[0]["gpu"]
    assert "TTFT ≤ 300 ms" in _cell(row, "slo").text
    objective = _cell(row, "objective")
    assert objective.text == f"{best[0]['objective']:.3f}"
    assert float(objective.get_attribute("data-value") or "nan") == best[0]["objective"]
    assert _cell(row, "gpus").text == str(best[0]["gpus"])
    assert _cell(row, "capacity_per_gpu").text == (
        "—" if best[0]["capacity_per_gpu"] is None else f"{best[0]['capacity_per_gpu']:.3f}")
    assert _cell(row, "confirmed").text == "yes"
    assert _cell(row, "vllm_command").text == best[0]["vllm_command"]
    sweeps = browser.find_elements(By.CSS_SELECTOR, f'#sweeps tr[data-sweep-id="{data.sweep_id}"]')
    assert len(sweeps) == 1
    assert _cell(sweeps[0], "status").text == "done"
    progress = get_json(base, f"/api/v1/sweeps/{data.sweep_id}")["progress"]
    assert f"done {progress['done']}" in _cell(sweeps[0], "progress").text
    assert screenshot(browser, "dashboard-index.png").stat().st_size > 10_000


def test_sweep_page_shows_progress_charts_trials_and_cards(api: tuple[str, SweepData],
                                                          browser: WebDriver) -> None:
    base, data = api
    sweep = get_json(base, f"/api/v1/sweeps/{data.sweep_id}")
    trials = get_json(base, f"/api/v1/sweeps/{data.sweep_id}/trials?limit=500")["data"]
    cards = get_json(base, f"/api/v1/sweeps/{data.sweep_id}/cards")["data"]
    load_page(browser, f"{base}/sweeps/{data.sweep_id}")
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-sweep-status") == "done"

    def stat(name: str) -> str:
        return str(browser.find_element(
            By.CSS_SELECTOR, f'[data-stat="{name}"] .value').get_attribute("data-value"))

    for name in ("done", "running", "failed", "infeasible"):
        assert stat(name) == str(sweep["progress"][name])
    assert float(stat("best_objective")) == sweep["progress"]["best_objective"]
    # the winner box: the confirmed trial, with the API's numbers
    winner = next(t for t in trials if t["id"] == data.winner_id)
    box = browser.find_element(By.CSS_SELECTOR, f'#winner [data-trial-id="{data.winner_id}"]')
    assert _cell(box, "objective").text == f"{winner['objective']:.3f}"
    assert _cell(box, "p99_ttft_ms").text == f"{winner['metrics']['p99_ttft_ms']:.1f}"
    assert _cell(box, "vllm_command").text.startswith("vllm serve Qwen/Qwen2.5-7B-Instruct ")
    assert f"--max-num-seqs {winner['config']['max_num_seqs']}" in _cell(box, "vllm_command").text
    # one table row per trial, numbers as the API gave them, failures with their reason
    rows = {r.get_attribute("data-trial-id"): r
            for r in browser.find_elements(By.CSS_SELECTOR, "#trials tr[data-trial-id]")}
    assert set(rows) == {str(t["id"]) for t in trials}
    for t in trials:
        row = rows[str(t["id"])]
        assert _cell(row, "status").text == t["status"]
        if t["objective"] is not None:
            assert float(_cell(row, "objective").get_attribute("data-value") or "nan") \
                == t["objective"]
            assert _cell(row, "objective").text == f"{t['objective']:.3f}"
        goodput = t["metrics"]["request_goodput"]
        if goodput is not None:
            assert _cell(row, "request_goodput").text == f"{goodput:.3f}"
    oom = next(t for t in trials if t["failure_class"] == "oom")
    assert "CUDA out of memory" in _cell(rows[str(oom["id"])], "failure").text
    # charts: an SVG per knob and metric, one point per measured trial, SLO lines
    measured = [t for t in trials if t["status"] == "ok"]
    for chart in ("goodput-vs-max_num_seqs", "p99-ttft-vs-max_num_batched_tokens",
                  "p99-tpot-vs-max_num_seqs", "pareto-ttft"):
        svg = browser.find_element(By.CSS_SELECTOR, f'svg[data-chart="{chart}"]')
        points = svg.find_elements(By.CSS_SELECTOR, 'g[data-series="trials"] circle.pt')
        assert len(points) == len(measured), chart
        assert points[0].size["width"] > 0  # drawn, not just present
    ttft = browser.find_element(By.CSS_SELECTOR, 'svg[data-chart="p99-ttft-vs-max_num_seqs"]')
    assert ttft.find_element(By.CSS_SELECTOR, "line.ref").get_attribute("data-y") == "300"
    ys = sorted(float(p.get_attribute("data-y") or "nan") for p in
                ttft.find_elements(By.CSS_SELECTOR, "circle.pt"))
    assert ys == sorted(t["metrics"]["p99_ttft_ms"] for t in measured)
    # the experiment cards
    shown = browser.find_elements(By.CSS_SELECTOR, "#cards .card")
    assert len(shown) == len(cards) == 2
    assert cards[0]["hypothesis"] in shown[0].text and "supported" in shown[0].text
    # a card is a form (the nine fields) with a row per value tried, not JSON
    fields = [dt.text for dt in shown[0].find_elements(By.CSS_SELECTOR, "dt")]
    assert {"controls", "stop condition", "rollback", "conclusion", "values tried"} <= set(fields)
    assert "early abort" in shown[0].text and "re-measure it" in shown[0].text
    value_rows = shown[0].find_elements(By.CSS_SELECTOR, "tr[data-value]")
    assert [r.get_attribute("data-value") for r in value_rows] == [
        str(v["value"]) for v in cards[0]["result"]["results"]]
    assert "{" not in shown[0].text
    assert "rejected" in shown[1].text
    assert screenshot(browser, "dashboard-sweep.png").stat().st_size > 10_000


def test_a_waiting_sweep_says_what_it_waits_for_and_since_when(api: tuple[str, SweepData],
                                                                browser: WebDriver) -> None:
    base, _ = api
    running = [s for s in get_json(base, "/api/v1/sweeps?status=running")["data"]
               if s["claimed_by"] == "coordinator-w"]
    assert len(running) == 1
    load_page(browser, f"{base}/sweeps/{running[0]['id']}")
    line = browser.find_element(By.CSS_SELECTOR, '[data-field="waiting"]').text
    assert line == ("Waiting for 2 GPU(s), held by other sweeps of coordinator coordinator-w "
                    "since 2026-12-01T10:00:00+00:00")


def test_a_twin_sweep_shows_predicted_against_measured_and_its_ranking(
        api: tuple[str, SweepData], browser: WebDriver) -> None:
    base, _ = api
    twin = [s for s in get_json(base, "/api/v1/sweeps?status=running")["data"]
            if s["strategy"] == "twin"]
    assert len(twin) == 1
    stored = twin[0]["progress"]["twin"]
    load_page(browser, f"{base}/sweeps/{twin[0]['id']}")
    panel = browser.find_element(By.ID, "twin")
    booted = panel.find_element(By.CSS_SELECTOR, '[data-stat="twin_booted"] .value')
    assert booted.text == "2" and booted.get_attribute("data-value") == str(stored["booted"])
    tables = panel.find_elements(By.TAG_NAME, "table")
    calls = tables[0].find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(calls) == len(stored["calls"])
    for row, call in zip(calls, stored["calls"], strict=True):
        assert float(_cell(row, "predicted").get_attribute("data-value")) == call["predicted"]
        assert float(_cell(row, "measured").get_attribute("data-value")) == call["measured"]
        assert float(_cell(row, "error").get_attribute("data-value")) == call["error"]
    ranked = tables[1].find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [float(_cell(r, "predicted").get_attribute("data-value")) for r in ranked] == [
        r["predicted"] for r in stored["ranking"]]
    calibration = panel.find_element(By.CSS_SELECTOR, '[data-field="twin_calibration"]').text
    assert "compute ×0.800" in calibration and "sweep 1's calibration" in calibration


def test_index_says_where_nothing_meets_the_slo_and_marks_a_stale_best(
        api: tuple[str, SweepData], browser: WebDriver) -> None:
    base, _ = api
    why = get_json(base, "/api/v1/workloads/lab-20rps/best")
    assert why["data"] == [] and len(why["without_passing"]) == 1
    load_page(browser, base + "/")
    [row] = browser.find_elements(By.CSS_SELECTOR, '#workloads tr[data-workload="lab-20rps"]')
    assert row.get_attribute("data-no-passing") == "true"
    assert not row.get_attribute("data-trial-id")  # not shown as a winner
    text = _cell(row, "no_passing").text
    assert text == why["without_passing"][0]["reason"]
    assert text.startswith("no configuration meets the SLO at 20 req/s (2 measured)")
    assert "missed its worst SLO target by 20%" in text  # the closest: 1.2x its target
    assert _cell(row, "closest_command").text.startswith("vllm serve ")
    [stale] = browser.find_elements(By.CSS_SELECTOR,
                                    '#workloads tr[data-workload="chat-upgraded"]')
    assert _cell(stale, "stale").text.strip() == "stale"
    assert "0.30.0" in (_cell(stale, "stale").get_attribute("title") or "")


READ_TOKEN = "read-token-for-the-browser-0123"


@pytest.fixture(scope="module")
def guarded_api(tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[str, SweepData, Path]]:
    """The API with SLOTUNE_API_READ_TOKEN set: (base URL, what was stored, its log)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('guarded') / 'slotune.db'}"
    migrate.upgrade(url)
    with Store(url) as store:
        data = populate_finished_sweep(store)
    log = tmp_path_factory.mktemp("uvicorn-guarded") / "uvicorn.log"
    with api_server(url, log, env={"SLOTUNE_API_READ_TOKEN": READ_TOKEN}) as base:
        yield base, data, log


def _token_note(driver: WebDriver, says: str) -> None:
    WebDriverWait(driver, 20).until(
        lambda d: says in d.find_element(By.ID, "token-note").text)


def test_with_a_read_token_the_dashboard_asks_for_it_and_sends_it(
        guarded_api: tuple[str, SweepData, Path], browser: WebDriver) -> None:
    """Issue 38: with a read token configured the dashboard showed "HTTP 401" and
    nothing else. It asks for the token, keeps it in the tab, sends it as a bearer
    header; a token in the page's fragment works too and leaves the address bar."""
    base, data, log = guarded_api
    browser.get(base + "/")
    _token_note(browser, "kept in this tab only")
    assert "HTTP 401" in browser.find_element(By.ID, "error").text
    field = browser.find_element(By.ID, "read-token")
    field.send_keys("not-the-token")
    browser.find_element(By.CSS_SELECTOR, "#token-form button").click()
    _token_note(browser, "was refused")
    browser.find_element(By.ID, "read-token").send_keys(READ_TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#token-form button").click()
    WebDriverWait(browser, 20).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")
    assert browser.find_elements(By.CSS_SELECTOR, f'#workloads tr[data-workload="{WORKLOAD}"]')
    assert not browser.find_elements(By.ID, "token-form")
    load_page(browser, f"{base}/sweeps/{data.sweep_id}")  # the tab keeps the token
    screenshot(browser, "dashboard-read-token.png")

    browser.execute_script("sessionStorage.clear()")
    load_page(browser, f"{base}/#token={READ_TOKEN}")
    assert READ_TOKEN not in browser.current_url
    assert browser.find_elements(By.CSS_SELECTOR, f'#workloads tr[data-workload="{WORKLOAD}"]')
    assert READ_TOKEN not in log.read_text()  # never in a URL the server saw
