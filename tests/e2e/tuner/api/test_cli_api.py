"""``slotune api`` and ``uvicorn --factory slotune.tuner.api.app:create_app`` as real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from slotune.tuner.api import create_app
from slotune.tuner.db import migrate
from slotune.workers.engines.process import free_port
from tests.support.api import api_env, serving, settings_for
from tests.support.api_data import TOKEN
from tests.support.postgres import PostgresDatabases

SLOTUNE = Path(sys.executable).parent / "slotune"


@pytest.mark.slow
def test_slotune_api_serves_a_migrated_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    migrate.upgrade(url)
    port = free_port()
    argv = [str(SLOTUNE), "api", "--port", str(port), "--database-url", url]
    with serving(argv, api_env(SLOTUNE_API_TOKEN=TOKEN), port) as client:
        assert client.get("/api/v1/health").json() == {"status": "ok", "database": "ok"}
        made = client.post("/api/v1/sweeps", json={"budget": {"max_trials": 2}},
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert made.status_code == 201
        assert client.get("/api/v1/sweeps").json()["count"] == 1


@pytest.mark.slow
def test_uvicorn_factory_reads_database_url(tmp_path: Path) -> None:
    """How the dashboard's browser test starts the API."""
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    migrate.upgrade(url)
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "--factory", "slotune.tuner.api.app:create_app",
            "--port", str(port)]
    with serving(argv, api_env(DATABASE_URL=url), port) as client:
        assert client.get("/api/v1/health").status_code == 200
        refused = client.post("/api/v1/sweeps", json={})
        assert refused.status_code == 403 and "SLOTUNE_API_TOKEN" in refused.json()["detail"]


@pytest.mark.slow
def test_slotune_api_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    done = subprocess.run([str(SLOTUNE), "api", "--port", str(free_port()),
                           "--database-url", url], env=api_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "slotune db upgrade" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


async def test_health_is_503_without_a_schema(api_postgres: PostgresDatabases) -> None:
    app = create_app(settings_for(api_postgres.create()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        health = await client.get("/api/v1/health")
        assert health.status_code == 503 and "slotune db upgrade" in health.json()["database"]
        sweeps = await client.get("/api/v1/sweeps")
        assert sweeps.status_code == 503 and "slotune db upgrade" in sweeps.json()["detail"]
    app.state.store.close()


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["slotune api", "uvicorn --factory"])
def test_the_access_log_never_prints_a_token_from_a_query_string(
        runner: str, tmp_path: Path) -> None:
    """Issue 38: uvicorn's access log printed ``?token=…`` verbatim. Query values whose
    names say secret are masked; the rest of the line stays as it was."""
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    migrate.upgrade(url)
    port = free_port()
    argv = ([str(SLOTUNE), "api", "--port", str(port), "--database-url", url]
            if runner == "slotune api" else
            [sys.executable, "-m", "uvicorn", "--factory", "slotune.tuner.api.app:create_app",
             "--port", str(port)])
    leaked = "sk-leaked-in-a-url-0123"
    process = subprocess.Popen(argv, env=api_env(DATABASE_URL=url), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.get("/api/v1/health")
                    break
                except httpx.TransportError:
                    assert process.poll() is None and time.monotonic() < deadline
                    time.sleep(0.2)
            client.get(f"/api/v1/sweeps?limit=5&token={leaked}&Access_Token={leaked}"
                       f"&api_key={leaked}")
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=15)[0]
    assert leaked not in output
    assert "GET /api/v1/sweeps?limit=5&token=***&Access_Token=***&api_key=*** HTTP/1.1" \
        in output, output[-2000:]
