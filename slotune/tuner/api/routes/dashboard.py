"""The built-in dashboard's pages, served from ``slotune/tuner/dashboard/static/`` when installed.

The pages are static files that call this API from the browser; they are looked up per
request, so a dashboard added after the app was built is served without a restart.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parents[2] / "dashboard" / "static"

router = APIRouter(include_in_schema=False)


def _page(name: str) -> FileResponse:
    path = STATIC_DIR / name
    if not path.is_file():
        raise HTTPException(404, f"the dashboard is not installed ({name} is missing)")
    return FileResponse(path, media_type="text/html")


@router.get("/")
def index() -> FileResponse:
    return _page("index.html")


@router.get("/sweeps/{sweep_id}")
def sweep_page(sweep_id: int) -> FileResponse:
    return _page("sweep.html")  # the page reads its id from the URL and asks the API
