"""Sweeps: queue, list, read, cancel; their trials, experiment cards and report."""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response, status

from tuner.api.deps import StoreDep, UniqueKeys, WriterDep
from tuner.api.errors import ERROR_RESPONSES, InvalidInput
from tuner.api.params import Limit, NameFilter, Offset, SweepId
from tuner.api.schemas import CardOut, ListOut, SweepOut, TrialOut
from tuner.db.models import SweepStatus, SweepTrialStatus, TrialRole
from tuner.report import render_report
from tuner.spaces import SpaceError
from tuner.sweep.placement import declared_cluster, unplaceable_layouts
from tuner.sweep.request import REQUEST_ERRORS, SweepRequest, queue_sweep, resolve
from workers.contracts import SLO
from workers.engines import ENGINES
from workers.loadgen import WorkloadError
from workers.sim.device_file import is_device_file

router = APIRouter(prefix="/sweeps", tags=["sweeps"], responses=ERROR_RESPONSES)
log = logging.getLogger("slotune.api")


# Over HTTP a space or workload given by name must be a shipped one: a path would let a
# client make the server read (and echo parse errors of) any file it can open.
_SHIPPED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


@router.post("", status_code=status.HTTP_201_CREATED, response_model=SweepOut)
def create_sweep(request: SweepRequest, store: StoreDep, _: WriterDep,
                 __: Annotated[None, UniqueKeys]) -> SweepOut:
    """Queue a sweep (a coordinator claims and runs it). Body: a sweep request."""
    _refuse_paths(request)
    if request.slo is not None:
        try:
            SLO.parse(request.slo)
        except ValueError as exc:
            raise InvalidInput(["body", "slo"], str(exc)) from None
    try:
        warnings = _placement_warnings(request)
        record = queue_sweep(store, request)
    except SpaceError as exc:
        raise InvalidInput(["body", "space"], str(exc)) from None
    except WorkloadError as exc:
        raise InvalidInput(["body", "workload"], str(exc)) from None
    except REQUEST_ERRORS as exc:
        raise InvalidInput(["body"], str(exc)) from None
    return SweepOut.from_record(record).model_copy(update={"warnings": warnings})


def _placement_warnings(request: SweepRequest) -> list[str]:
    """What ``sweep submit`` warns about: layouts no node of the declared cluster holds."""
    try:
        cluster = declared_cluster()
    except ValueError as exc:  # the server's setting, not the client's input
        log.warning("placement not checked: %s", exc)
        return []
    if cluster is None:
        return []
    return [f"{line}: those trials are recorded infeasible, never booted"
            for line in unplaceable_layouts(resolve(request)[0], cluster)]


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
def sweep_report(sweep_id: SweepId, store: StoreDep,
                 format: Annotated[Literal["html", "md"], Query()] = "html") -> Response:
    """The sweep's report, rendered by :mod:`tuner.report` (HTML or Markdown)."""
    text = render_report(store, sweep_id, format)
    media = "text/html; charset=utf-8" if format == "html" else "text/markdown; charset=utf-8"
    return Response(text, media_type=media)


def _refuse_paths(request: SweepRequest) -> None:
    for field in ("space", "workload"):
        value = getattr(request, field)
        if isinstance(value, str) and not _SHIPPED_NAME.match(value):
            raise InvalidInput(["body", field], f"{field} {value!r}: over the API give a "
                               f"shipped {field} name or the {field} inline, not a file path")
    inline = [(["body", "workload"], request.workload)]
    if isinstance(request.space, dict):
        inline.append((["body", "space", "workload"], request.space.get("workload")))
        _refuse_sim_files(request.space)
    for loc, workload in inline:
        dataset = workload.get("dataset") if isinstance(workload, dict) else None
        path = dataset.get("path") if isinstance(dataset, dict) else None
        if isinstance(path, str) and not _SHIPPED_NAME.match(path.removesuffix(".jsonl")):
            raise InvalidInput([*loc, "dataset", "path"], f"trace path {path!r}: over the "
                               "API a trace is named by its file name only (e.g. "
                               "'chat.jsonl'), looked up under $SLOTUNE_HOME; no directories")


def _refuse_sim_files(space: dict[str, Any]) -> None:
    """An inline space may not point the server at its own files: a device file (``gpu``)
    or, for the simulated engine, a model directory would be read here to check it."""
    sim = space.get("sim")
    for loc, gpu in ((["body", "space", "gpu"], space.get("gpu")),
                     (["body", "space", "sim", "gpu"],
                      sim.get("gpu") if isinstance(sim, dict) else None)):
        if isinstance(gpu, str) and is_device_file(gpu):
            raise InvalidInput(loc, f"gpu {gpu!r}: over the API give a catalogue GPU name; a "
                               "device file is read where the space is loaded (use the CLI "
                               "with the space file)")
    model = space.get("model")
    engine = space.get("engine", "sim")  # not a known name: the space's check says so
    adapter = ENGINES.get(engine) if isinstance(engine, str) else None
    if adapter is not None and adapter.simulated and isinstance(model, str) \
            and model.strip().startswith(("/", "~", ".")):
        raise InvalidInput(["body", "space", "model"], f"model {model!r}: over the API a "
                           "simulated space names its model; a model directory is read where "
                           "the space is loaded (use the CLI with the space file)")
