"""Shared parameter types of the API's routes: ids, names, paging, SLO filters.

Bounds live in the types so OpenAPI states them and FastAPI refuses what breaks them
(422 with the field) before a query reaches the database: ids fit a 32-bit column, names
carry no NUL (Postgres text cannot), ``limit`` is at most :data:`MAX_LIMIT`.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import Path, Query

from slotune.tuner.api.errors import InvalidInput
from slotune.tuner.api.schemas import NAME_MAX, NAME_PATTERN
from slotune.tuner.db.store import slo_key
from slotune.workers.contracts import SLO

__all__ = ["MAX_LIMIT", "Limit", "NameFilter", "NamePath", "Offset", "SloFilter", "SweepId",
           "canonical_slo"]

MAX_LIMIT = 500
_INT32_MAX = 2**31 - 1

SweepId = Annotated[int, Path(ge=1, le=_INT32_MAX, description="Sweep id")]
NamePath = Annotated[str, Path(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
NameFilter = Annotated[str | None, Query(min_length=1, max_length=NAME_MAX,
                                         pattern=NAME_PATTERN)]
SloFilter = Annotated[str | None, Query(
    min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN,
    description="SLO as 'ttft:300,tpot:50' (p:95 sets the percentile) or its canonical JSON")]
Offset = Annotated[int, Query(ge=0, le=_INT32_MAX)]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"At most {MAX_LIMIT}")]


def canonical_slo(text: str | None, loc: tuple[str, ...] = ("query", "slo")) -> str | None:
    """The view's canonical SLO key for what a client typed (None stays None).

    Accepts the compact form (``ttft:300,tpot:50``) and the canonical JSON, so a value
    copied from a best-config row filters exactly that row.
    """
    if text is None:
        return None
    try:
        slo = (SLO.model_validate(json.loads(text)) if text.lstrip().startswith("{")
               else SLO.parse(text))
    except ValueError as exc:  # pydantic's ValidationError and JSONDecodeError included
        raise InvalidInput(loc, f"not an SLO: {exc}") from None
    return slo_key(slo)
