"""What a storage failure says: a full disk named as one whoever raised it, and never the
database's address, socket or user — on real driver errors, not made-up messages."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import SQLAlchemyError

from slotune.tuner.db.errors import StorageUnavailable, describe, translate
from slotune.tuner.db.store import Store


def _full_sqlite_error(tmp_path: Path) -> SQLAlchemyError:
    """A real SQLITE_FULL: a database capped at a few pages, filled past them."""
    engine = create_engine(f"sqlite:///{tmp_path / 'full.db'}")

    @event.listens_for(engine, "connect")
    def _cap(dbapi_connection: object, _record: object) -> None:
        dbapi_connection.execute("PRAGMA max_page_count = 4")  # type: ignore[attr-defined]

    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x TEXT)"))
            for _ in range(64):
                conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": "z" * 4096})
    except SQLAlchemyError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError("the capped database never filled")


def test_a_full_database_disk_is_an_outage_that_says_disk_full(tmp_path: Path) -> None:
    error = _full_sqlite_error(tmp_path)
    translated = translate(error)
    assert isinstance(translated, StorageUnavailable)  # waited out, as any outage
    assert "disk is full" in str(translated)


def test_optunas_wrapper_of_a_full_disk_is_described_as_a_full_disk(tmp_path: Path) -> None:
    error = _full_sqlite_error(tmp_path)
    try:  # what optuna's RDBStorage raises from a failed commit
        raise optuna.exceptions.StorageInternalError(
            "An exception is raised during the commit. This typically happens due to "
            "invalid data in the commit, e.g. exceeding max length.") from error
    except optuna.exceptions.StorageInternalError as wrapped:
        said = describe(wrapped)
    assert "disk is full" in said and "invalid data" not in said


@pytest.mark.parametrize("url", [
    "postgresql://slotune:hunter2@127.0.0.1:1/slotune",  # nothing listens
    "postgresql://nobody-here:pw@127.0.0.1:5432/postgres",  # no such role
    "postgresql://postgres@127.0.0.1:5432/no_such_database_here",
    "postgresql:///postgres?host=/nonexistent/socket/dir&user=alice",
], ids=["refused", "role", "database", "socket"])
def test_no_storage_error_names_the_databases_infrastructure(url: str) -> None:
    with Store(url) as store, pytest.raises(StorageUnavailable) as info:
        store.list_sweeps()
    message = str(info.value)
    for infrastructure in ("hunter2", "127.0.0.1", "5432", "port", "nobody-here", "alice",
                           "no_such_database_here", "/nonexistent", "postgresql://"):
        assert infrastructure not in message, message
    assert message.startswith("database unavailable: ") and len(message) > 30
