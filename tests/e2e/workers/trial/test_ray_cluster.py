"""Cluster mode: a real two-node Ray cluster, each node with its own (fake) GPU type.

The head advertises two RTX 4090s, the second node two H100s, the way production nodes
do (``ray start --num-gpus 2 --resources '{"gpu_type:h100-sxm": 2}'``). Simulated trials
for each GPU type must land on a node of that type — they run ``submit_trial``'s own
options; a one-line wrapper only reports the node it ran on — and the coordinator must
run a queued sweep on the cluster through ``RAY_ADDRESS``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import yaml

from slotune.tuner.db.store import Store
from slotune.tuner.sweep.executors import MAX_NODE_GPUS_ENV, RayExecutor
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from slotune.workers.contracts import SLO, TrialResult, TrialSpec
from slotune.workers.engines.sim import SimOptions
from slotune.workers.loadgen import load_workload
from slotune.workers.trial.ray_worker import (
    GPU_TYPE_PREFIX,
    LOG_EXCERPT_BYTES,
    collect_trial,
    run_trial_task,
    submit_trial,
    trial_options,
)
from tests.support.paths import REPO
from tests.support.procscan import engine_pids
from tests.support.raycluster import LocalRayCluster, joined_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
SPACES = REPO / "search_spaces"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    with joined_cluster((2, "rtx4090"), (2, "h100-sxm")) as c:
        yield c


def spec(gpu: str, prompts: int = 16) -> TrialSpec:
    workload, _ = load_workload("lab")
    data = workload.model_dump()
    data["arrivals"]["request_rate"] = 3.0
    data["num_prompts"] = prompts
    data["warmup_requests"] = 1
    return TrialSpec.model_validate({
        "run_id": f"cl-{gpu}-{uuid.uuid4().hex[:6]}", "engine": "sim",
        "model": "Qwen/Qwen2.5-7B-Instruct", "knobs": {"quantization": "fp8"},
        "workload": data, "slo": SLO.parse("ttft:1000,tpot:100"),
        "gpu": gpu, "sim": SimOptions(time_scale=3),
    })


@ray.remote(max_retries=0)
def _located_trial(spec_json: str) -> tuple[str, str]:
    """The trial task's body, reporting the node it ran on."""
    return ray.get_runtime_context().get_node_id(), run_trial_task(spec_json)


def node_of_types() -> dict[str, str]:
    """gpu_type resource → the id of the node advertising it."""
    out = {}
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node["Alive"]:
            for key in node["Resources"]:
                if key.startswith(GPU_TYPE_PREFIX):
                    out[key] = node["NodeID"]
    return out


def test_trials_land_on_nodes_of_their_gpu_type(cluster: LocalRayCluster) -> None:
    nodes = node_of_types()
    assert set(nodes) == {"gpu_type:rtx4090", "gpu_type:h100-sxm"}
    assert nodes["gpu_type:rtx4090"] != nodes["gpu_type:h100-sxm"]
    specs = [spec("rtx4090"), spec("h100-sxm"), spec("rtx4090"), spec("h100-sxm")]
    # Submitted with exactly submit_trial's options; the body is the trial task's own.
    options = [trial_options(s) for s in specs]
    for s, opts in zip(specs, options, strict=True):
        assert opts["num_gpus"] == 1
        assert opts["resources"] == {f"gpu_type:{s.gpu}": 1.0}
    refs = [_located_trial.options(**o).remote(s.model_dump_json())
            for s, o in zip(specs, options, strict=True)]
    located = ray.get(refs, timeout=150)
    ran_on = [node for node, _ in located]
    results = [TrialResult.model_validate_json(r) for _, r in located]
    assert [r.status for r in results] == ["ok"] * 4, [r.failure_message for r in results]
    for s, node, result in zip(specs, ran_on, results, strict=True):
        assert node == nodes[f"gpu_type:{s.gpu}"], s.gpu
        # The engine's start-up facts and a capped log excerpt came back in the result.
        assert result.engine.kv_cache_tokens and result.engine.kv_cache_tokens > 0
        assert result.log_tail and "GPU KV cache size" in result.log_tail
        assert len(result.log_tail.encode()) <= LOG_EXCERPT_BYTES
        assert engine_pids(s.run_id) == []
    assert len(set(ran_on)) == 2


