"""A model's next trial goes to the node that just ran one (its weights are warm there).

A real two-node Ray cluster, one fake RTX 4090 per node (typed, so the ``gpu_type:*``
request stays part of every trial's options), and the coordinator's own
:class:`~slotune.tuner.sweep.executors.RayExecutor` submitting simulated trials: short ones, and
long ones that hold a node's GPU while another trial is placed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from slotune.tuner.sweep.executors import RayExecutor
from slotune.workers.contracts import SLO, TrialResult, TrialSpec
from slotune.workers.engines.sim import SimOptions
from slotune.workers.loadgen import load_workload
from tests.support.procscan import engine_pids
from tests.support.raycluster import LocalRayCluster, joined_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MODEL = "Qwen/Qwen2.5-7B-Instruct"
OTHER_MODEL = "Qwen/Qwen3-8B"
SHORT, LONG = 8, 60
"""Prompts of a trial that is over quickly, and of one that holds its GPU meanwhile."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    with joined_cluster((1, "rtx4090"), (1, "rtx4090")) as c:
        yield c


@pytest.fixture
def executor(cluster: LocalRayCluster) -> RayExecutor:
    return RayExecutor(cluster.address)  # joins the session; knows no warm node yet


def spec(model: str = MODEL, prompts: int = SHORT) -> TrialSpec:
    workload, _ = load_workload("lab")
    data = workload.model_dump()
    data["arrivals"]["request_rate"] = 4.0
    data["num_prompts"] = prompts
    data["warmup_requests"] = 1
    return TrialSpec.model_validate({
        "run_id": f"warm-{uuid.uuid4().hex[:6]}", "engine": "sim", "model": model,
        "knobs": {"quantization": "fp8"}, "workload": data,
        "slo": SLO.parse("ttft:1000,tpot:100"), "gpu": "rtx4090",
        "sim": SimOptions(time_scale=4),
    })


def finish(executor: RayExecutor, handle: object, timeout_s: float = 120) -> TrialResult:
    """The trial's result, through the executor (which learns its node from it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for _, result in executor.wait([handle], 1.0):
            assert result.status == "ok", result.failure_message
            assert result.node is not None
            return result
    raise TimeoutError(f"trial not finished after {timeout_s:g} s")


def run(executor: RayExecutor, trial: TrialSpec) -> TrialResult:
    return finish(executor, executor.submit(trial))


def wait_until_running(trial: TrialSpec, timeout_s: float = 60) -> None:
    """Until the trial's engine process is up: it holds its node's GPU from here on."""
    deadline = time.monotonic() + timeout_s
    while not engine_pids(trial.run_id):
        assert time.monotonic() < deadline, f"{trial.run_id}: the engine never started"
        time.sleep(0.1)


def test_trials_of_a_model_follow_the_node_that_ran_it_last(executor: RayExecutor) -> None:
    # Make the model's first trial land where Ray would not put it on its own: another
    # model's trial, placed while both nodes are free, holds Ray's own pick.
    blocker = spec(OTHER_MODEL, prompts=LONG)
    held = executor.submit(blocker)
    wait_until_running(blocker)
    first = run(executor, spec())
    ray_pick = finish(executor, held).node
    assert first.node != ray_pick
    # Both nodes are free again for every one of these: each goes to the warm node.
    after = [run(executor, spec()).node for _ in range(3)]
    assert after == [first.node] * 3


def test_a_busy_warm_node_sends_the_next_trial_elsewhere_at_once(
        executor: RayExecutor) -> None:
    warm = run(executor, spec()).node
    long = spec(prompts=LONG)
    held = executor.submit(long)
    wait_until_running(long)
    # The warm node's only GPU is taken: the next trial runs on the other node, and is
    # over while the long one still holds the warm node — it never queued behind it.
    other = run(executor, spec())
    assert other.node != warm
    assert executor.wait([held], 0) == []
    assert finish(executor, held).node == warm
