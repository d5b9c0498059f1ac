"""Engines and the one session context manager where storage errors are translated.

:func:`make_db_engine` builds an engine with the settings each backend needs (SQLite:
foreign keys on, WAL so the API reads while the coordinator writes, a busy timeout;
Postgres: psycopg 3, a connect timeout, pre-ping). :func:`session_scope` is one
transaction: committed when the block ends, rolled back on any error, and every
SQLAlchemy or driver error leaves it as a :class:`~slotune.tuner.db.errors.StorageError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from slotune.tuner.db.errors import StorageError, StorageUnavailable, translate
from slotune.tuner.settings import normalize_database_url

__all__ = ["db_now", "dumps_json", "make_db_engine", "session_scope", "translated"]

_SQLITE_BUSY_TIMEOUT_S = 30.0
_PG_CONNECT_TIMEOUT_S = 5


def make_db_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine for ``url`` (``postgresql://`` is mapped to psycopg 3).

    A SQLite file's directory is created here, on first use. No connection is made yet.
    """
    try:
        sa_url = make_url(normalize_database_url(url))
    except ValueError as exc:
        raise StorageError(str(exc)) from None
    kwargs: dict[str, Any] = {"echo": echo, "json_serializer": dumps_json}
    if sa_url.get_backend_name() == "sqlite":
        database = sa_url.database
        if database and database != ":memory:" and not database.startswith("file:"):
            try:
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageUnavailable(
                    "cannot create the SQLite database's directory "
                    f"({exc.strerror or exc})") from exc
        kwargs["connect_args"] = {"timeout": _SQLITE_BUSY_TIMEOUT_S}
        engine = create_engine(sa_url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if sa_url.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": _PG_CONNECT_TIMEOUT_S}
    kwargs["pool_pre_ping"] = True
    return create_engine(sa_url, **kwargs)


def db_now(session: Session) -> datetime:
    """The time by the database's clock: the one clock of stored times.

    Coordinators on several hosts disagree about the time (drift, NTP steps, a clock
    set wrong), so every stored start, finish and heartbeat is written on one clock:
    Postgres' (``statement_timestamp()``); SQLite has no server, so its clock is this
    host's, as SQLite's own ``now`` is. No lease is judged by comparing it with another
    clock: a takeover waits for a heartbeat to stand still (:mod:`slotune.tuner.db.lease_watch`).
    """
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        value = session.scalar(select(func.statement_timestamp()))
        if isinstance(value, datetime):
            return value.astimezone(UTC)
    return datetime.now(UTC)


def dumps_json(value: Any) -> str:
    """JSON text for a JSON column: non-finite floats become null.

    Neither JSON nor Postgres' JSONB has infinities or NaN (``json.dumps`` would write
    ``Infinity``, which Postgres rejects); pydantic's JSON mode does the same.
    """
    return json.dumps(_finite(value), separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        # WAL persists in the file: readers (API, dashboard) no longer block the writer.
        cursor.execute("PRAGMA journal_mode=WAL")
    finally:
        cursor.close()


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise any SQLAlchemy/driver error in the block as our :class:`StorageError`."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise translate(exc) from exc


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on error, errors translated once."""
    with translated():
        session = factory()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
