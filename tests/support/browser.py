"""A real headless Chromium and the real API for the dashboard's tests.

Driver: Selenium with Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs
them). Both come from the same Debian package version, so the driver always matches the
browser, and nothing is downloaded: the driver path is given explicitly, so Selenium
Manager never runs. Screenshots are kept under ``tests/artifacts/`` (paths printed).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.paths import REPO

__all__ = ["ARTIFACTS", "api_server", "chromium", "free_port", "get_json", "load_page",
           "screenshot"]

ARTIFACTS = REPO / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1300,2400")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def api_server(url: str, log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """The real API (``uvicorn --factory``) on a free port over ``url``, until the block
    ends: its base URL, once its health route answers; its output in ``log``."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "slotune.tuner.api.app:create_app",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO, env={**os.environ, "DATABASE_URL": url, **(env or {})}, stdout=out,
            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/v1/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the API did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def chromium(profile: Path) -> WebDriver:
    """Headless Chromium with its profile in ``profile``; the caller quits it."""
    for path in (CHROMIUM, CHROMEDRIVER):
        assert Path(path).exists(), (f"{path} is missing: apt-get install chromium "
                                     "chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


def get_json(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.load(r)


def load_page(driver: WebDriver, url: str) -> None:
    driver.get(url)
    WebDriverWait(driver, 20).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")
    error = driver.find_element(By.ID, "error").text
    assert not error, f"the page reported: {error}"


def screenshot(driver: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path
