"""Security: secrets never land in logs, the database or reports; writes need a token;
nothing runs through a shell.

The secret-leak tests run what users run — ``slotune sweep run`` (virtual executor, a
SQLite file, and a Postgres URL carrying a password) and ``slotune trial run`` on the
simulated engine — with ``HF_TOKEN``, ``SLOTUNE_API_TOKEN`` and a database password set,
then search every byte they left behind (stdout/stderr, the database, the report files,
the engine logs) for the secret values.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql
from pydantic import SecretStr
from sqlalchemy import create_engine, inspect, text

from tuner.api import create_app
from tuner.db import migrate
from tuner.db.store import Store
from tuner.settings import ApiSettings, DatabaseSettings, Settings

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
REPO = Path(__file__).resolve().parents[1]
ADMIN_URL = os.environ.get("SLOTUNE_TEST_POSTGRES_URL",
                           "postgresql://postgres@127.0.0.1:5432/postgres")

HF_SECRET = "hf_SeCrEtHfToKeN4242"
API_SECRET = "api-SeCrEt-ToKeN-7777"
DB_PASSWORD = "dbPaSsWoRd9191"
SECRETS = (HF_SECRET, API_SECRET, DB_PASSWORD)


def secret_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SLOTUNE_HOME")}
    env.update(HF_TOKEN=HF_SECRET, SLOTUNE_API_TOKEN=API_SECRET, SLOTUNE_HOME=str(tmp),
               TMPDIR=str(tmp), SLOTUNE_DATABASE_URL=f"postgresql://u:{DB_PASSWORD}@nowhere/x")
    return env


def assert_no_secret(where: str, data: bytes | str) -> None:
    blob = data if isinstance(data, bytes) else data.encode()
    for secret in SECRETS:
        assert secret.encode() not in blob, f"{secret!r} leaked into {where}"


def assert_tree_clean(root: Path) -> int:
    """Every regular file under ``root`` free of secrets; returns how many were read."""
    count = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert_no_secret(str(path), path.read_bytes())
            count += 1
    return count


def table_dump(url: str) -> str:
    """Every row of every table as text (for a server database there is no file to grep)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            parts = []
            for table in inspect(conn).get_table_names():
                rows = conn.execute(text(f'SELECT * FROM "{table}"')).fetchall()
                parts.append(f"{table}: {rows!r}")
            return "\n".join(parts)
    finally:
        engine.dispose()


# --- no shell ---------------------------------------------------------------------------

SHELL_PATTERNS = re.compile(r"shell\s*=\s*True|os\.system\s*\(|os\.popen\s*\(|"
                            r"create_subprocess_shell|commands\.getoutput")


def test_no_shell_anywhere_in_the_code() -> None:
    """Engines, workers and tools run argv lists: nothing goes through a shell."""
    files = [p for folder in ("tuner", "workers", "benchmarks", "migrations", "docker")
             for p in (REPO / folder).rglob("*.py")]
    files += [p for p in (REPO / "tests").rglob("*.py") if p.name != "test_security.py"]
    assert len(files) > 50
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in files
                 for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
                 if SHELL_PATTERNS.search(line)]
    assert offenders == []


# --- writes need a token ------------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    migrate.upgrade(url)
    return url


async def test_api_writes_need_the_token_and_reads_do_not_echo_it(sqlite_url: str) -> None:
    settings = Settings(database=DatabaseSettings(url=sqlite_url),
                        api=ApiSettings(token=SecretStr(API_SECRET)))
    with Store(sqlite_url) as store:
        app = create_app(settings, store=store)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            for headers in ({}, {"Authorization": "Bearer wrong"},
                            {"Authorization": f"Basic {API_SECRET}"}):
                response = await client.post("/api/v1/sweeps", json={}, headers=headers)
                assert response.status_code in (401, 403)
                assert_no_secret("an API refusal", response.text)
            ok = await client.post("/api/v1/sweeps", json={},
                                   headers={"Authorization": f"Bearer {API_SECRET}"})
            assert ok.status_code == 201
            for path in ("/api/v1/sweeps", "/api/v1/openapi.json", "/api/v1/health"):
                assert_no_secret(path, (await client.get(path)).text)
        assert store.list_sweeps().count == 1
    assert_no_secret("settings repr", repr(settings) + str(settings.model_dump()))


# --- secrets stay out of output, database, reports and engine logs ------------------------


def test_sweep_leaves_no_secret_in_output_database_or_report(tmp_path: Path) -> None:
    db = tmp_path / "slotune.db"
    proc = subprocess.run(
        [SLOTUNE, "sweep", "run", "--executor", "virtual", "--trials", "3",
         "--confirm-top", "0", "--database-url", f"sqlite:///{db}",
         "--report-dir", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=120, env=secret_env(tmp_path),
        stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 3), proc.stderr
    assert_no_secret("sweep output", proc.stdout + proc.stderr)
    assert db.stat().st_size > 0 and len(list((tmp_path / "report").iterdir())) == 2
    assert assert_tree_clean(tmp_path) >= 3  # database, both reports, anything else


@pytest.fixture
def postgres_url_with_password() -> Iterator[str]:
    name = f"slotune_security_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base = ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://postgres@",
                                               f"postgresql://postgres:{DB_PASSWORD}@")
    yield f"{base}/{name}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                     .format(sql.Identifier(name)))


@pytest.mark.slow
def test_database_password_never_printed_or_stored(tmp_path: Path,
                                                   postgres_url_with_password: str) -> None:
    """The server trusts any password here, so the URL's password goes everywhere a URL
    goes (progress line, Optuna storage, sweep rows) — and must show up nowhere."""
    url = postgres_url_with_password
    assert DB_PASSWORD in url
    proc = subprocess.run(
        [SLOTUNE, "sweep", "run", "--executor", "virtual", "--trials", "3",
         "--confirm-top", "0", "--database-url", url, "--report-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120, env=secret_env(tmp_path),
        stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 3), proc.stderr
    assert "postgresql://postgres:***@" in proc.stdout  # shown, password redacted
    assert_no_secret("sweep output", proc.stdout + proc.stderr)
    dump = table_dump(url)
    assert "sweeps" in dump and "trial" in dump
    assert_no_secret("the Postgres tables", dump)
    assert_tree_clean(tmp_path)
    status = subprocess.run([SLOTUNE, "sweep", "status", "--database-url", url],
                            capture_output=True, text=True, timeout=60,
                            env=secret_env(tmp_path), stdin=subprocess.DEVNULL)
    assert status.returncode == 0
    assert_no_secret("sweep status", status.stdout + status.stderr)


@pytest.mark.slow
def test_trial_on_the_sim_engine_leaves_no_secret_in_result_or_engine_log(
        tmp_path: Path) -> None:
    proc = subprocess.run(
        [SLOTUNE, "trial", "run", "--space", "lab", "--mode", "goodput", "--request-rate", "4",
         "--num-prompts", "20", "--time-scale", "2", "--json"],
        capture_output=True, text=True, timeout=180, env=secret_env(tmp_path),
        stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"status": "ok"' in proc.stdout
    assert_no_secret("trial output", proc.stdout + proc.stderr)
    logs = list(tmp_path.rglob("engine.log"))
    assert logs, "the engine log lives in the trial's work directory under TMPDIR"
    assert any("GPU KV cache size" in p.read_text() for p in logs)
    assert_tree_clean(tmp_path)
