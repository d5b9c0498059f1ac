"""Run slotune's Alembic migrations from code (``slotune db upgrade`` and tests use this).

The schema is owned by the migrations in ``migrations/`` at the repository root: the
service never calls ``create_all``. Every function takes the database URL explicitly
(``postgresql://`` is mapped to psycopg 3) and raises only
:class:`~slotune.tuner.db.errors.StorageError` subclasses, with the URL redacted.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from slotune.tuner.db.errors import MigrationError, public_reason
from slotune.tuner.db.session import make_db_engine, translated
from slotune.tuner.settings import normalize_database_url

__all__ = [
    "VERSION_TABLE",
    "current_revision",
    "downgrade",
    "head_revision",
    "migrations_dir",
    "upgrade",
]

VERSION_TABLE = "slotune_alembic_version"
"""Where our revision is stamped; Optuna owns the default ``alembic_version``."""


def migrations_dir() -> Path:
    """``migrations/`` next to the ``tuner`` package (the repository root)."""
    path = Path(__file__).resolve().parents[3] / "migrations"
    if not (path / "env.py").is_file():
        raise MigrationError(f"migration scripts not found at {path} (is slotune installed "
                             "from its source tree, e.g. `pip install -e .`?)")
    return path


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the schema at ``url`` up to ``revision`` (default: the latest)."""
    with _alembic(url) as config:
        command.upgrade(config, revision)


def downgrade(url: str, revision: str) -> None:
    """Take the schema at ``url`` down to ``revision`` (``base``: none of our tables)."""
    with _alembic(url) as config:
        command.downgrade(config, revision)


def current_revision(url: str) -> str | None:
    """Our schema revision at ``url`` (None: never migrated, or downgraded to base)."""
    engine = make_db_engine(url)
    try:
        with translated(), engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str:
    """The newest revision the scripts know."""
    head = ScriptDirectory(str(migrations_dir())).get_current_head()
    if head is None:
        raise MigrationError("no migration scripts found")
    return head


@contextmanager
def _alembic(url: str) -> Iterator[Config]:
    try:
        normalized = normalize_database_url(url)
    except ValueError as exc:
        raise MigrationError(str(exc)) from None
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Passed as an attribute, not an ini option: ConfigParser would choke on '%' in a URL.
    config.attributes["database_url"] = normalized
    config.attributes["configure_logger"] = False
    try:
        with translated():
            yield config
    except CommandError as exc:
        raise MigrationError(public_reason(str(exc))) from exc
