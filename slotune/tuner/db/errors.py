"""slotune's storage errors: the only exceptions the store lets out.

Every SQLAlchemy / driver error is translated once, in :func:`translate`, into this
small hierarchy and raised ``from`` its cause, so callers (coordinator, CLI, API)
handle our few cases; :func:`exit_code` and :func:`http_status` are the one mapping of
them to what every command and every route answers.
Messages never name the database's infrastructure: no URL, host, port, socket or user
reaches an API client or a CLI user's error line (:func:`public_reason`); whoever needs
to know which database is configured reads the settings, not an error.
"""

from __future__ import annotations

import errno
import re

from sqlalchemy import exc as sa_exc

__all__ = [
    "Conflict",
    "LeaseLost",
    "MigrationError",
    "NotFound",
    "SchemaMissing",
    "StorageError",
    "StorageUnavailable",
    "describe",
    "exit_code",
    "http_status",
    "public_reason",
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


# Where a driver's message names the infrastructure: a server's address, a socket, a
# user or role. Each is cut from what we say (the kind of failure stays).
_INFRASTRUCTURE = (
    (re.compile(r'\b\w+(?:\+\w+)?://\S+'), "the database"),  # any URL
    (re.compile(r'server (?:at|on socket)\s+"[^"]*"', re.I), "the server"),
    (re.compile(r'\b(host|socket|file|user|role|database)\s+"[^"]*"', re.I), r"the \1"),
    (re.compile(r'\s*\((?:\d{1,3}\.){3}\d{1,3}\)|\s*\(\[?[0-9a-f]*:[0-9a-f:]+\]?\)', re.I),
     ""),  # an IPv4 or IPv6 address in parentheses
    (re.compile(r',?\s*port \d+', re.I), ""),
    (re.compile(r'"/[^"]*"'), "a local socket"),
)
# "No room left": SQLite's SQLITE_FULL, Postgres' SQLSTATE class 53100, the OS's ENOSPC.
_DISK_FULL_STATES = {"53100"}
_DISK_FULL_HINTS = ("database or disk is full", "no space left on device", "disk full")


def public_reason(message: str) -> str:
    """A driver's message with the database's address, socket and user cut out."""
    for pattern, replacement in _INFRASTRUCTURE:
        message = pattern.sub(replacement, message)
    return " ".join(message.split())


def translate(error: sa_exc.SQLAlchemyError) -> StorageError:
    """The :class:`StorageError` that stands for ``error``; the caller raises it ``from``
    ``error``. Only the driver's first message line is kept (what went wrong; the rest
    is the statement and its parameters), without the database's infrastructure.
    """
    cause = getattr(error, "orig", None) or error
    first_line = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    detail = public_reason(first_line)
    schema_missing = (getattr(cause, "sqlstate", None) in _PG_SCHEMA_STATES
                      or any(hint in first_line.lower() for hint in _SQLITE_SCHEMA_HINTS))

    if _disk_full(cause, first_line):
        return StorageUnavailable(f"the database's disk is full ({detail}); free space "
                                  "there and the work goes on")
    if isinstance(error, sa_exc.IntegrityError):
        return Conflict(detail)
    if schema_missing:
        return SchemaMissing(f"{detail}; run `slotune db upgrade`")
    if isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError
                  | sa_exc.DisconnectionError | sa_exc.TimeoutError):
        return StorageUnavailable(f"database unavailable: {detail}")
    return StorageError(detail)


def describe(exc: BaseException) -> str:
    """One line for a storage failure whatever raised it: ours, SQLAlchemy's, or Optuna's
    wrapper (whose own text blames "invalid data in the commit" for a full disk)."""
    if isinstance(exc, StorageError):
        return str(exc)
    if isinstance(exc, sa_exc.SQLAlchemyError):
        return str(translate(exc))
    if isinstance(exc.__cause__, sa_exc.SQLAlchemyError):
        return str(translate(exc.__cause__))
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "the disk is full (No space left on device)"
    return public_reason((str(exc).strip().splitlines() or [type(exc).__name__])[0])


def _disk_full(cause: BaseException, first_line: str) -> bool:
    if getattr(cause, "sqlstate", None) in _DISK_FULL_STATES:
        return True
    if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
        return True
    return any(hint in first_line.lower() for hint in _DISK_FULL_HINTS)
