"""Trials as Ray tasks: resources from the spec, GPUs from Ray, failures as results.

``submit_trial`` schedules one trial with ``num_gpus = spec.gpus`` (TP × PP × DP); Ray picks
the GPUs, and the task hands their ids to the engine as ``CUDA_VISIBLE_DEVICES``.
``collect_trial`` turns what comes back into a :class:`~slotune.workers.contracts.TrialResult`,
including when the worker or its node was lost (a transient ``worker_lost`` failure the
coordinator retries).

**GPU types on a cluster.** A node advertises the kind of GPU it has as a Ray custom
resource, one unit per GPU: ``ray start --num-gpus 2 --resources
'{"gpu_type:h100-sxm": 2}'``. A trial then also asks for ``gpu_type:<name>`` ×
``spec.gpus``, so it lands on a node with enough GPUs *of that type*. The name
comes from the spec:

* engine ``sim``: ``spec.gpu`` (the simulated GPU, a catalogue name such as
  ``rtx4090``, or the ``name`` inside a device file), renamed by ``$SLOTUNE_GPU_TYPES``
  when it has an entry;
* engine ``vllm``: only through the mapping in ``$SLOTUNE_GPU_TYPES``, from the space's
  GPU kind to the node's label, e.g. ``SLOTUNE_GPU_TYPES="h100-sxm=h100-sxm,a100-80g=a100"``.
  Without an entry, a vLLM trial asks for GPUs of any type (the catalogue default must
  not strand a real trial).

Which rule applies is the engine adapter's (``EngineAdapter.gpu_type``).

A cluster where no node advertises any ``gpu_type:*`` resource — the embedded local Ray
among them — gets plain ``num_gpus`` requests, as before, unless ``$SLOTUNE_GPU_TYPES``
declares labels: then the nodes are typed even while none runs (worker groups an
autoscaler scaled to zero), and a trial's demand names its type. That is read from
``ray.cluster_resources()`` once per Ray session once seen; until then it is looked at
again at most every :data:`RECHECK_S` seconds, so typed workers that join after the
coordinator started are still used.

**A model's weights stay warm.** A trial's boot reads the model's weights (tens to
hundreds of GB on a real cluster); the node that just ran a trial of the same model has
them in its page cache. The result says which node ran the trial (``TrialResult.node``,
the Ray node id), and ``trial_options(spec, prefer_node=…)`` asks Ray to prefer that node
with a soft ``NodeAffinitySchedulingStrategy`` that *spills*: when the node has no free
GPUs (of the trial's type) or is gone, the trial goes wherever Ray would have put it, at
once — it never waits for the warm node. The preference only picks among the nodes the
trial's resources allow. Which node is warm for which model is the executor's memory
(:class:`slotune.tuner.sweep.executors.RayExecutor`); a Ray without the spilling option gets no
preference at all (plain soft affinity would make a trial wait for a busy node).

**Logs travel in the result**, not on the node's disk: each trial runs in a temporary
directory removed after it, and the engine's log comes back as a capped excerpt
(:func:`log_excerpt`: the start-up lines and the last lines, secrets redacted) in
``TrialResult.log_tail`` when the trial itself did not already put its failure tail
there. The start-up facts the engine printed (KV capacity, phases, version) are in
``TrialResult.engine``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from slotune.workers.contracts import PhaseTimings, TrialResult, TrialSpec
from slotune.workers.engines import adapter_for
from slotune.workers.engines.redact import flag_secrets, redact
from slotune.workers.trial.live import run_trial

__all__ = [
    "GPU_TYPES_ENV",
    "GPU_TYPE_PREFIX",
    "LOG_EXCERPT_BYTES",
    "collect_trial",
    "gpu_type_resource",
    "log_excerpt",
    "parse_gpu_types",
    "redact_log",
    "run_trial_task",
    "submit_trial",
    "trial_options",
    "trial_resources",
    "uses_gpu_types",
]

log = logging.getLogger(__name__)

GPU_TYPE_PREFIX = "gpu_type:"
"""Custom Ray resource naming a node's GPU type, one unit per GPU."""
GPU_TYPES_ENV = "SLOTUNE_GPU_TYPES"
"""``name=label,…``: space GPU kind → node label (required for vllm, optional for sim)."""
RECHECK_S = 10.0
LOG_EXCERPT_BYTES = 8192
"""Cap of the engine log excerpt stored with a result (the database holds every trial)."""
_HEAD_LINES = 30

