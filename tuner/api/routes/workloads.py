"""Workloads and the best configuration measured for each (``best_config_per_workload``)."""

from __future__ import annotations

from collections import defaultdict

from fastapi import APIRouter

from tuner.api.deps import StoreDep
from tuner.api.errors import ERROR_RESPONSES
from tuner.api.params import NameFilter, NamePath, SloFilter, canonical_slo
from tuner.api.schemas import BestOut, ListOut, WorkloadOut
from tuner.db.records import BestConfig

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


@router.get("/workloads/{name}/best", response_model=ListOut[BestOut])
def best_for_workload(name: NamePath, store: StoreDep, model: NameFilter = None,
                      gpu: NameFilter = None, slo: SloFilter = None) -> ListOut[BestOut]:
    """The winner per (model, gpu, slo): confirmed first, then the highest objective.

    Empty ``data`` when nothing was measured ok yet; 404 for an unknown workload.
    """
    key = canonical_slo(slo)
    rows = [BestOut.from_record(r) for r in store.best_for_workload(name)
            if (model is None or r.model == model) and (gpu is None or r.gpu == gpu)
            and (key is None or r.slo == key)]
    return ListOut(data=rows, count=len(rows))


@router.get("/best", response_model=ListOut[BestOut])
def best_all(store: StoreDep) -> ListOut[BestOut]:
    """Every row of ``best_config_per_workload``, with the ``vllm serve`` command of each."""
    rows = [BestOut.from_record(r) for r in store.best_config_per_workload()]
    return ListOut(data=rows, count=len(rows))
