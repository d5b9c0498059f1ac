"""The REST API's application factory: ``uvicorn --factory slotune.tuner.api.app:create_app``.

Everything lives under ``/api/v1`` (OpenAPI at ``/api/v1/openapi.json``, docs at
``/api/v1/docs``); the dashboard's static pages, when installed, at ``/`` and ``/static``.
Settings come from the environment (:func:`slotune.tuner.settings.get_settings`) unless given.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from slotune.tuner.api.access_log import install_access_log_redaction
from slotune.tuner.api.deps import require_reader
from slotune.tuner.api.errors import install_error_handlers
from slotune.tuner.api.middleware import BodySizeLimit
from slotune.tuner.api.read_cache import ReadCache
from slotune.tuner.api.routes import capacity, dashboard, health, sweeps, workloads
from slotune.tuner.db.store import Store
from slotune.tuner.settings import Settings, get_settings

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v1"
log = logging.getLogger("slotune.api")


def create_app(settings: Settings | None = None, *, store: Store | None = None) -> FastAPI:
    """A configured app. ``store`` defaults to one on the settings' database, opened now
    (lazily connecting) and closed when the app shuts down."""
    settings = settings or get_settings()
    install_access_log_redaction()  # no ?token=… in the access log, however it is served
    owns_store = store is None
    store = store or Store.from_settings(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if settings.api.write_secret is None:
            log.warning("no SLOTUNE_API_TOKEN configured: the API refuses every write")
        yield
        if owns_store:
            store.close()

    app = FastAPI(
        title="slotune",
        summary="SLO-constrained search for LLM serving configurations",
        version="1",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.read_cache = ReadCache(store)
    install_error_handlers(app)

    api = APIRouter(prefix=API_PREFIX)
    api.include_router(health.router)  # open: probes carry no token
    reads = [Depends(require_reader)]
    for router in (sweeps.router, workloads.router, capacity.router):
        api.include_router(router, dependencies=reads)
    app.include_router(api)
    app.include_router(dashboard.router)
    app.mount("/static", StaticFiles(directory=dashboard.STATIC_DIR, check_dir=False),
              name="static")

    app.add_middleware(BodySizeLimit, max_bytes=settings.api.max_body_bytes)
    return app
