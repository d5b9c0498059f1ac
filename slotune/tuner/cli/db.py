"""``slotune db``: schema migrations (``upgrade``, ``downgrade``, ``current``).

Exit codes: 0 done, 1 the database could not be reached or the migration failed
(one line on stderr, password redacted, no traceback).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from slotune.tuner.db.errors import StorageError, exit_code
from slotune.tuner.settings import get_settings, redact_url

__all__ = ["db_app"]

db_app = typer.Typer(help="The database: schema migrations.", no_args_is_help=True)

DatabaseUrlOption = Annotated[
    str | None,
    typer.Option("--database-url", help="Database URL (default: DATABASE_URL, else the "
                 "embedded SQLite file).", show_default=False),
]


def _url(database_url: str | None) -> str:
    return database_url or get_settings().database.url


def _fail(exc: StorageError) -> typer.Exit:
    print(f"slotune db: error: {exc}", file=sys.stderr)
    return typer.Exit(exit_code(exc))


@db_app.command("upgrade")
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseUrlOption = None,
) -> None:
    """Create or update slotune's tables (Optuna's own are left to Optuna)."""
    from slotune.tuner.db import migrate

    url = _url(database_url)
    try:
        migrate.upgrade(url, revision)
        now = migrate.current_revision(url)
    except StorageError as exc:
        raise _fail(exc) from None
    print(f"{redact_url(url)}: at revision {now}")


@db_app.command("downgrade")
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision ('base': drop all of ours).")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Take slotune's schema back to REVISION (Optuna's tables are not touched)."""
    from slotune.tuner.db import migrate

    url = _url(database_url)
    try:
        migrate.downgrade(url, revision)
        now = migrate.current_revision(url)
    except StorageError as exc:
        raise _fail(exc) from None
    print(f"{redact_url(url)}: at revision {now or 'base'}")


@db_app.command("current")
def current(database_url: DatabaseUrlOption = None) -> None:
    """Print the schema revision of the database and the newest one known."""
    from slotune.tuner.db import migrate

    url = _url(database_url)
    try:
        now, head = migrate.current_revision(url), migrate.head_revision()
    except StorageError as exc:
        raise _fail(exc) from None
    print(f"{redact_url(url)}: at revision {now or 'base'} (head {head})")
