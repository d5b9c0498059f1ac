"""Alembic environment for slotune's own tables.

The URL comes, in this order, from ``config.attributes["database_url"]`` (set by
:mod:`slotune.tuner.db.migrate`), ``-x database_url=...``, the ini's ``sqlalchemy.url``, then
the settings (``DATABASE_URL``). Our revision is kept in ``slotune_alembic_version``:
Optuna stamps its own schema in the default ``alembic_version`` table of the same
database, and autogenerate only ever looks at our tables, never at Optuna's.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

from alembic import context

from slotune.tuner.db.models import OUR_TABLES, Base
from slotune.tuner.db.session import make_db_engine
from slotune.tuner.settings import get_settings

VERSION_TABLE = "slotune_alembic_version"

config = context.config
# Only the alembic CLI configures logging; called from code, we leave the host's alone.
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    url = config.attributes.get("database_url")
    if url:
        return str(url)
    url = context.get_x_argument(as_dictionary=True).get("database_url")
    if url:
        return url
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    return get_settings().database.url


def _ours(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    # Optuna's tables (studies, trials, …) share the database; they are not ours to diff.
    if type_ == "table":
        return name in OUR_TABLES or name == VERSION_TABLE
    return True


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_object=_ours,
        render_as_batch=True,  # SQLite alters tables by copy: keep later migrations portable
        compare_type=True,
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=_database_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_db_engine(_database_url())
    try:
        with engine.connect() as conn:
            _configure(connection=conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