def test_what_no_node_can_ever_hold_is_named_with_its_gpu_type(
        cluster: LocalRayCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    executor = RayExecutor(cluster.address)  # joins the running session

    def tp(gpu: str, n: int) -> TrialSpec:
        return spec(gpu).model_copy(update={"engine_args": {"tensor_parallel_size": n}})

    assert executor.unplaceable(tp("h100-sxm", 2)) is None
    assert executor.unplaceable(tp("h100-sxm", 4)) == (
        "needs 4 × h100-sxm; the largest node offers 2")  # 4 GPUs in all, 2 per node
    assert executor.unplaceable(tp("a100-80g", 1)) == (
        "needs 1 × a100-80g; the largest node offers 0")
    # An autoscaler may add a bigger node than any running: the operator declares it.
    monkeypatch.setenv(MAX_NODE_GPUS_ENV, "8")
    later = RayExecutor(cluster.address)
    assert later.unplaceable(tp("h100-sxm", 4)) is None
    assert later.unplaceable(tp("h100-sxm", 16)) == (
        f"needs 16 × h100-sxm; the largest node ({MAX_NODE_GPUS_ENV}) offers 8")
    # A GPU type no running node has — a worker group scaled to zero (the Helm chart's GPU
    # groups between sweeps) — may still come: the autoscaler adds a node for it.
    assert later.unplaceable(tp("a100-80g", 8)) is None
    assert later.unplaceable(tp("a100-80g", 16)) == (
        f"needs 16 × a100-80g; the largest node ({MAX_NODE_GPUS_ENV}) offers 8")


def test_submit_trial_runs_on_the_cluster(cluster: LocalRayCluster) -> None:
    s = spec("h100-sxm", prompts=8)
    result = collect_trial(submit_trial(s), s, timeout_s=120)
    assert result.status == "ok", result.failure_message
    assert engine_pids(s.run_id) == []


def test_slotune_coordinator_runs_a_sweep_on_the_cluster(cluster: LocalRayCluster,
                                                         tmp_path: Path) -> None:
    """``RAY_ADDRESS=<head> slotune coordinator``: trials for H100s run on the H100 node."""
    space = yaml.safe_load((SPACES / "lab.yaml").read_text())
    space.update({"name": "lab-h100", "gpu": "h100-sxm", "mode": "goodput",
                  "sim": {"time_scale": 3}, "workload": {
                      "name": "lab-light", "dataset": {"kind": "random", "input_len": 512,
                                                       "output_len": 128},
                      "arrivals": {"request_rate": 3}, "num_prompts": 16,
                      "warmup_requests": 1}})
    space_file = tmp_path / "lab-h100.yaml"
    space_file.write_text(yaml.safe_dump(space))
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    upgrade = slotune("db", "upgrade", "--database-url", url)
    assert upgrade.returncode == 0, upgrade.stderr
    with Store(url) as store:
        sweep = queue_sweep(store, SweepRequest(
            space=str(space_file), strategy="tpe",
            budget=SweepBudget(max_trials=2, confirm_top=0)))
    done = slotune("coordinator", "--executor", "ray", "--once", "--poll", "0.5",
                   "--database-url", url, env={"RAY_ADDRESS": cluster.address})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on 4 GPUs" in done.stdout  # the cluster's, not a local Ray's
    with Store(url) as store:
        assert store.get_sweep(sweep.id).status == "done"
        trials = store.list_trials(sweep.id).data
    assert len(trials) == 2
    for trial in trials:
        assert trial.status == "ok", trial.result
        assert trial.result is not None
        result = TrialResult.model_validate(trial.result)
        assert result.engine.gpu_name and "H100" in result.engine.gpu_name
        assert result.log_tail and "GPU KV cache size" in result.log_tail
        # (Per trial: other suites may run engines on this machine at the same time.)
        assert_gone(result.run_id)


def assert_gone(run_id: str, within_s: float = 10) -> None:
    """No engine of this trial is left (a cancelled task's engine dies a moment later)."""
    deadline = time.monotonic() + within_s
    while engine_pids(run_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = engine_pids(run_id)
    assert left == [], [Path(f"/proc/{p}/cmdline").read_bytes() for p in left]


def slotune(*args: str, env: dict[str, str] | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLOTUNE, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})
