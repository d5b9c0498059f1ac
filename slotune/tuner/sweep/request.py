"""What a sweep is asked to do, and how it is queued: one definition for CLI and API.

A :class:`SweepRequest` names a search space (shipped name, file, or inline mapping),
optionally overrides its workload and SLO, picks a strategy and sets a
:class:`SweepBudget`. :func:`queue_sweep` resolves all of that and stores a ``queued``
sweep; a coordinator (``slotune sweep run`` in the foreground, or ``slotune
coordinator``) claims and runs it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from slotune.tuner.db.records import ExecutorChoice, SweepRecord
from slotune.tuner.db.store import Store
from slotune.tuner.spaces import SearchSpace, SpaceError, load_space, parse_space
from slotune.tuner.strategies import DEFAULT_STRATEGY, STRATEGIES
from slotune.tuner.strategies.twin.model import Twin
from slotune.workers.contracts import SLO, ObjectiveMode, Workload
from slotune.workers.loadgen import WorkloadError, load_workload
from slotune.workers.loadgen.generate.workload_files import parse_workload
from slotune.workers.trust import OPERATOR, Trust

__all__ = ["SweepBudget", "SweepRequest", "queue_sweep", "resolve_space", "stored_space"]


SEED_MAX = 2**32 - 1
"""Optuna's samplers (numpy's RandomState) take seeds in [0, 2**32 - 1]."""


def _check_text(value: Any, where: str = "request") -> None:
    """Refuse text that cannot be stored or printed (a NUL, a lone UTF-16 surrogate)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{where}: text may not hold a NUL character (\\u0000), which "
                             "no database column can store; remove it")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{where}: text must be valid Unicode (it holds a lone "
                             "surrogate such as \\ud800, which cannot be stored)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where)
            _check_text(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for item in value:
            _check_text(item, where)


class _Request(BaseModel):
    # Finite numbers only: NaN passes every comparison bound as False, and Infinity was
    # stored as null (a GPU-hour budget of "no budget").
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _encodable(cls, data: Any) -> Any:
        _check_text(data)
        return data


class SweepBudget(_Request):
    """When a sweep stops searching (whichever comes first)."""

    max_trials: int = Field(20, ge=1, le=10_000)
    max_gpu_hours: float | None = Field(None, gt=0)
    """GPU time charged: each trial's wall time × its GPUs."""
    deadline: datetime | None = None
    """Stop launching trials after this moment ("done by 07:00")."""
    max_parallel: int | None = Field(None, ge=1, le=1024)
    """At most this many trials at once (default: as many as free GPU groups)."""
    plateau_trials: int | None = Field(None, ge=2)
    """Stop after this many finished trials without an improvement beyond noise."""
    confirm_top: int = Field(3, ge=0, le=10)
    """Re-run the best this many configurations after the search (0: no confirmation)."""
    confirm_repeats: int = Field(3, ge=2, le=10)


class SweepRequest(_Request):
    """A sweep to queue."""

    space: str | dict[str, Any] = "lab"
    """A shipped space name (``lab``), a YAML path, or the space inline."""
    name: str | None = Field(None, min_length=1, max_length=200)
    workload: str | dict[str, Any] | None = None
    """Override the space's workload: a built-in name, a YAML path, or inline."""
    slo: str | None = None
    """Override the space's SLO, e.g. ``ttft:300,tpot:50``."""
    strategy: str = DEFAULT_STRATEGY
    mode: ObjectiveMode | None = None
    allow_lossy: bool = False
    """Let lossy knob values (quantisation, fp8 KV, …) score without their quality check."""
    budget: SweepBudget = Field(default_factory=SweepBudget)
    seed: int = Field(0, ge=0, le=SEED_MAX)
    """The sampler's seed (Optuna takes 0 … 2**32 - 1)."""
    owner: str | None = Field(None, max_length=200)

    @model_validator(mode="after")
    def _deadline_ahead(self) -> SweepRequest:
        deadline = self.budget.deadline
        if deadline is not None:
            now = datetime.now(deadline.tzinfo) if deadline.tzinfo else datetime.now()
            if deadline <= now:
                raise ValueError(f"budget.deadline {deadline.isoformat()} is in the past: no "
                                 "trial could start; give a later time (e.g. tomorrow 07:00)")
        return self

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        if value not in STRATEGIES:
            raise ValueError(f"unknown strategy {value!r}; valid: {', '.join(sorted(STRATEGIES))}")
        return value


def resolve_space(space: str | dict[str, Any], trust: Trust = OPERATOR) -> SearchSpace:
    """The space a request names (raises SpaceError with the file and field), as ``trust``
    lets it name files and executables (:mod:`slotune.workers.trust`)."""
    if isinstance(space, dict):
        return parse_space(space, "space", trust=trust)
    return load_space(space, trust=trust)


def stored_space(space: dict[str, Any]) -> SearchSpace:
    """The space a stored sweep runs: as it was checked when the sweep was queued."""
    return parse_space(space, "stored space", stored=True)


def resolve(request: SweepRequest, trust: Trust = OPERATOR) -> tuple[SearchSpace, Workload, SLO]:
    """Space, workload and SLO of a request, with overrides applied (ValueError if bad).

    ``trust`` says who asks: the operator (the CLI, by default) or an API client, whose
    request names no server file and no executable of its own (:mod:`slotune.workers.trust`).
    """
    space = resolve_space(request.space, trust)
    if request.workload is None:
        workload = space.resolve_workload()
    elif isinstance(request.workload, dict):
        workload = parse_workload(request.workload, "workload", trust=trust)
    else:
        workload = load_workload(request.workload, trust=trust)[0]
    slo = SLO.parse(request.slo) if request.slo else space.resolve_slo()
    if request.mode is not None or request.workload is not None or request.slo is not None:
        # The stored space carries what the sweep runs, so a resumed sweep runs the same.
        space = space.model_copy(update={"workload": workload, "slo": slo,
                                         "mode": request.mode or space.mode})
        problem = space.capacity.unable(slo.percentile) if space.mode == "capacity" \
            else None
        if problem:  # an SLO override may ask a percentile the space's probes cannot show
            raise SpaceError(f"space {space.name!r}: {problem}")
    if request.allow_lossy:
        space = space.allowing_lossy()
    if request.strategy == "twin":
        Twin(space)  # TwinUnavailable (a ValueError) names what the simulator lacks
    return space, workload, slo


def queue_sweep(store: Store, request: SweepRequest, *, claimed_by: str | None = None,
                executor: ExecutorChoice | None = None,
                trust: Trust = OPERATOR) -> SweepRecord:
    """Store a ``queued`` sweep for a coordinator to run (or, with ``claimed_by``, one
    already ``running`` under that coordinator on ``executor``: ``sweep run`` in the
    foreground). ``trust``: who asks (:func:`resolve`); what is stored holds the
    operator's paths and commands a client's names resolved to."""
    space, workload, slo = resolve(request, trust)
    return store.create_sweep(
        name=request.name or f"{space.name}-{request.strategy}",
        workload=workload, slo=slo,
        space=space.model_dump(mode="json"),
        model=space.model, gpu=space.gpu, strategy=request.strategy, mode=space.mode,
        budget=request.budget.model_dump(mode="json"), seed=request.seed,
        owner=request.owner, claimed_by=claimed_by, executor=executor,
    )


# Errors a request can raise, for callers that turn them into 4xx / exit code 2.
REQUEST_ERRORS = (SpaceError, WorkloadError, ValueError)
