"""``POST /api/v1/capacity``: replicas and GPUs for a target rate, from measured capacity.

A pure computation over what is stored (nothing is written), so it needs no write token;
it is a POST only because the question is a body.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter

from slotune.tuner.api.deps import ReadCacheDep, SettingsDep
from slotune.tuner.api.errors import ERROR_RESPONSES
from slotune.tuner.api.params import canonical_slo
from slotune.tuner.api.schemas import CapacityIn, CapacityOut
from slotune.tuner.db.snapshot import WorkloadSnapshot
from slotune.tuner.planning.planner import plan_capacity
from slotune.tuner.settings import Settings

__all__ = ["answer", "router"]

router = APIRouter(tags=["capacity"], responses=ERROR_RESPONSES)


@router.post("/capacity", response_model=CapacityOut)
def capacity(question: CapacityIn, cache: ReadCacheDep, settings: SettingsDep) -> CapacityOut:
    """The cheapest number of replicas of which configuration that carries ``target_rps``
    within the SLO.

    Every measured configuration is a candidate: ``replicas = ceil(target_rps /
    (per_replica_rps × (1 − headroom)))``, ``gpus = replicas × gpus_per_replica``,
    ``cost_per_hour = gpus × price_per_gpu_hour`` (``gpu_prices`` over the server's
    ``SLOTUNE_GPU_PRICES``). ``options`` holds the cheapest plan per (model, GPU); unpriced
    GPUs rank after priced ones, by GPUs. ``basis`` says whether per-replica capacity was
    measured (capacity mode), is the goodput at the workload's rate, a lower bound, or —
    ``rescored_probes``, when no sweep measured the SLO asked for — was read off the
    probes capacity sweeps under other SLOs stored (``confidence`` says how sure;
    ``remeasure`` names configurations the probes cannot decide that could beat it);
    ``notes`` say what to know before sizing on it. 404 when nothing is measured (naming
    the SLOs that were), 422 when nothing met the SLO, several SLOs match and none was
    named, or a price is not a number from 0 to 1e6.
    """
    return answer(question, cache.snapshot, settings)


def answer(question: CapacityIn, snapshot_of: Callable[[str], WorkloadSnapshot],
           settings: Settings) -> CapacityOut:
    """The route's answer, for callers without HTTP (``slotune plan``): the same planner,
    prices and shape, on ``snapshot_of(workload)`` (the route's cached snapshot, the CLI's
    freshly loaded one). Raises what :func:`~slotune.tuner.planning.planner.plan_capacity` and
    ``snapshot_of`` raise (:class:`~slotune.tuner.db.errors.NotFound`), and
    :class:`~slotune.tuner.api.errors.InvalidInput` for an SLO that does not parse (first)."""
    key = canonical_slo(question.slo, ("body", "slo"))
    prices = settings.planner.prices(question.gpu_prices)
    plan = plan_capacity(snapshot_of(question.workload), target_rps=question.target_rps,
                         headroom=question.headroom, model=question.model, gpu=question.gpu,
                         slo=key, gpu_prices=prices)
    return CapacityOut.from_plan(plan)