_LOST = (WorkerCrashedError, NodeDiedError, ObjectLostError, OwnerDiedError, ActorDiedError)

# session name → whether any node advertises a gpu_type resource; negatives expire.
_typed_cluster: dict[str, tuple[bool, float]] = {}


def run_trial_task(spec_json: str) -> str:
    """The body of a trial task (on the worker): run it in a scratch dir, log in the result."""
    spec = TrialSpec.model_validate_json(spec_json)
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    workdir = Path(tempfile.mkdtemp(prefix=f"slotune-{_safe(spec.run_id)}-"))
    try:
        result = run_trial(spec, gpu_ids=gpu_ids, workdir=workdir)
        update: dict[str, Any] = {"node": ray.get_runtime_context().get_node_id()}
        if result.log_tail is None:
            excerpt = log_excerpt(workdir / "engine.log",
                                  redact=lambda text: redact_log(text, spec))
            if excerpt:
                update["log_tail"] = excerpt
        return result.model_copy(update=update).model_dump_json()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


_trial_task = ray.remote(max_retries=0)(run_trial_task)


def trial_options(spec: TrialSpec, prefer_node: str | None = None) -> dict[str, Any]:
    """The Ray task options of a trial: its GPUs, their type on a typed cluster, and
    ``prefer_node`` (a Ray node id, where its model's weights are warm) when that node has
    them free — see the module docstring."""
    # Retries are the coordinator's decision (it re-enqueues lost trials), not Ray's.
    options: dict[str, Any] = {"num_gpus": spec.gpus,
                               "name": f"slotune-trial-{spec.run_id}"}
    if spec.device == "cpu":
        # vLLM's CPU build: one core per tensor-parallel rank, and no GPU at all.
        options.update(num_gpus=0, num_cpus=spec.gpus)
    else:
        resources = trial_resources(spec) if uses_gpu_types() else {}
        if resources:
            options["resources"] = resources
    strategy = _prefer(prefer_node) if prefer_node else None
    if strategy is not None:
        options["scheduling_strategy"] = strategy
    return options


def submit_trial(spec: TrialSpec, prefer_node: str | None = None) -> ray.ObjectRef[str]:
    """Schedule a trial on a worker with ``spec.gpus`` GPUs (of its type) free, on
    ``prefer_node`` when that one has them."""
    return _trial_task.options(**trial_options(spec, prefer_node)).remote(
        spec.model_dump_json())


def collect_trial(ref: ray.ObjectRef[str], spec: TrialSpec, *,
                  timeout_s: float | None = None) -> TrialResult:
    """The trial's result; a lost worker, node or object becomes ``worker_lost`` (with no
    node: where it ran is not known)."""
    started = time.perf_counter()
    try:
        return TrialResult.model_validate_json(ray.get(ref, timeout=timeout_s))
    except (*_LOST, TaskCancelledError) as exc:
        message = f"{type(exc).__name__}: {exc}"
    except RayTaskError as exc:
        # The trial code itself raised: a bug, not the engine; keep the traceback text.
        message = f"trial task raised: {exc}"
    return TrialResult(run_id=spec.run_id, status="failed", failure="worker_lost",
                       failure_message=message[:2000],
                       timings=PhaseTimings(total_s=time.perf_counter() - started))


def parse_gpu_types(text: str | None) -> dict[str, str]:
    """``"h100-sxm=h100,a100-80g=a100"`` → ``{"h100-sxm": "h100", "a100-80g": "a100"}``.

    Raises ``ValueError`` naming the item that is not ``name=label``.
    """
    mapping: dict[str, str] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, label = (part.strip() for part in item.partition("="))
        if not sep or not name or not label:
            raise ValueError(f"{GPU_TYPES_ENV}: {item!r} is not 'name=label' "
                             "(e.g. h100-sxm=h100)")
        mapping[name] = label
    return mapping


