"""Which parts of a search space can ever be placed where its trials would run.

A trial needs ``spec.gpus`` (TP × PP × DP) devices on one node; the executor knows what its
cluster can ever offer (:meth:`~slotune.tuner.sweep.executors.TrialExecutor.unplaceable`). Before a
night starts, :func:`unplaceable_layouts` walks the space's parallel layouts — the values
of its ``tensor_parallel_size`` / ``pipeline_parallel_size`` / ``data_parallel_size``
knobs — and says which can
never run there, so ``sweep run`` / ``sweep submit`` can warn (or, ``--strict``, refuse)
instead of the sweep finding out trial by trial. During the sweep the coordinator records
such trials ``infeasible`` at once, with the same reason.

Where no executor runs (``sweep submit``, the API), the cluster is what the operator
declared: ``$SLOTUNE_MAX_NODE_GPUS``, the GPUs of the largest node a trial can land on
(:func:`declared_cluster`; None when undeclared — then only the coordinator can tell).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Protocol

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.sweep.executors import MAX_NODE_GPUS_ENV, Largest, declared_max_node_gpus
from slotune.workers.contracts import KnobValue, TrialSpec

__all__ = ["PARALLEL_KNOBS", "DeclaredCluster", "Placer", "declared_cluster", "largest_replica",
           "parallel_layouts", "unplaceable_layouts"]


class Placer(Protocol):
    """Anything that can say why a trial could never be placed: an executor, or
    :class:`DeclaredCluster`."""

    def unplaceable(self, spec: TrialSpec) -> str | None: ...


class DeclaredCluster:
    """The cluster as the operator declared it: its largest node has ``max_node_gpus``."""

    def __init__(self, max_node_gpus: int) -> None:
        self._largest = Largest(gpus=max_node_gpus, cpus=max_node_gpus, gpu_types={},
                                where=f"the largest node ({MAX_NODE_GPUS_ENV})")

    def unplaceable(self, spec: TrialSpec) -> str | None:
        return None if spec.device == "cpu" else self._largest.refuses(spec)


def declared_cluster() -> DeclaredCluster | None:
    """:class:`DeclaredCluster` from ``$SLOTUNE_MAX_NODE_GPUS``; None when it is unset.

    ``ValueError`` naming the variable when it is not a whole number.
    """
    gpus = declared_max_node_gpus()
    return None if gpus is None else DeclaredCluster(gpus)

PARALLEL_KNOBS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
"""The knobs that decide how many devices one replica takes."""


def parallel_layouts(space: SearchSpace) -> Iterator[dict[str, KnobValue]]:
    """Every combination of the space's parallelism knobs (one empty layout when it has
    none); a continuous one contributes its high end, the largest it can sample."""
    names = [name for name in PARALLEL_KNOBS if name in space.knobs]
    options = []
    for name in names:
        values = space.choices(name)
        options.append(values if values is not None else
                       [getattr(space.knobs[name], "high", 1)])
    for combo in itertools.product(*options):
        yield dict(zip(names, combo, strict=True))


def largest_replica(space: SearchSpace) -> int:
    """The most devices one trial of the space can need."""
    return max(_spec(space, layout).gpus for layout in parallel_layouts(space))


def unplaceable_layouts(space: SearchSpace, executor: Placer) -> list[str]:
    """One line per layout that can never be placed on ``executor``, naming its knob
    values and why, e.g. ``tensor_parallel_size=8: needs 8 × h100-sxm; the largest node
    offers 2``. Empty when every trial of the space can run there."""
    lines = []
    for layout in parallel_layouts(space):
        reason = executor.unplaceable(_spec(space, layout))
        if reason is not None:
            named = ", ".join(f"{k}={v}" for k, v in layout.items()) or "every trial"
            lines.append(f"{named}: {reason}")
    return lines


def _spec(space: SearchSpace, layout: dict[str, KnobValue]) -> TrialSpec:
    return space.to_trial_spec({**space.defaults(), **layout}, "placement-check")
