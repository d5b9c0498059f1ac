"""Security: secrets never land in logs, the database or reports; writes need a token;
nothing runs through a shell.

The secret-leak tests run what users run — ``slotune sweep run`` (virtual executor, a
SQLite file, and a Postgres URL carrying a password) and ``slotune trial run`` on the
simulated engine — with ``HF_TOKEN``, ``SLOTUNE_API_TOKEN`` and a database password set,
then search every byte they left behind (stdout/stderr, the database, the report files,
the engine logs) for the secret values.
"""

from __future__ import annotations

import json
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

from slotune.tuner.api import create_app
from slotune.tuner.db import migrate
from slotune.tuner.db.store import Store
from slotune.tuner.settings import ApiSettings, DatabaseSettings, Settings
from tests.support.paths import REPO

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
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
    files = [p for folder in ("slotune", "benchmarks", "migrations", "docker")
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


# --- the trust boundary: an API client names data, never code or a server path ----------
#
# The attacker holds the write token (or nothing); the server's files, the commands it
# runs and the secrets it was given must stay the operator's. What an operator registers
# for clients (SLOTUNE_ENGINE_BINARIES, SLOTUNE_QUALITY_COMMANDS, SLOTUNE_DATA_DIRS) is
# reached by name.

WRITE_TOKEN = "trust-boundary-token-31c4"
WRITE = {"Authorization": f"Bearer {WRITE_TOKEN}"}
SHADOW_LINE = "root:$6$SeCrEtShAdOwHaSh:19000:0:99999:7:::"
SECRET_KEY = "db_password_SeCrEtYaMlKeY"
API_KEY = "sk-SeCrEtEnGiNeKeY-8088"


def small_space(**changes: object) -> dict[str, object]:
    """A sweepable simulated space (seconds in virtual time), with ``changes`` over it."""
    space: dict[str, object] = {
        "name": "trust", "engine": "sim", "model": "Qwen/Qwen2.5-7B-Instruct",
        "gpu": "rtx4090", "fixed": {"max_model_len": 4096},
        "knobs": {"max_num_seqs": {"type": "values", "values": [32, 64], "default": 64}},
        "workload": {"name": "trust-w", "dataset": {"kind": "random", "input_len": 256,
                                                    "output_len": 32},
                     "arrivals": {"request_rate": 4}, "num_prompts": 40},
        "slo": "ttft:300,tpot:50", "lossy": {"quantization": {"values": []}},
    }
    space.update(changes)
    return space


def vllm_space(**changes: object) -> dict[str, object]:
    return small_space(**{"engine": "vllm", "model": "facebook/opt-125m", "gpu": "h100-sxm",
                          **changes})


@pytest.fixture
def server_files(tmp_path: Path) -> Path:
    """Files on the server a client must never get at: a shadow-like file, a YAML of
    secrets, a device-file-shaped YAML and a model directory."""
    root = tmp_path / "server"
    (root / "models" / "llama").mkdir(parents=True)
    (root / "shadow").write_text(f"{SHADOW_LINE}\ndaemon:*:19000:0:99999:7:::\n")
    (root / "secrets.yaml").write_text(f"{SECRET_KEY}: hunter2\nother_key: x\n")
    (root / "device.yaml").write_text(f"{SECRET_KEY}: 1\n")
    (root / "trace.jsonl").write_text(f'"{SHADOW_LINE}"\n')
    (root / "models" / "llama" / "config.json").write_text('{"model_type": "llama"}')
    return root


def assert_nothing_of_the_server(text: str, root: Path, asked: object = None) -> None:
    """No line of a server file, no key of its YAML, and no server path but the ones the
    client gave itself (``asked``: the request's body, whose text may be echoed)."""
    for leak in (SHADOW_LINE, "SeCrEtShAdOw", SECRET_KEY, "hunter2"):
        assert leak not in text, f"{leak!r} leaked: {text[:2000]}"
    for given in sorted(_strings(asked), key=len, reverse=True):
        text = text.replace(json.dumps(given)[1:-1], "").replace(given, "")
    for path in (str(root), str(root.resolve())):
        assert path not in text, f"{path!r} leaked: {text[:2000]}"


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def trusted_settings(url: str, **trust: object) -> Settings:
    from slotune.tuner.settings import TrustSettings

    return Settings(database=DatabaseSettings(url=url),
                    api=ApiSettings(token=SecretStr(WRITE_TOKEN)),
                    trust=TrustSettings(**trust))


def _reads_server_files(root: Path) -> dict[str, dict[str, object]]:
    escape = os.path.relpath(root, Path.cwd())  # ../../… from the server's directory
    return {
        "inline-workload-path": {"space": small_space(workload=str(root / "shadow"))},
        "inline-workload-yaml": {"space": small_space(workload=str(root / "secrets.yaml"))},
        "inline-workload-relative": {"space": small_space(
            workload=f"{escape}/secrets.yaml")},
        "override-workload-path": {"workload": str(root / "secrets.yaml")},
        "space-path": {"space": str(root / "secrets.yaml")},
        "trace-absolute": {"space": small_space(workload={
            "dataset": {"kind": "mooncake_trace", "path": str(root / "trace.jsonl")}})},
        "trace-escape": {"workload": {
            "dataset": {"kind": "trace", "path": f"{escape}/trace.jsonl"}}},
        "sharegpt-absolute": {"workload": {
            "dataset": {"kind": "sharegpt", "path": str(root / "shadow")}}},
        "device-file": {"space": small_space(gpu=str(root / "device.yaml"))},
        "device-file-relative": {"space": small_space(gpu=f"{escape}/device.yaml")},
        "sim-model-dir": {"space": small_space(model=str(root / "models" / "llama"))},
        # The refusal of a model directory said where it resolved and whether it held a
        # config.json: an existence oracle for the server's file system.
        "vllm-model-dir-exists": {"space": vllm_space(model=f"{escape}/models/llama")},
        "vllm-model-dir-missing": {"space": vllm_space(model=f"{escape}/models/none")},
        "vllm-model-absolute": {"space": vllm_space(model=str(root / "models" / "llama"))},
    }


READS = ("inline-workload-path", "inline-workload-yaml", "inline-workload-relative",
         "override-workload-path", "space-path", "trace-absolute", "trace-escape",
         "sharegpt-absolute", "device-file", "device-file-relative", "sim-model-dir",
         "vllm-model-dir-exists", "vllm-model-dir-missing", "vllm-model-absolute")


@pytest.mark.parametrize("case", READS)
async def test_the_api_reads_no_server_file_and_echoes_none(case: str, sqlite_url: str,
                                                            server_files: Path) -> None:
    body = _reads_server_files(server_files)[case]
    settings = Settings(database=DatabaseSettings(url=sqlite_url),
                        api=ApiSettings(token=SecretStr(WRITE_TOKEN)))
    with Store(sqlite_url) as store:
        app = create_app(settings, store=store)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            response = await client.post("/api/v1/sweeps", json=body, headers=WRITE)
        assert response.status_code == 422, response.text
        assert_nothing_of_the_server(response.text, server_files, body)
        assert store.list_sweeps().count == 0


HANDED_COMMANDS = {
    "quality-argv": small_space(quality={"command": {
        "argv": ["/bin/sh", "-c", "id > /tmp/slotune-pwned; echo 1.0"], "min_score": 0.5}}),
    "quality-argv-with-a-name": small_space(quality={"command": {
        "name": "mmlu", "argv": ["/bin/sh", "-c", "id"], "min_score": 0.5}}),
    "engine-binary": vllm_space(engine_binary="/bin/sh"),
    "engine-binary-relative": vllm_space(engine_binary="../../bin/sh"),
    "engine-binary-on-path": vllm_space(engine_binary="sh"),
    "engine-binary-as-option": vllm_space(options={"engine_binary": "/bin/sh"}),
    "engine-binary-as-vllm-option": vllm_space(vllm={"engine_binary": "/bin/sh"}),
}


@pytest.mark.parametrize("case", list(HANDED_COMMANDS))
async def test_the_api_runs_no_command_it_is_handed(case: str, sqlite_url: str) -> None:
    """A write token is not a shell on the workers: an executable is named from the
    operator's registry, never given (here nothing is registered)."""
    settings = Settings(database=DatabaseSettings(url=sqlite_url),
                        api=ApiSettings(token=SecretStr(WRITE_TOKEN)))
    with Store(sqlite_url) as store:
        app = create_app(settings, store=store)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            response = await client.post("/api/v1/sweeps", json={"space": HANDED_COMMANDS[case]},
                                         headers=WRITE)
        assert response.status_code == 422, response.text
        registry = ("SLOTUNE_QUALITY_COMMANDS" if case.startswith("quality")
                    else "SLOTUNE_ENGINE_BINARIES")
        assert registry in response.text
        assert store.list_sweeps().count == 0


async def test_registered_engines_and_quality_checks_are_named_and_stored_resolved(
        sqlite_url: str, tmp_path: Path) -> None:
    """The operator's registry is what a client names; the stored space holds what the
    operator registered (so a stored sweep runs the same on any coordinator)."""
    vllm_bin = tmp_path / "opt" / "vllm"
    settings = trusted_settings(
        sqlite_url, engine_binaries={"vllm-main": str(vllm_bin)},
        quality_commands={"mmlu": {"argv": ["lm_eval", "--model", "{model}"],
                                   "timeout_s": 900}})
    with Store(sqlite_url) as store:
        app = create_app(settings, store=store)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            ok = await client.post("/api/v1/sweeps", headers=WRITE, json={"space": vllm_space(
                engine_binary="vllm-main",
                quality={"command": {"name": "mmlu", "min_score": 0.6}})})
            assert ok.status_code == 201, ok.text
            unknown = await client.post("/api/v1/sweeps", headers=WRITE, json={
                "space": vllm_space(engine_binary="vllm-nightly")})
            assert unknown.status_code == 422
            assert "vllm-main" in unknown.text  # the names a client may use
            assert str(vllm_bin) not in unknown.text  # not where they live
        stored = store.get_sweep(ok.json()["id"]).space
    assert stored["options"]["engine_binary"] == str(vllm_bin)
    command = stored["quality"]["command"]
    assert command["name"] == "mmlu" and command["timeout_s"] == 900
    assert command["argv"] == ["lm_eval", "--model", "{model}"]
    assert command["min_score"] == 0.6


SECRET_ARGS = {"api_key": API_KEY, "hf_token": "hf_SeCrEt", "ssl_keyfile_password": "pw",
               "watermark_config": {"key": "SeCrEt"}}


@pytest.mark.parametrize("name", list(SECRET_ARGS))
async def test_secret_engine_arguments_are_refused_in_spaces_over_the_api(
        name: str, sqlite_url: str) -> None:
    settings = Settings(database=DatabaseSettings(url=sqlite_url),
                        api=ApiSettings(token=SecretStr(WRITE_TOKEN)))
    space = vllm_space(fixed={"max_model_len": 4096, name: SECRET_ARGS[name]},
                       allowed_extra_args=[name])
    with Store(sqlite_url) as store:
        app = create_app(settings, store=store)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            response = await client.post("/api/v1/sweeps", json={"space": space},
                                         headers=WRITE)
        assert response.status_code == 422, response.text
        assert "worker's environment" in response.text and name in response.text
        assert_no_secret("the refusal", response.text)
        assert API_KEY not in response.text
        assert store.list_sweeps().count == 0


def test_secret_engine_arguments_are_refused_in_space_files_by_the_cli(
        tmp_path: Path, sqlite_url: str) -> None:

    path = tmp_path / "space.yaml"
    path.write_text(json.dumps(small_space(
        fixed={"max_model_len": 4096, "api_key": API_KEY}, allowed_extra_args=["api_key"])))
    ok = tmp_path / "ok.yaml"  # a knob whose name holds "tokens" carries no secret
    ok.write_text(json.dumps(small_space(fixed={"max_model_len": 4096,
                                                "max_num_batched_tokens": 4096})))
    for command in ("submit", "run"):
        proc = subprocess.run(
            [SLOTUNE, "sweep", command, "--space", str(path), "--database-url", sqlite_url,
             *(["--executor", "virtual"] if command == "run" else [])],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "worker's environment" in proc.stderr and "Traceback" not in proc.stderr
        assert API_KEY not in proc.stdout + proc.stderr
    accepted = subprocess.run([SLOTUNE, "sweep", "submit", "--space", str(ok),
                               "--database-url", sqlite_url],
                              capture_output=True, text=True, timeout=60)
    assert accepted.returncode == 0, accepted.stderr
    with Store(sqlite_url) as store:
        assert store.list_sweeps().count == 1


@pytest.fixture
def any_backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'slotune.db'}"
        migrate.upgrade(url)
        yield url
        return
    name = f"slotune_trust_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = f"{ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    migrate.upgrade(url)
    yield url
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                     .format(sql.Identifier(name)))


@pytest.mark.slow
@pytest.mark.parametrize("any_backend_url", ["sqlite", "postgres"], indirect=True)
async def test_a_secret_that_reaches_a_record_is_redacted_on_the_way_in(
        any_backend_url: str, tmp_path: Path) -> None:
    """A space stored with a secret engine argument (before spaces refused them) runs; no
    row, no read path and no report shows the secret: records are redacted as written."""
    from slotune.tuner.sweep.request import SweepRequest, resolve
    from slotune.workers.contracts import SLO, TrialResult

    url = any_backend_url
    space = small_space(fixed={"max_model_len": 4096, "api_key": API_KEY},
                        allowed_extra_args=["api_key"])
    with Store(url) as store:
        record = store.create_sweep(
            name="secret", workload=resolve(SweepRequest(space=small_space()))[1],
            slo=SLO.parse("ttft:300,tpot:50"), space=space,
            model="Qwen/Qwen2.5-7B-Instruct", gpu="rtx4090", strategy="grid",
            mode="goodput", budget={"max_trials": 2, "confirm_top": 0}, seed=0,
            owner=None)
    served = subprocess.run(
        [SLOTUNE, "coordinator", "--executor", "virtual", "--once", "--poll", "0.2",
         "--database-url", url], capture_output=True, text=True, timeout=180,
        stdin=subprocess.DEVNULL)
    assert served.returncode == 0, served.stderr[-2000:]
    settings = Settings(database=DatabaseSettings(url=url),
                        api=ApiSettings(token=SecretStr(WRITE_TOKEN)))
    seen: list[str] = [served.stdout + served.stderr]
    with Store(url) as store:
        sweep = store.get_sweep(record.id)
        assert sweep.status == "done", sweep.stop_reason
        rows = store.list_trials(record.id).data
        assert rows and all(r.status == "ok" for r in rows)
        # the engine ran with the argument (redacted), as it was stored
        assert TrialResult.model_validate(rows[0].result).status == "ok"
        app = create_app(settings, store=store)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            for path in (f"/api/v1/sweeps/{record.id}", f"/api/v1/sweeps/{record.id}/trials",
                         "/api/v1/best", "/api/v1/workloads/trust-w/best",
                         f"/api/v1/sweeps/{record.id}/report?format=html",
                         f"/api/v1/sweeps/{record.id}/report?format=md"):
                response = await client.get(path)
                assert response.status_code == 200, (path, response.text)
                seen.append(response.text)
    for command in (["best"], ["best", "--output", "json"], ["sweep", "status", str(record.id)],
                    ["sweep", "report", str(record.id), "--output", str(tmp_path / "r")]):
        out = subprocess.run([SLOTUNE, *command, "--database-url", url], capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, (command, out.stderr)
        seen.append(out.stdout + out.stderr)
    seen.append(table_dump(url))
    seen.extend(p.read_text() for p in (tmp_path / "r").iterdir())
    assert "--api-key" in "".join(seen)  # the argument is there, its value is not
    for shown in seen:
        assert API_KEY not in shown, shown[:3000]


@pytest.mark.slow
def test_a_real_api_server_keeps_the_trust_boundary(tmp_path: Path, server_files: Path) -> None:
    """``slotune api`` as deployed: the operator's registry and data directories from its
    environment; a client names them, and reaches nothing else."""
    from slotune.workers.engines.process import free_port
    from tests.support.api import api_env, serving
    from tests.support.api_data import TOKEN

    data = tmp_path / "data"
    (data / "traces").mkdir(parents=True)
    line = '{"timestamp": %d, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n'
    (data / "traces" / "ok.jsonl").write_text("".join(line % (100 * i) for i in range(20)))
    (data / "traces" / "bad.jsonl").write_text(line % 0 + f'["{SHADOW_LINE}"]\n')
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    migrate.upgrade(url)
    port = free_port()
    env = api_env(SLOTUNE_API_TOKEN=TOKEN, SLOTUNE_DATA_DIRS=json.dumps([str(data)]),
               SLOTUNE_ENGINE_BINARIES=json.dumps({"vllm-main": "/opt/vllm/bin/vllm"}),
               SLOTUNE_QUALITY_COMMANDS=json.dumps({"mmlu": {"argv": ["lm_eval", "{model}"]}}))
    write = {"Authorization": f"Bearer {TOKEN}"}
    escape = os.path.relpath(server_files, Path.cwd())  # the server runs in this directory

    def trace(path: str) -> dict[str, object]:
        return {"name": "trusted-trace", "num_prompts": 10,
                "dataset": {"kind": "mooncake_trace", "path": path}}

    refused = {
        "a server file as the workload": {"space": small_space(
            workload=str(server_files / "shadow"))},
        "a trace outside the data directories": {"workload": trace(
            f"{escape}/trace.jsonl")},
        "a trace climbing out of them": {"workload": trace("../server/trace.jsonl")},
        "a bad trace inside them": {"workload": trace("traces/bad.jsonl")},
        "a command": {"space": small_space(quality={"command": {
            "argv": ["/bin/sh", "-c", "id"], "min_score": 0}})},
        "an executable": {"space": vllm_space(engine_binary="/bin/sh")},
        "a model directory": {"space": vllm_space(model=f"{escape}/models/llama")},
        "a secret": {"space": vllm_space(fixed={"api_key": API_KEY},
                                         allowed_extra_args=["api_key"])},
    }
    argv = [SLOTUNE, "api", "--port", str(port), "--database-url", url]
    with serving(argv, env, port) as client:
        for what, body in refused.items():
            response = client.post("/api/v1/sweeps", json=body, headers=write)
            assert response.status_code == 422, (what, response.text)
            assert_nothing_of_the_server(response.text, server_files, body)
            assert str(data) not in response.text and API_KEY not in response.text, what
        assert "line 2: expected a JSON object" in client.post(
            "/api/v1/sweeps", json=refused["a bad trace inside them"], headers=write).text
        assert client.get("/api/v1/sweeps").json()["count"] == 0
        ok = client.post("/api/v1/sweeps", headers=write, json={
            "workload": trace("traces/ok.jsonl"),
            "space": vllm_space(engine_binary="vllm-main",
                                quality={"command": {"name": "mmlu", "min_score": 0.5}})})
        assert ok.status_code == 201, ok.text
        space = client.get(f"/api/v1/sweeps/{ok.json()['id']}").json()["space"]
    assert space["options"]["engine_binary"] == "/opt/vllm/bin/vllm"
    assert space["quality"]["command"]["argv"] == ["lm_eval", "{model}"]
    assert space["workload"]["dataset"]["path"] == str((data / "traces" / "ok.jsonl").resolve())
