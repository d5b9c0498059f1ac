"""``slotune api``: serve the REST API (and the dashboard, when installed) with uvicorn.

Refuses to start on a database whose schema is missing or old (exit 2, one line telling
the user to run ``slotune db upgrade``) or that cannot be reached (exit 1), instead of
answering every request with 503.
"""

from __future__ import annotations

import sys
from typing import Annotated, NoReturn

import typer

from slotune.tuner.db.errors import StorageError, exit_code
from slotune.tuner.settings import DatabaseSettings, get_settings, normalize_database_url

__all__ = ["api_command"]


def api_command(
    host: Annotated[str | None, typer.Option(help="Address to bind (default: "
                                             "SLOTUNE_API_HOST, else 127.0.0.1).",
                                             show_default=False)] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="Port (default: "
                                             "SLOTUNE_API_PORT, else 8080).",
                                             show_default=False)] = None,
    database_url: Annotated[str | None, typer.Option(
        "--database-url", help="Database URL (default: DATABASE_URL, else the embedded "
        "SQLite file).", show_default=False)] = None,
) -> None:
    """Serve the REST API (writes need SLOTUNE_API_TOKEN as a bearer token)."""
    import uvicorn

    from slotune.tuner.api import API_PREFIX, create_app
    from slotune.tuner.db.store import Store

    settings = get_settings()
    updates: dict[str, object] = {}
    if database_url is not None:
        try:
            normalize_database_url(database_url)
        except ValueError as exc:
            _fail(f"--database-url: {exc}", 2)
        updates["database"] = DatabaseSettings(url=database_url)
    api = settings.api.model_copy(update={k: v for k, v in (("host", host), ("port", port))
                                          if v is not None})
    settings = settings.model_copy(update={**updates, "api": api})

    store = Store.from_settings(settings)
    try:
        store.check_schema()
    except StorageError as exc:
        store.close()
        _fail(str(exc), exit_code(exc))

    app = create_app(settings, store=store)
    base = f"http://{api.host}:{api.port}"
    print(f"slotune api: serving {base}{API_PREFIX} (docs {base}{API_PREFIX}/docs) on "
          f"database {settings.database.redacted_url}", flush=True)
    if settings.api.write_secret is None:
        print("slotune api: warning: SLOTUNE_API_TOKEN is not set; every write is refused",
              file=sys.stderr, flush=True)
    try:
        uvicorn.run(app, host=api.host, port=api.port, log_level="info")
    finally:
        store.close()


def _fail(message: str, code: int) -> NoReturn:
    print(f"slotune api: error: {message}", file=sys.stderr)
    raise typer.Exit(code)
