"""slotune's storage errors: the only exceptions the store lets out.

Every SQLAlchemy / driver error is translated once, in :func:`translate`, into this
small hierarchy and raised ``from`` its cause, so callers (coordinator, CLI, API)
handle our few cases; :func:`exit_code` and :func:`http_status` are the one mapping of
them to what every command and every route answers.
Messages never carry a database password: URLs in them are redacted.
"""

from __future__ import annotations

from sqlalchemy import exc as sa_exc

from tuner.settings import redact_url

__all__ = [
    "Conflict",
    "LeaseLost",
    "MigrationError",
    "NotFound",
    "SchemaMissing",
    "StorageError",
    "StorageUnavailable",
    "exit_code",
    "http_status",
    "translate",
]


class StorageError(Exception):
    """Base of every storage failure."""


class NotFound(StorageError):
    """The sweep, trial, workload … asked for does not exist (HTTP 404)."""


class Conflict(StorageError):
    """The write breaks a uniqueness rule or the object's state forbids it (HTTP 409)."""


class LeaseLost(Conflict):
    """The sweep was claimed again since this coordinator's claim: it no longer owns it
    and must stop writing for it (its successor does)."""


class StorageUnavailable(StorageError):
    """The database cannot be reached or is busy; retrying later may succeed (HTTP 503)."""


class SchemaMissing(StorageError):
    """Our tables are not there (or too old): run ``slotune db upgrade``."""


class MigrationError(StorageError):
    """A schema migration could not run (unknown revision, missing scripts …)."""


# What the edges answer for each error, most specific class first: (exit code, HTTP status).
# Exit 2 is a usage mistake (the command named something that is not there), 1 a refusal
# by the database or by the object's state; 3 stays "it ran, nothing met the SLO".
_ANSWERS: tuple[tuple[type[StorageError], int, int], ...] = (
    (NotFound, 2, 404),
    (Conflict, 1, 409),  # LeaseLost too: the sweep's state moved on
    (StorageUnavailable, 1, 503),
    (SchemaMissing, 2, 503),  # a setup step not done: `slotune db upgrade`
    (MigrationError, 1, 500),
    (StorageError, 1, 500),
)


def exit_code(exc: StorageError) -> int:
    """The exit code every command gives for ``exc``."""
    return next(code for kind, code, _ in _ANSWERS if isinstance(exc, kind))


def http_status(exc: StorageError) -> int:
    """The HTTP status every route answers for ``exc``."""
    return next(status for kind, _, status in _ANSWERS if isinstance(exc, kind))


# "The schema is not there": SQLite says so in an OperationalError's text, Postgres with
# SQLSTATE undefined_table / undefined_column ("does not exist" alone would also match a
# missing *database*, which is unavailability, not a missing schema).
_SQLITE_SCHEMA_HINTS = ("no such table", "no such column")
_PG_SCHEMA_STATES = {"42P01", "42703"}


def translate(error: sa_exc.SQLAlchemyError, url: object) -> StorageError:
    """The :class:`StorageError` that stands for ``error`` on the database at ``url``.

    The caller raises it ``from error``. Only the driver's first message line is kept
    (it says what went wrong; the rest is the statement and its parameters).
    """
    where = redact_url(url)
    cause = getattr(error, "orig", None) or error
    first_line = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    detail = f"{first_line} (database {where})"
    schema_missing = (getattr(cause, "sqlstate", None) in _PG_SCHEMA_STATES
                      or any(hint in first_line.lower() for hint in _SQLITE_SCHEMA_HINTS))

    if isinstance(error, sa_exc.IntegrityError):
        return Conflict(detail)
    if schema_missing:
        return SchemaMissing(f"{detail}; run `slotune db upgrade`")
    if isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError
                  | sa_exc.DisconnectionError | sa_exc.TimeoutError):
        return StorageUnavailable(f"database unavailable: {detail}")
    return StorageError(detail)
