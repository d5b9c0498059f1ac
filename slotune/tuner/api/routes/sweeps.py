"""Sweeps: queue, list, read, cancel; their trials, experiment cards and report."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from slotune.tuner.api.deps import ReadCacheDep, SettingsDep, StoreDep, UniqueKeys, WriterDep
from slotune.tuner.api.errors import ERROR_RESPONSES, InvalidInput
from slotune.tuner.api.params import Limit, NameFilter, Offset, SweepId
from slotune.tuner.api.schemas import CardOut, ListOut, SweepOut, TrialOut
from slotune.tuner.db.models import SweepStatus, SweepTrialStatus, TrialRole
from slotune.tuner.report import build_report, render
from slotune.tuner.spaces import SpaceError
from slotune.tuner.sweep.placement import declared_cluster, unplaceable_layouts
from slotune.tuner.sweep.request import REQUEST_ERRORS, SweepRequest, queue_sweep, resolve
from slotune.workers.contracts import SLO
from slotune.workers.loadgen import WorkloadError
from slotune.workers.trust import Trust

router = APIRouter(prefix="/sweeps", tags=["sweeps"], responses=ERROR_RESPONSES)
log = logging.getLogger("slotune.api")


@router.post("", status_code=status.HTTP_201_CREATED, response_model=SweepOut)
def create_sweep(request: SweepRequest, store: StoreDep, settings: SettingsDep, _: WriterDep,
                 __: Annotated[None, UniqueKeys]) -> SweepOut:
    """Queue a sweep (a coordinator claims and runs it). Body: a sweep request.

    The request is a client's: it names shipped spaces and workloads, files inside the
    operator's data directories, and registered engines and quality commands — never a
    server path or a command of its own (docs/guides/trust.md)."""
    if request.slo is not None:
        try:
            SLO.parse(request.slo)
        except ValueError as exc:
            raise InvalidInput(["body", "slo"], str(exc)) from None
    trust = settings.trust.for_client()
    try:
        warnings = _placement_warnings(request, trust)
        record = queue_sweep(store, request, trust=trust)
    except SpaceError as exc:
        raise InvalidInput(["body", "space"], str(exc)) from None
    except WorkloadError as exc:
        raise InvalidInput(["body", "workload"], str(exc)) from None
    except REQUEST_ERRORS as exc:
        raise InvalidInput(["body"], str(exc)) from None
    return SweepOut.from_record(record).model_copy(update={"warnings": warnings})


def _placement_warnings(request: SweepRequest, trust: Trust) -> list[str]:
    """What ``sweep submit`` warns about: layouts no node of the declared cluster holds."""
    try:
        cluster = declared_cluster()
    except ValueError as exc:  # the server's setting, not the client's input
        log.warning("placement not checked: %s", exc)
        return []
    if cluster is None:
        return []
    return [f"{line}: those trials are recorded infeasible, never booted"
            for line in unplaceable_layouts(resolve(request, trust)[0], cluster)]


@router.get("", response_model=ListOut[SweepOut])
def list_sweeps(store: StoreDep, status: SweepStatus | None = None,
                workload: NameFilter = None, owner: NameFilter = None,
                offset: Offset = 0, limit: Limit = 50) -> ListOut[SweepOut]:
    """Sweeps, newest first; ``count`` is the total before paging."""
    page = store.list_sweeps(status=status, workload=workload, owner=owner, offset=offset,
                             limit=limit)
    return ListOut(data=[SweepOut.from_record(s) for s in page.data], count=page.count)


@router.get("/{sweep_id}", response_model=SweepOut)
def get_sweep(sweep_id: SweepId, store: StoreDep) -> SweepOut:
    return SweepOut.from_record(store.get_sweep(sweep_id))


@router.post("/{sweep_id}/cancel", response_model=SweepOut)
def cancel_sweep(sweep_id: SweepId, store: StoreDep, _: WriterDep) -> SweepOut:
    """Cancel a queued or running sweep (idempotent; 409 once it has finished)."""
    return SweepOut.from_record(store.cancel_sweep(sweep_id, reason="cancelled via the API"))


@router.get("/{sweep_id}/trials", response_model=ListOut[TrialOut])
def list_trials(sweep_id: SweepId, store: StoreDep, status: SweepTrialStatus | None = None,
                role: TrialRole | None = None, offset: Offset = 0,
                limit: Limit = 100) -> ListOut[TrialOut]:
    """Every boot of a sweep by Optuna number, then repeat and attempt: its search trials,
    their confirmation repeats and its quality baseline (``role`` selects one kind)."""
    page = store.list_trials(sweep_id, status=status, role=role or "any", offset=offset,
                             limit=limit)
    return ListOut(data=[TrialOut.from_record(t) for t in page.data], count=page.count)


@router.get("/{sweep_id}/cards", response_model=ListOut[CardOut])
def list_cards(sweep_id: SweepId, store: StoreDep) -> ListOut[CardOut]:
    """The experiment cards of a guided sweep, by step."""
    cards = store.list_cards(sweep_id)
    return ListOut(data=[CardOut.from_record(c) for c in cards], count=len(cards))


@router.get("/{sweep_id}/report", response_class=Response,
            responses={200: {"content": {"text/html": {}, "text/markdown": {}}}})
def sweep_report(sweep_id: SweepId, cache: ReadCacheDep,
                 format: Annotated[Literal["html", "md"], Query()] = "html") -> Response:
    """The sweep's report, rendered by :mod:`slotune.tuner.report` (HTML or Markdown) from its
    workload's snapshot, once per change of it."""
    text = cache.derived(cache.workload_of_sweep(sweep_id), ("report", sweep_id, format),
                         lambda snapshot: render(build_report(snapshot, sweep_id), format))
    media = "text/html; charset=utf-8" if format == "html" else "text/markdown; charset=utf-8"
    return Response(text, media_type=media)
