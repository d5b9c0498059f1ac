"""The chart's commands, run here: what its pods would run, against a local Ray.

Not the cluster — its commands. The chart is rendered (simulated-GPU profile, with the
sweep job), and each process is started the way Kubernetes and KubeRay would start it, on
this machine: the Ray head and the worker with the ``ray start`` KubeRay builds from the
rendered ``rayStartParams``; the coordinator with the rendered container's arguments through
the image's entry script (docker/entrypoint.sh) and its rendered environment (Secrets, the
ConfigMap, ``$(VAR)`` references resolved as the kubelet does); the probes with their
rendered commands; the sweep job's driver with the RayJob's rendered entrypoint under a
shell, as Ray's job supervisor runs it. Ray runs in token mode, as the chart configures it.
Then a queued sweep runs through the coordinator and one through the sweep job, on the
worker's simulated GPUs, into a real Postgres. So a flag the CLI no longer takes, a resource
name the coordinator no longer asks for, or a probe that no longer answers fails here.

What stands in for the cluster, and only that: volume mounts are folders of this test
(``/tmp``, ``/var/lib/slotune``, ``/etc/slotune/spaces`` with the rendered ConfigMap's
files); the Ray head's service name and the Postgres service are local addresses; each Ray
node gets the flags a pod's network and size give it for free (``--node-ip-address``,
``--temp-dir``, a small object store) and the head no dashboard (nothing here asks it).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from slotune.tuner.db.store import Store
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from slotune.workers.contracts import TrialResult
from tests.support.chart import (
    Obj,
    config_maps,
    container_env,
    kuberay_ray_start,
    merged,
    one,
    profile_values,
    render,
)
from tests.support.paths import REPO
from tests.support.raycluster import LocalRayCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

BIN = Path(sys.executable).parent
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
HEALTHCHECK = REPO / "docker" / "healthcheck.py"
ADMIN_URL = os.environ.get("SLOTUNE_TEST_POSTGRES_URL",
                           "postgresql://postgres@127.0.0.1:5432/postgres")
SECRETS = {
    "slotune-api": {"SLOTUNE_API_TOKEN": secrets.token_hex(16)},
    "slotune-ray": {"auth_token": secrets.token_hex(16)},
    "slotune-postgres": {"POSTGRES_PASSWORD": secrets.token_hex(8)},
}
SWEEP_ARGS = ["--space", "/etc/slotune/spaces/lab-light.yaml", "--strategy", "tpe",
              "--trials", "2", "--confirm-top", "0", "--log-format", "json"]
MOUNTS = ("/tmp", "/var/lib/slotune", "/etc/slotune/spaces")


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    values = merged(profile_values("sim"), {"sweepJob": {"enabled": True, "args": SWEEP_ARGS}})
    return render(values)


@pytest.fixture
def database() -> Iterator[str]:
    """A Postgres database of this test's own, with a password in its URL (the server
    trusts any), standing in for the chart's Postgres service."""
    name = f"slotune_helm_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    password = SECRETS["slotune-postgres"]["POSTGRES_PASSWORD"]
    base = ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://postgres@",
                                               f"postgresql://postgres:{password}@")
    yield f"{base}/{name}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                     .format(sql.Identifier(name)))


class Pod:
    """One pod's view of this machine: its own folders where its volumes are mounted."""

    def __init__(self, cluster: LocalRayCluster, spaces: Mapping[str, str]) -> None:
        # Short: Ray's Unix sockets live below /tmp (a 107-byte path).
        root = Path(tempfile.mkdtemp(prefix="hp", dir="/tmp"))
        cluster.temp_dirs.append(root)
        self.mounts = {path: root / path.strip("/").replace("/", "-") for path in MOUNTS}
        for folder in self.mounts.values():
            folder.mkdir()
        for name, text in spaces.items():
            (self.mounts["/etc/slotune/spaces"] / name).write_text(text)

    def local(self, text: str) -> str:
        """``text`` with every mount path (where a path starts) as this pod's folder."""
        paths = "|".join(re.escape(p) for p in sorted(self.mounts, key=len, reverse=True))
        return re.sub(rf"(?<![\w./-])({paths})(?![\w.-])",
                      lambda m: str(self.mounts[m.group(1)]), text)

    def env(self, rendered_env: Mapping[str, str], **overrides: str) -> dict[str, str]:
        """The container's environment on this machine: the image's own variables
        (docker/Dockerfile), the rendered ones with mount paths mapped, then ``overrides``."""
        image = {"PATH": f"{BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
                 "PYTHONUNBUFFERED": "1", "SLOTUNE_HOME": "/var/lib/slotune",
                 "LANG": "C.UTF-8"}
        env = {k: self.local(v) for k, v in {**image, **rendered_env}.items()}
        # The container's /tmp is its own: Ray's session folders land there.
        env["TMPDIR"] = str(self.mounts["/tmp"])
        return {**env, **overrides}


