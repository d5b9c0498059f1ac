"""Trials as Ray tasks: resources from the spec, GPUs from Ray, failures as results.

``submit_trial`` schedules one trial with ``num_gpus = tensor_parallel_size``; Ray picks
the GPUs, and the task hands their ids to the engine as ``CUDA_VISIBLE_DEVICES``.
``collect_trial`` turns what comes back into a :class:`~workers.contracts.TrialResult`,
including when the worker or its node was lost (a transient ``worker_lost`` failure the
coordinator retries).
"""

from __future__ import annotations

import time

import ray
from ray.exceptions import (
    ActorDiedError,
    NodeDiedError,
    ObjectLostError,
    OwnerDiedError,
    RayTaskError,
    TaskCancelledError,
    WorkerCrashedError,
)

from workers.contracts import PhaseTimings, TrialResult, TrialSpec
from workers.trial import run_trial

_LOST = (WorkerCrashedError, NodeDiedError, ObjectLostError, OwnerDiedError, ActorDiedError)


@ray.remote(max_retries=0)
def _trial_task(spec_json: str) -> str:
    spec = TrialSpec.model_validate_json(spec_json)
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    return run_trial(spec, gpu_ids=gpu_ids).model_dump_json()


def submit_trial(spec: TrialSpec) -> ray.ObjectRef[str]:
    """Schedule a trial on a worker with ``tensor_parallel_size`` GPUs free."""
    # Retries are the coordinator's decision (it re-enqueues lost trials), not Ray's.
    task = _trial_task.options(num_gpus=spec.tensor_parallel_size,
                               name=f"slotune-trial-{spec.trial_id}")
    return task.remote(spec.model_dump_json())


def collect_trial(ref: ray.ObjectRef[str], spec: TrialSpec, *,
                  timeout_s: float | None = None) -> TrialResult:
    """The trial's result; a lost worker, node or object becomes ``worker_lost``."""
    started = time.perf_counter()
    try:
        return TrialResult.model_validate_json(ray.get(ref, timeout=timeout_s))
    except (*_LOST, TaskCancelledError) as exc:
        message = f"{type(exc).__name__}: {exc}"
    except RayTaskError as exc:
        # The trial code itself raised: a bug, not the engine; keep the traceback text.
        message = f"trial task raised: {exc}"
    return TrialResult(trial_id=spec.trial_id, status="failed", failure="worker_lost",
                       failure_message=message[:2000],
                       timings=PhaseTimings(total_s=time.perf_counter() - started))
