"""The frontier as a picture, in a real headless Chromium: the dashboard's sweep page and
the report, after a real (virtual-time) capacity sweep of the lab space.

Each chart is checked against the API's own numbers (points per series, the SLO line,
the winner's mark) and screenshotted under ``tests/artifacts/`` (paths printed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import api_server, get_json, load_page, screenshot
from tests.support.rescored import slotune

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swept_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The API over a SQLite file holding one finished capacity sweep: (base URL, the
    sweep's HTML report)."""
    folder = tmp_path_factory.mktemp("frontier")
    url = f"sqlite:///{folder / 'slotune.db'}"
    run = slotune("sweep", "run", "--executor", "virtual", "--trials", "5", "--database-url",
                  url, "--report-dir", str(folder / "report"))
    assert run.returncode == 0, run.stdout + run.stderr
    with api_server(url, folder / "uvicorn.log") as base:
        yield base, folder / "report" / "sweep-1.html"


def _check_chart(driver: WebDriver, frontier: dict[str, Any]) -> None:
    """The per-GPU frontier chart drew what the API says, with units, the SLO and the
    winner marked."""
    svg = driver.find_element(By.CSS_SELECTOR, 'svg[data-chart="frontier"]')
    assert svg.find_element(By.CSS_SELECTOR, "text.xlabel").text == "output tokens/s per GPU"
    assert svg.find_element(By.CSS_SELECTOR, "text.ylabel").text == \
        "output tokens/s per user (1000 ÷ p99 TPOT)"
    drawn = [p for p in frontier["points"] if p["interactivity_tps"] is not None]
    for name, verdict in (("meets the SLO", "pass"), ("breaks it", "fail")):
        shown = svg.find_elements(By.CSS_SELECTOR, f'g[data-series="{name}"] circle.pt')
        assert len(shown) == sum(p["meets_slo"] == verdict for p in drawn), name
    line = svg.find_element(By.CSS_SELECTOR, 'g[data-series="Pareto frontier"] polyline')
    assert len((line.get_attribute("points") or "").split()) == sum(p["on_frontier"]
                                                                    for p in drawn)
    ref = svg.find_element(By.CSS_SELECTOR, "line.ref")
    assert float(ref.get_attribute("data-y") or "nan") == frontier["min_interactivity_tps"] == 20
    assert "TPOT ≤ 50 ms" in svg.find_element(By.CSS_SELECTOR, "text.ref-label").text
    [mark] = svg.find_elements(By.CSS_SELECTOR, 'g[data-series="winner"] circle.pt')
    winner = frontier["winner"]
    assert float(mark.get_attribute("data-y") or "nan") == pytest.approx(
        winner["interactivity_tps"])
    assert float(mark.get_attribute("data-x") or "nan") == pytest.approx(
        winner["output_tps_per_gpu"])
    other = svg.find_element(By.CSS_SELECTOR, 'g[data-series="meets the SLO"] circle.pt')
    assert mark.size["width"] > 1.5 * other.size["width"] > 0  # drawn, and stands out
    assert svg.find_element(By.CSS_SELECTOR, 'g[data-series="winner"] text.pt-label').text \
        == "winner"


def test_the_dashboard_draws_the_frontier_with_the_slo_and_the_winner(
        swept_api: tuple[str, Path], browser: WebDriver) -> None:
    base, _ = swept_api
    sweep = get_json(base, "/api/v1/sweeps/1")
    frontier = get_json(base, f"/api/v1/workloads/{sweep['workload']}/frontier")
    load_page(browser, f"{base}/sweeps/1")
    WebDriverWait(browser, 20).until(lambda d: d.find_element(
        By.ID, "frontier").get_attribute("data-state") == "loaded")
    _check_chart(browser, frontier)
    assert browser.find_elements(By.CSS_SELECTOR, 'svg[data-chart="frontier-dollar"]')
    grid = frontier["capacity"]
    i, j = grid["ttft_ms"].index(300), grid["tpot_ms"].index(50)
    cell = browser.find_element(By.CSS_SELECTOR, '#frontier tr[data-ttft="300"] td[data-tpot="50"]')
    assert float(cell.get_attribute("data-value") or "nan") == grid["per_gpu"][i][j]
    browser.execute_script("document.getElementById('frontier').scrollIntoView()")
    assert screenshot(browser, "dashboard-frontier.png").stat().st_size > 10_000


def test_the_report_draws_the_same_frontier(swept_api: tuple[str, Path],
                                            browser: WebDriver) -> None:
    base, report = swept_api
    frontier = get_json(base, "/api/v1/workloads/lab/frontier")
    browser.get(report.as_uri())
    WebDriverWait(browser, 20).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, 'svg[data-chart="frontier"]'))
    _check_chart(browser, frontier)
    browser.execute_script("document.getElementById('frontier').scrollIntoView()")
    assert screenshot(browser, "report-frontier.png").stat().st_size > 10_000