def image_command(argv: list[str]) -> list[str]:
    """A command of the image, as this checkout has it."""
    programs = {"slotune-entrypoint": ["sh", str(ENTRYPOINT)],
                "slotune-healthcheck": [sys.executable, str(HEALTHCHECK)]}
    return [*programs.get(argv[0], [argv[0]]), *argv[1:]]


def start(cluster: LocalRayCluster, argv: list[str], env: Mapping[str, str],
          log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    cluster.procs.append(proc)
    return proc


def probe(container: Obj, kind: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``container``'s rendered exec probe of ``kind`` (startupProbe, livenessProbe …)."""
    argv = image_command(container[kind]["exec"]["command"])
    return subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=60,
                          check=False, stdin=subprocess.DEVNULL)


def wait_for(what: str, check: Any, timeout_s: float, every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


def ray_nodes(env: Mapping[str, str], address: str) -> list[dict[str, Any]]:
    """The cluster's live nodes, asked by a Ray driver with the pod's token."""
    script = (f"import json, ray; ray.init(address={address!r}, log_to_driver=False); "
              "print(json.dumps([n for n in ray.nodes() if n['Alive']]))")
    done = subprocess.run([sys.executable, "-c", script], env=dict(env), capture_output=True,
                          text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_rendered_commands_run_sweeps_on_a_local_ray(
        rendered: list[Obj], database: str, tmp_path: Path) -> None:
    configs = config_maps(rendered)
    spaces = configs["slotune-spaces"]
    cluster = LocalRayCluster()
    gcs = f"127.0.0.1:{cluster.port}"
    try:
        ray_cluster = one(rendered, "RayCluster")["spec"]
        [group] = ray_cluster["workerGroupSpecs"]

        # The head: KubeRay's `ray start --head` from the rendered parameters.
        head_pod = Pod(cluster, spaces)
        head = ray_cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
        head_env = head_pod.env(container_env(head, secrets=SECRETS, config_maps=configs))
        assert head_env["RAY_ADDRESS"] == "127.0.0.1:6379"  # its own GCS, the probes ask it
        head_env["RAY_ADDRESS"] = gcs
        head_cmd = kuberay_ray_start(ray_cluster["headGroupSpec"]["rayStartParams"], head=True)
        start(cluster, ["bash", "-c", f"{head_cmd} --port={cluster.port} --block "
                        + local_node_flags(head_pod, dashboard=False)],
              head_env, tmp_path / "head.log")
        wait_for("the Ray head's GCS", lambda: port_open(cluster.port), 90, 0.3)

        # A worker of the simulated group: KubeRay adds --address and --block.
        worker_pod = Pod(cluster, spaces)
        worker = group["template"]["spec"]["containers"][0]
        worker_env = worker_pod.env(container_env(worker, secrets=SECRETS, config_maps=configs),
                                    RAY_ADDRESS=gcs)  # KubeRay sets the head's address
        worker_cmd = kuberay_ray_start(group["rayStartParams"], head=False)
        start(cluster, ["bash", "-c", f"{worker_cmd} --address={gcs} --block "
                        + local_node_flags(worker_pod)], worker_env, tmp_path / "worker.log")

        nodes = wait_for("two Ray nodes", lambda: (lambda found: len(found) == 2 and found)(
            ray_nodes(worker_env, gcs)), 120, 1.0)
        by_gpus = {int(n["Resources"].get("GPU", 0)): n for n in nodes}
        head_node, worker_node = by_gpus[0], by_gpus[2]
        assert head_node["Resources"].get("CPU", 0) == 0  # num-cpus "0": no trial runs there
        assert {k: v for k, v in worker_node["Resources"].items() if k.startswith("gpu_type:")} \
            == {f"gpu_type:{t}": 2 for t in ("a100-80g", "h100-sxm", "h200", "l40s", "rtx4090")}
        assert worker_node["Resources"]["CPU"] == 4
        for container, env in ((head, head_env), (worker, worker_env)):
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                checked = probe(container, kind, env)
                assert checked.returncode == 0, (container["name"], kind, checked.stderr)

        # The coordinator: its rendered arguments through the image's entry script.
        coordinator_pod = Pod(cluster, spaces)
        deployment = one(rendered, "Deployment", "slotune-coordinator")
        coordinator = deployment["spec"]["template"]["spec"]["containers"][0]
        coordinator_env = container_env(coordinator, secrets=SECRETS, config_maps=configs)
        assert coordinator_env["RAY_ADDRESS"] == "slotune-head-svc:6379"  # KubeRay's service
        password = SECRETS["slotune-postgres"]["POSTGRES_PASSWORD"]
        assert coordinator_env["DATABASE_URL"] == \
            f"postgresql://slotune:{password}@slotune-postgres:5432/slotune"
        coordinator_env = coordinator_pod.env(coordinator_env, RAY_ADDRESS=gcs,
                                              DATABASE_URL=database)
        coordinator_proc = start(cluster, image_command(["slotune-entrypoint",
                                                         *coordinator["args"]]),
                                 coordinator_env, tmp_path / "coordinator.log")
        wait_for("the coordinator's startup probe",
                 lambda: (coordinator_proc.poll() is None or pytest.fail(
                     (tmp_path / "coordinator.log").read_text()[-4000:]))
                 and probe(coordinator, "startupProbe", coordinator_env).returncode == 0,
                 120, 2.0)

        # A queued sweep runs on the worker's simulated GPUs.
        space_file = coordinator_pod.mounts["/etc/slotune/spaces"] / "lab-light.yaml"
        with Store(database) as store:
            queued = queue_sweep(store, SweepRequest(
                space=str(space_file), strategy="tpe",
                budget=SweepBudget(max_trials=2, confirm_top=0)))
        wait_for("the queued sweep", lambda: sweep_status(database, queued.id) == "done",
                 240, 2.0)
        assert_trials_ran_on(database, queued.id, worker_node["NodeID"])
        assert probe(coordinator, "livenessProbe", coordinator_env).returncode == 0
        # The rendered extraArgs reached the coordinator: its log is JSON lines.
        assert "trial_ended" in json_events((tmp_path / "coordinator.log").read_text())
        os.killpg(coordinator_proc.pid, signal.SIGTERM)
        coordinator_proc.wait(30)

        # The sweep job: the RayJob's entrypoint as Ray's job supervisor runs it — in a shell
        # on the head, RAY_ADDRESS pointing at the cluster — with the RayJob head's env.
        job = one(rendered, "RayJob")["spec"]
        job_head = job["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        driver_pod = Pod(cluster, spaces)
        driver_env = driver_pod.env(container_env(job_head, secrets=SECRETS,
                                                  config_maps=configs),
                                    RAY_ADDRESS=gcs, DATABASE_URL=database)
        driver = subprocess.run(["bash", "-c", driver_pod.local(job["entrypoint"])],
                                env=driver_env, capture_output=True, text=True, timeout=300,
                                check=False, stdin=subprocess.DEVNULL)
        assert driver.returncode in (0, 3), driver.stdout[-3000:] + driver.stderr[-3000:]
        assert {"trial_ended", "sweep_finished"} <= json_events(driver.stdout)
        with Store(database) as store:
            sweeps = [s for s in store.list_sweeps().data if s.id != queued.id]
        [ran] = sweeps
        assert ran.status == "done"
        assert_trials_ran_on(database, ran.id, worker_node["NodeID"])
        assert list(driver_pod.mounts["/var/lib/slotune"].rglob("*.md"))  # its report
    finally:
        cluster.stop()
    assert cluster.stragglers() == []


def json_events(log: str) -> set[str]:
    """The ``event`` of every JSON line of a sweep log (``--log-format json``)."""
    events = set()
    for line in log.splitlines():
        if line.startswith("{"):
            events.add(str(json.loads(line).get("event")))
    return events


def local_node_flags(pod: Pod, *, dashboard: bool = True) -> str:
    """What a pod's network and size give a Ray node for free, as flags on this machine."""
    flags = ["--node-ip-address=127.0.0.1", f"--temp-dir={pod.mounts['/tmp'] / 'ray'}",
             f"--object-store-memory={256 << 20}"]
    if not dashboard:
        flags.append("--include-dashboard=false")
    return " ".join(flags)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def sweep_status(url: str, sweep_id: int) -> str:
    with Store(url) as store:
        return str(store.get_sweep(sweep_id).status)


def assert_trials_ran_on(url: str, sweep_id: int, node_id: str) -> None:
    with Store(url) as store:
        trials = store.list_trials(sweep_id).data
    assert len(trials) == 2
    for trial in trials:
        assert trial.status == "ok", trial.result
        result = TrialResult.model_validate(trial.result)
        assert result.node == node_id
        assert result.engine.gpu_name and "4090" in result.engine.gpu_name
