"""Workloads and the best configuration measured for each (``best_config_per_workload``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import TypeAdapter

from slotune.tuner.api.deps import ReadCacheDep, SettingsDep, StoreDep
from slotune.tuner.api.errors import ERROR_RESPONSES, InvalidInput
from slotune.tuner.api.params import NameFilter, NamePath, SloFilter, canonical_slo
from slotune.tuner.api.schemas import BestListOut, BestOut, ListOut, NoPassingOut, WorkloadOut
from slotune.tuner.db.records import BestConfig, NoPassingConfig
from slotune.tuner.db.snapshot import WorkloadSnapshot
from slotune.tuner.planning.frontier import AmbiguousGroup, Frontier, build_frontier, to_csv
from slotune.tuner.planning.planner import AmbiguousSlo

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


@router.get("/workloads/{name}/frontier", response_model=Frontier,
            responses={200: {"content": {"text/csv": {}},
                             "description": "JSON, or CSV (one row per point) with "
                                            "format=csv or Accept: text/csv"}})
def frontier(name: NamePath, cache: ReadCacheDep, settings: SettingsDep,
             model: NameFilter = None, gpu: NameFilter = None, slo: SloFilter = None,
             fmt: Annotated[Literal["json", "csv"] | None, Query(
                 alias="format",
                 description="json (default) or csv; else the Accept header decides")] = None,
             accept: Annotated[str | None, Header()] = None) -> Response:
    """Every probed point of the workload's capacity sweeps on one (model, GPU) —
    interactivity (output tokens/s per user = 1000 ÷ TPOT at the SLO's percentile)
    against output tokens/s per GPU (and per dollar where the GPU is priced) — with the
    Pareto frontier, whether each meets the SLO, the winner, and the best capacity per
    GPU under a grid of TTFT and TPOT limits (rescored from the stored probes).

    404: an unknown workload, or no capacity sweep of it. 422: measured on several
    (model, GPU) or under several SLOs and none named (the message lists them).
    """
    key = canonical_slo(slo)
    prices = settings.planner.prices(None)
    csv = fmt == "csv" or (fmt is None and accept is not None and "text/csv" in accept)

    def rendered(snapshot: WorkloadSnapshot) -> bytes | str:
        answer = build_frontier(snapshot, model=model, gpu=gpu, slo=key, gpu_prices=prices)
        # The bytes FastAPI itself would send for the model (its JSON fast path), made
        # once per change of the workload rather than once per request.
        return to_csv(answer) if csv else _FRONTIER_JSON.dump_json(answer, by_alias=True)

    try:
        body = cache.derived(name, ("frontier", model, gpu, key, tuple(sorted(prices.items())),
                                    csv), rendered)
    except AmbiguousGroup as exc:
        raise InvalidInput(("query", exc.field), str(exc), "ambiguous") from None
    except AmbiguousSlo as exc:
        raise InvalidInput(("query", "slo"), str(exc), "ambiguous_slo") from None
    if isinstance(body, str):
        return PlainTextResponse(body, media_type="text/csv")
    return Response(body, media_type="application/json")


_FRONTIER_JSON = TypeAdapter(Frontier)


@router.get("/best", response_model=BestListOut)
def best_all(store: StoreDep) -> BestListOut:
    """Every row of ``best_config_per_workload``, with the ``vllm serve`` command of each,
    and every measured group where no configuration meets the SLO."""
    rows = [BestOut.from_record(r) for r in store.best_config_per_workload()]
    missing = [NoPassingOut.from_record(r) for r in store.without_passing_config()]
    return BestListOut(data=rows, count=len(rows), without_passing=missing)
