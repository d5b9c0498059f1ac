"""The compose stack (docker-compose.yml, docker/): valid, healthy by design, migrating.

No Docker engine is needed: ``docker-compose config`` (1.29, Debian's) and ``docker
compose config`` (v2, when present) validate and render the file; the rendered YAML is
checked for what the stack promises. The entry script's ``api`` role and the API health
check also run here for real, against SQLite, outside a container.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.paths import REPO

COMPOSE = REPO / "docker-compose.yml"
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
HEALTHCHECK = REPO / "docker" / "healthcheck.py"
SECRETS = {"SLOTUNE_API_TOKEN": "test-api-token", "POSTGRES_PASSWORD": "test-pg-password",
           "RAY_AUTH_TOKEN": "test-ray-token"}
CONTROL_PLANE = {"postgres", "ray-head", "api", "coordinator"}
MIGRATING = {"api", "coordinator"}


def _compose_commands() -> list[list[str]]:
    commands = []
    if shutil.which("docker-compose"):
        commands.append(["docker-compose"])
    if shutil.which("docker") and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        commands.append(["docker", "compose"])
    return commands


COMMANDS = _compose_commands()
if not COMMANDS:  # CI installs docker-compose (.ci/run); a laptop may lack both
    pytest.skip("neither docker-compose nor docker compose is installed",
                allow_module_level=True)


def _env(**extra: str) -> dict[str, str]:
    # Only what the stack reads: a developer's own SLOTUNE_* must not leak into the check.
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLOTUNE_", "POSTGRES_", "RAY_", "SIM_", "GPU_"))}
    return {**base, **SECRETS, **extra}


def render(command: list[str], profile: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, "-f", str(COMPOSE), "--profile", profile, "config"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env=env if env is not None else _env(), cwd=REPO)


@pytest.fixture(scope="module", params=[" ".join(c) for c in COMMANDS])
def compose(request: pytest.FixtureRequest) -> list[str]:
    return str(request.param).split()


@pytest.mark.parametrize("profile", ["sim", "gpu"])
def test_config_renders_with_every_service_healthchecked(compose: list[str],
                                                         profile: str) -> None:
    result = render(compose, profile)
    assert result.returncode == 0, result.stderr
    services: dict[str, Any] = yaml.safe_load(result.stdout)["services"]
    worker = {"sim": "sim-worker", "gpu": "gpu-worker"}[profile]
    assert CONTROL_PLANE | {worker} <= set(services)
    for name, service in services.items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in {"CMD", "CMD-SHELL"}, f"{name} has no healthcheck"
        assert not service.get("healthcheck", {}).get("disable"), name
    # The order of start: the database and the Ray head are healthy first.
    assert services["api"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for dep in ("postgres", "ray-head"):
        assert services["coordinator"]["depends_on"][dep]["condition"] == "service_healthy"
    assert services[worker]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert services["postgres"]["healthcheck"]["test"][1].startswith("pg_isready")
    # 1.29 renders "pgdata:/path:rw", v2 {type: volume, source: pgdata, …}
    assert any(v.get("source") == "pgdata" if isinstance(v, dict) else v.startswith("pgdata:")
               for v in _volumes(services["postgres"]))
    for name in ("coordinator", worker):
        assert services[name]["environment"]["RAY_ADDRESS"] == "ray-head:6379"
    if profile == "gpu":  # a vLLM node keeps its compile caches across restarts
        cache = services[worker]["environment"]["SLOTUNE_ENGINE_CACHE_DIR"]
        assert any(v.get("source") == "engine-cache" and v.get("target") == cache
                   if isinstance(v, dict) else v.startswith(f"engine-cache:{cache}")
                   for v in _volumes(services[worker]))
    url = services["api"]["environment"]["DATABASE_URL"]
    assert url.startswith("postgresql://") and "@postgres:5432/" in url
    assert services["coordinator"]["environment"]["DATABASE_URL"] == url


def _volumes(service: dict[str, Any]) -> list[Any]:
    return list(service.get("volumes", []))


def test_workers_gpu_reservation_and_types(compose: list[str]) -> None:
    gpu = yaml.safe_load(render(compose, "gpu").stdout)["services"]["gpu-worker"]
    [device] = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert str(device["count"]) in {"all", "-1"}  # v2 renders "all" as -1
    assert gpu["profiles"] == ["gpu"]
    assert gpu["environment"]["RAY_GPU_TYPES"]
    assert "vllm/vllm-openai" in gpu["build"]["args"]["VLLM_IMAGE"]
    sim = yaml.safe_load(render(compose, "sim").stdout)["services"]["sim-worker"]
    assert sim["profiles"] == ["sim"]
    assert "deploy" not in sim  # runs on a machine without a GPU
    assert int(sim["environment"]["RAY_NUM_GPUS"]) >= 1
    assert "rtx4090" in sim["environment"]["RAY_GPU_TYPES"].split(",")
    # Every node and the coordinator run the same Ray and Python.
    args = {name: s["build"]["args"] for name, s in
            yaml.safe_load(render(compose, "gpu").stdout)["services"].items() if "build" in s}
    assert len({(a["RAY_VERSION"], a["PYTHON_VERSION"]) for a in args.values()}) == 1


def test_config_renders_without_secrets_and_none_has_a_default(compose: list[str]) -> None:
    """`docker compose config` passes on a bare checkout; no secret is baked in."""
    bare = {k: v for k, v in _env().items() if k not in SECRETS}
    for profile in ("sim", "gpu"):
        result = render(compose, profile, bare)
        assert result.returncode == 0, result.stderr
    text = COMPOSE.read_text() + "".join(p.read_text() for p in (REPO / "docker").iterdir())
    for value in SECRETS.values():
        assert value not in text


@pytest.mark.parametrize(("role", "secret"), [
    ("api", "SLOTUNE_API_TOKEN"), ("coordinator", "RAY_AUTH_TOKEN"),
    ("ray-head", "RAY_AUTH_TOKEN"), ("ray-worker", "RAY_AUTH_TOKEN"),
])
def test_each_role_refuses_to_start_without_its_secret(role: str, secret: str) -> None:
    env = {k: v for k, v in _env().items() if k != secret}
    env["DATABASE_URL"] = "postgresql://slotune:pw@127.0.0.1:9/slotune"
    result = subprocess.run(["sh", str(ENTRYPOINT), role], capture_output=True, text=True,
                            timeout=30, env=env, check=False)
    assert result.returncode == 2
    assert f"{secret} is not set" in result.stderr


def test_an_empty_database_password_is_refused() -> None:
    env = {**_env(), "DATABASE_URL": "postgresql://slotune:@postgres:5432/slotune"}
    result = subprocess.run(["sh", str(ENTRYPOINT), "api"], capture_output=True, text=True,
                            timeout=30, env=env, check=False)
    assert result.returncode == 2 and "database password is empty" in result.stderr


def test_migrations_run_before_serving() -> None:
    """Both roles that touch the database migrate first (the entry script's order)."""
    script = ENTRYPOINT.read_text()
    for role, serve in (("api", "exec slotune api"), ("coordinator", "exec slotune coordinator")):
        block = script.split(f"\n{role})\n", 1)[1].split(";;", 1)[0]
        assert "migrate" in block and block.index("migrate") < block.index(serve), role
    assert "slotune db upgrade" in script.split("migrate() {", 1)[1].split("\n}\n", 1)[0]
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    assert {name for name, s in compose.items() if s.get("command", [None])[0] in MIGRATING} \
        == MIGRATING


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def api_role(tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """``entrypoint.sh api`` as the container runs it, on an empty SQLite database."""
    port = _free_port()
    env = {**_env(), "DATABASE_URL": f"sqlite:///{tmp_path / 'slotune.db'}",
           "SLOTUNE_API_PORT": str(port),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(["sh", str(ENTRYPOINT), "api"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield port, env
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_api_role_migrates_then_serves_and_is_healthy(
        api_role: tuple[int, dict[str, str]]) -> None:
    port, env = api_role
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        try:
            status = httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2).status_code
            if status == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    assert status == 200  # health is 503 on an unmigrated database: the script migrated
    check = subprocess.run([sys.executable, str(HEALTHCHECK), "api"], env=env,
                           capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode == 0, check.stderr


def test_healthchecks_fail_with_a_reason_when_nothing_runs() -> None:
    env = {**_env(), "SLOTUNE_API_PORT": str(_free_port()),
           "RAY_ADDRESS": f"127.0.0.1:{_free_port()}"}
    for role in ("api", "ray-node", "coordinator"):
        check = subprocess.run([sys.executable, str(HEALTHCHECK), role], env=env,
                               capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 1 and check.stderr.strip(), role
    usage = subprocess.run([sys.executable, str(HEALTHCHECK), "nope"], capture_output=True,
                           text=True, timeout=30, check=False)
    assert usage.returncode == 2


@pytest.fixture
def fake_bin(tmp_path: Path) -> tuple[Path, Path]:
    """``ray`` and ``slotune`` stand-ins that append their argv (JSON) to a call log."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    for name in ("ray", "slotune"):
        script = bin_dir / name
        script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                          f"open({str(calls)!r}, 'a').write(json.dumps([{name!r}, "
                          "*sys.argv[1:]]) + '\\n')\n")
        script.chmod(0o755)
    return bin_dir, calls


def run_role(fake_bin: tuple[Path, Path], role: str, **env: str) -> list[list[str]]:
    bin_dir, calls = fake_bin
    full = {**_env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env}
    done = subprocess.run(["sh", str(ENTRYPOINT), role], env=full, capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_coordinator_role_migrates_joins_ray_then_coordinates(
        fake_bin: tuple[Path, Path]) -> None:
    calls = run_role(fake_bin, "coordinator", RAY_ADDRESS="ray-head:6379")
    assert [c[:3] for c in calls] == [["slotune", "db", "upgrade"],
                                      ["ray", "start", "--address"],
                                      ["slotune", "coordinator", "--executor"]]
    assert calls[1][3] == "ray-head:6379"
    assert calls[1][calls[1].index("--num-gpus") + 1] == "0"  # the driver's node runs nothing


def test_worker_role_advertises_one_gpu_type_unit_per_gpu(fake_bin: tuple[Path, Path]) -> None:
    [call] = run_role(fake_bin, "ray-worker", RAY_ADDRESS="head:6379", RAY_NUM_GPUS="2",
                      RAY_NUM_CPUS="4", RAY_GPU_TYPES="rtx4090, h100-sxm")
    assert call[:4] == ["ray", "start", "--address", "head:6379"]
    assert call[call.index("--num-gpus") + 1] == "2"
    assert call[call.index("--num-cpus") + 1] == "4"
    assert json.loads(call[call.index("--resources") + 1]) == \
        {"gpu_type:rtx4090": 2, "gpu_type:h100-sxm": 2}
    assert "--block" in call
