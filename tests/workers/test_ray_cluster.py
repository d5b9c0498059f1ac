"""Cluster mode: a real two-node Ray cluster, each node with its own (fake) GPU type.

The head advertises two RTX 4090s, the second node two H100s, the way production nodes
do (``ray start --num-gpus 2 --resources '{"gpu_type:h100-sxm": 2}'``). Simulated trials
for each GPU type must land on a node of that type — they run ``submit_trial``'s own
options; a one-line wrapper only reports the node it ran on — and the coordinator must
run a queued sweep on the cluster through ``RAY_ADDRESS``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import ray

from tests.procscan import engine_pids
from tests.workers.raycluster import LocalRayCluster
from workers.contracts import SLO, SimOptions, TrialResult, TrialSpec
from workers.loadgen import load_workload
from workers.ray_worker import (
    GPU_TYPE_PREFIX,
    LOG_EXCERPT_BYTES,
    collect_trial,
    run_trial_task,
    submit_trial,
    trial_options,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TYPES = {"rtx4090": "head", "h100-sxm": "second"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    if ray.is_initialized():
        ray.shutdown()  # another module's local Ray; this module needs the cluster
    c = LocalRayCluster()
    mp = pytest.MonkeyPatch()
    # Nodes and driver agree on token authentication (the token file is shared).
    mp.setenv("RAY_AUTH_MODE", "token")
    mp.delenv("RAY_ADDRESS", raising=False)
    try:
        c.start_head(gpus=2, gpu_type="rtx4090")
        c.add_node(gpus=2, gpu_type="h100-sxm")
        ray.init(address=c.address, log_to_driver=False, configure_logging=False)
        c.wait_for_nodes(2)
        yield c
    finally:
        ray.shutdown()
        c.stop()
        mp.undo()
    assert c.stragglers() == []


def spec(gpu: str, prompts: int = 16) -> TrialSpec:
    workload, _ = load_workload("lab")
    data = workload.model_dump()
    data["arrivals"]["request_rate"] = 3.0
    data["num_prompts"] = prompts
    data["warmup_requests"] = 1
    return TrialSpec.model_validate({
        "trial_id": f"cl-{gpu}-{uuid.uuid4().hex[:6]}", "engine": "sim",
        "model": "Qwen/Qwen2.5-7B-Instruct", "knobs": {"quantization": "fp8"},
        "workload": data, "slo": SLO.parse("ttft:1000,tpot:100"),
        "sim": SimOptions(gpu=gpu, time_scale=3),
    })


@ray.remote(max_retries=0)
def _located_trial(spec_json: str) -> tuple[str, str]:
    """The trial task's body, reporting the node it ran on."""
    return ray.get_runtime_context().get_node_id(), run_trial_task(spec_json)


def node_of_types() -> dict[str, str]:
    """gpu_type resource → the id of the node advertising it."""
    out = {}
    for node in ray.nodes():
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
        assert opts["resources"] == {f"gpu_type:{s.sim.gpu}": 1.0}
    refs = [_located_trial.options(**o).remote(s.model_dump_json())
            for s, o in zip(specs, options, strict=True)]
    located = ray.get(refs, timeout=150)
    ran_on = [node for node, _ in located]
    results = [TrialResult.model_validate_json(r) for _, r in located]
    assert [r.status for r in results] == ["ok"] * 4, [r.failure_message for r in results]
    for s, node, result in zip(specs, ran_on, results, strict=True):
        assert node == nodes[f"gpu_type:{s.sim.gpu}"], s.sim.gpu
        # The engine's start-up facts and a capped log excerpt came back in the result.
        assert result.engine.kv_cache_tokens and result.engine.kv_cache_tokens > 0
        assert result.log_tail and "GPU KV cache size" in result.log_tail
        assert len(result.log_tail.encode()) <= LOG_EXCERPT_BYTES
        assert engine_pids(s.trial_id) == []
    assert len(set(ran_on)) == 2


def test_submit_trial_runs_on_the_cluster(cluster: LocalRayCluster) -> None:
    s = spec("h100-sxm", prompts=8)
    result = collect_trial(submit_trial(s), s, timeout_s=120)
    assert result.status == "ok", result.failure_message
    assert engine_pids(s.trial_id) == []
