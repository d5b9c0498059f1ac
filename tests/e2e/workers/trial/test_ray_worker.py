"""Trials on Ray with fake GPUs: parallel, each on its own GPUs, nothing left behind."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from slotune.workers.contracts import SLO, TrialSpec
from slotune.workers.engines.sim import SimOptions
from slotune.workers.loadgen import load_workload
from slotune.workers.trial.ray_worker import collect_trial, submit_trial
from tests.support.procscan import engine_pids

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    # Four fake GPUs; enough logical CPUs that four trial tasks run at once.
    ray.init(num_gpus=4, num_cpus=8, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


def spec(tp: int = 1, prompts: int = 24, rate: float = 2.0) -> TrialSpec:
    workload, _ = load_workload("lab")
    data = workload.model_dump()
    data["arrivals"]["request_rate"] = rate
    data["num_prompts"] = prompts
    data["warmup_requests"] = 2
    knobs: dict[str, object] = {"quantization": "fp8"}
    if tp > 1:
        knobs["tensor_parallel_size"] = tp
    return TrialSpec.model_validate({
        "run_id": f"ray-{uuid.uuid4().hex[:8]}", "engine": "sim",
        "model": "Qwen/Qwen2.5-7B-Instruct", "knobs": knobs, "workload": data,
        "slo": SLO.parse("ttft:300,tpot:50"), "gpu": "rtx4090", "sim": SimOptions(time_scale=2),
    })


def test_four_trials_run_in_parallel_each_on_its_own_gpu(ray_cluster: None) -> None:
    specs = [spec() for _ in range(4)]
    refs = [submit_trial(s) for s in specs]
    results = [collect_trial(r, s, timeout_s=180) for r, s in zip(refs, specs, strict=True)]
    assert [r.status for r in results] == ["ok"] * 4, [r.failure_message for r in results]
    # What each engine process saw as CUDA_VISIBLE_DEVICES (read back from its own log).
    devices = [r.engine.gpu_ids for r in results]
    assert all(len(d) == 1 for d in devices)
    assert len({d[0] for d in devices}) == 4
    starts = [r.timings.started_at for r in results]
    ends = [r.timings.finished_at for r in results]
    assert all(starts) and all(ends)
    assert max(starts) < min(ends)  # type: ignore[type-var] - all four were running at once
    # Each result names the node it ran on: this local Ray's one node.
    assert {r.node for r in results} == {ray.get_runtime_context().get_node_id()}
    for s in specs:
        assert engine_pids(s.run_id) == []


def test_gpus_follow_tensor_parallel_size(ray_cluster: None) -> None:
    specs = [spec(tp=2) for _ in range(2)]
    refs = [submit_trial(s) for s in specs]
    results = [collect_trial(r, s, timeout_s=180) for r, s in zip(refs, specs, strict=True)]
    assert [r.status for r in results] == ["ok", "ok"]
    groups = [set(r.engine.gpu_ids) for r in results]
    assert all(len(g) == 2 for g in groups)
    assert not groups[0] & groups[1]


def test_a_data_parallel_replica_holds_every_ranks_gpus(ray_cluster: None) -> None:
    s = spec()
    s = s.model_copy(update={"knobs": {**s.knobs, "data_parallel_size": 2}})
    result = collect_trial(submit_trial(s), s, timeout_s=180)
    assert result.status == "ok", result.failure_message
    assert len(set(result.engine.gpu_ids)) == 2  # one server, two ranks, two GPUs


def test_a_lost_worker_is_a_worker_lost_result_and_leaves_no_engine(ray_cluster: None) -> None:
    s = spec(prompts=400)
    ref = submit_trial(s)
    deadline = time.monotonic() + 60
    while not engine_pids(s.run_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = engine_pids(s.run_id)
    assert pids, "the engine never started"
    # The engine's parent is the Ray worker running the trial: kill it like an OOM-killer would.
    parent = int(Path(f"/proc/{pids[0]}/stat").read_text().split(")")[1].split()[1])
    os.kill(parent, signal.SIGKILL)
    result = collect_trial(ref, s, timeout_s=60)
    assert (result.status, result.failure) == ("failed", "worker_lost")
    assert result.node is None  # where it ran is not known: the row keeps what it had
    deadline = time.monotonic() + 10
    while engine_pids(s.run_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_pids(s.run_id) == []
