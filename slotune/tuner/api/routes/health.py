"""``GET /api/v1/health``: the process answers and its database is reachable and migrated."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from slotune.tuner.api.deps import StoreDep
from slotune.tuner.api.schemas import HealthOut
from slotune.tuner.db.errors import StorageError

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthOut,
            responses={503: {"model": HealthOut, "description": "Database not usable"}})
def health(store: StoreDep) -> HealthOut | JSONResponse:
    """Open to all (load balancers probe it); says nothing beyond ok or why not."""
    try:
        store.check_schema()
    except StorageError as exc:
        body = HealthOut(status="unavailable", database=str(exc))
        return JSONResponse(body.model_dump(), status_code=503)
    return HealthOut(status="ok", database="ok")
