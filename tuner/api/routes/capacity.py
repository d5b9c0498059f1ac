"""``POST /api/v1/capacity``: replicas and GPUs for a target rate, from measured capacity.

A pure computation over what is stored (nothing is written), so it needs no write token;
it is a POST only because the question is a body.
"""

from __future__ import annotations

from fastapi import APIRouter

from tuner.api.deps import StoreDep
from tuner.api.errors import ERROR_RESPONSES
from tuner.api.params import canonical_slo
from tuner.api.schemas import CapacityIn, CapacityOut
from tuner.planner import plan_capacity

router = APIRouter(tags=["capacity"], responses=ERROR_RESPONSES)


@router.post("/capacity", response_model=CapacityOut)
def capacity(question: CapacityIn, store: StoreDep) -> CapacityOut:
    """How many replicas of which configuration carry ``target_rps`` within the SLO.

    ``replicas = ceil(target_rps / (per_replica_rps × (1 − headroom)))``; ``basis`` says
    whether per-replica capacity was measured (capacity mode) or is the goodput at the
    workload's rate, a lower bound. 404 when nothing is measured, 422 when nothing met
    the SLO or several SLOs match and none was named.
    """
    plan = plan_capacity(store, workload=question.workload, target_rps=question.target_rps,
                         headroom=question.headroom, model=question.model, gpu=question.gpu,
                         slo=canonical_slo(question.slo, ("body", "slo")))
    return CapacityOut.from_plan(plan)
