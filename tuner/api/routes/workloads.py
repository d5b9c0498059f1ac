"""Workloads and the best configuration measured for each (``best_config_per_workload``)."""

from __future__ import annotations

from collections import defaultdict

from fastapi import APIRouter

from tuner.api.deps import StoreDep
from tuner.api.errors import ERROR_RESPONSES
from tuner.api.params import NameFilter, NamePath, SloFilter, canonical_slo
from tuner.api.schemas import BestListOut, BestOut, ListOut, NoPassingOut, WorkloadOut
from tuner.db.records import BestConfig, NoPassingConfig

router = APIRouter(tags=["workloads"], responses=ERROR_RESPONSES)


@router.get("/workloads", response_model=ListOut[WorkloadOut])
def list_workloads(store: StoreDep) -> ListOut[WorkloadOut]:
    """Every workload with its best configuration per (model, gpu, slo)."""
    best: dict[str, list[BestConfig]] = defaultdict(list)
    for row in store.best_config_per_workload():  # one query for all, not one per workload
        best[row.workload].append(row)
    workloads = store.list_workloads()
    return ListOut(data=[WorkloadOut.from_record(w, best[w.name]) for w in workloads],
                   count=len(workloads))


@router.get("/workloads/{name}", response_model=WorkloadOut)
def get_workload(name: NamePath, store: StoreDep) -> WorkloadOut:
    return WorkloadOut.from_record(store.get_workload(name), store.best_for_workload(name))


@router.get("/workloads/{name}/best", response_model=BestListOut)
def best_for_workload(name: NamePath, store: StoreDep, model: NameFilter = None,
                      gpu: NameFilter = None, slo: SloFilter = None) -> BestListOut:
    """The winner per (model, gpu, slo) among configurations that met the SLO: confirmed
    first, then the highest objective.

    Empty ``data`` when none met it yet; ``without_passing`` then says, per measured
    (model, gpu, slo), that none meets the SLO and which came closest. 404 for an unknown
    workload.
    """
    key = canonical_slo(slo)

    def wanted(row: BestConfig | NoPassingConfig) -> bool:
        return ((model is None or row.model == model) and (gpu is None or row.gpu == gpu)
                and (key is None or row.slo == key))

    rows = [BestOut.from_record(r) for r in store.best_for_workload(name) if wanted(r)]
    missing = [NoPassingOut.from_record(r) for r in store.without_passing_config(name)
               if wanted(r)]
    return BestListOut(data=rows, count=len(rows), without_passing=missing)


@router.get("/best", response_model=BestListOut)
def best_all(store: StoreDep) -> BestListOut:
    """Every row of ``best_config_per_workload``, with the ``vllm serve`` command of each,
    and every measured group where no configuration meets the SLO."""
    rows = [BestOut.from_record(r) for r in store.best_config_per_workload()]
    missing = [NoPassingOut.from_record(r) for r in store.without_passing_config()]
    return BestListOut(data=rows, count=len(rows), without_passing=missing)