def gpu_type_resource(spec: TrialSpec, mapping: dict[str, str] | None = None) -> str | None:
    """The ``gpu_type:*`` resource this trial needs, or None (any GPU will do)."""
    if spec.device == "cpu":
        return None  # CPU trials ask for CPUs, not a GPU type
    mapping = parse_gpu_types(os.environ.get(GPU_TYPES_ENV)) if mapping is None else mapping
    label = adapter_for(spec.engine).gpu_type(spec, mapping)
    return GPU_TYPE_PREFIX + label if label else None


def trial_resources(spec: TrialSpec, mapping: dict[str, str] | None = None) -> dict[str, float]:
    """Custom resources of a trial on a typed cluster: its GPU type × tensor parallelism."""
    resource = gpu_type_resource(spec, mapping)
    return {resource: float(spec.gpus)} if resource else {}


def redact_log(text: str, spec: TrialSpec, env: Mapping[str, str] | None = None) -> str:
    """``text`` without secrets: secret-named variables of this worker, secret flag values.

    The engine's environment is a subset of the worker's, so this hides at least what
    the adapter's own redaction hides; the excerpt is stored in the database.
    """
    return redact(text, os.environ if env is None else env, flag_secrets(spec.engine_flags))


def log_excerpt(path: Path, limit: int = LOG_EXCERPT_BYTES, *,
                redact: Callable[[str], str] | None = None) -> str | None:
    """The log's first lines (start-up facts) and its last, within ``limit`` bytes."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    if redact is not None:
        text = redact(text)
    if len(text.encode()) <= limit:
        return text or None
    lines = text.splitlines()
    head = "\n".join(lines[:_HEAD_LINES])[: limit // 2]
    budget = limit - len(head.encode()) - 64
    tail: list[str] = []
    used = 0
    for line in reversed(lines[_HEAD_LINES:]):
        size = len(line.encode()) + 1
        if used + size > budget:
            break
        tail.append(line)
        used += size
    skipped = len(lines) - min(_HEAD_LINES, len(lines)) - len(tail)
    excerpt = f"{head}\n[… {skipped} lines omitted …]\n" + "\n".join(reversed(tail))
    return excerpt.encode()[:limit].decode(errors="ignore")


def uses_gpu_types() -> bool:
    """Whether trials ask for ``gpu_type:*`` resources: the operator declared node labels
    in ``$SLOTUNE_GPU_TYPES``, or any node of this Ray session advertises one. Declared, it
    holds while no typed node runs — every worker group scaled to zero — so a trial's
    demand names its type and an autoscaler adds a node of that type, not any GPU node."""
    if parse_gpu_types(os.environ.get(GPU_TYPES_ENV)):
        return True
    session = ray.get_runtime_context().get_session_name()
    known = _typed_cluster.get(session)
    now = time.monotonic()
    if known is not None and (known[0] or now - known[1] < RECHECK_S):
        return known[0]
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    typed = any(key.startswith(GPU_TYPE_PREFIX) for key in resources)
    _typed_cluster[session] = (typed, now)
    if typed:
        log.info("cluster advertises GPU types: %s",
                 sorted(k for k in resources if k.startswith(GPU_TYPE_PREFIX)))
    return typed


def _prefer(node_id: str) -> NodeAffinitySchedulingStrategy | None:
    """Ray's "this node if it has the resources free now, else anywhere" strategy; None
    on a Ray without ``_spill_on_unavailable`` (there a soft affinity waits for a busy
    node, which would hold a trial back for the sake of a faster boot)."""
    if not _can_spill():
        return None
    return NodeAffinitySchedulingStrategy(node_id, soft=True, _spill_on_unavailable=True)


@functools.cache
def _can_spill() -> bool:
    parameters = inspect.signature(NodeAffinitySchedulingStrategy).parameters
    if "_spill_on_unavailable" in parameters:
        return True
    log.info("this Ray (%s) cannot spill a node affinity: trials are not steered to the "
             "node where their model's weights are warm", ray.__version__)
    return False


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:40]
