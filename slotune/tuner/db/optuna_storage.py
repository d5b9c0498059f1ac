"""Optuna's storage in slotune's own database, so its tools see our studies.

``optuna.storages.RDBStorage`` on the same URL (``postgresql://`` mapped to psycopg 3,
as for our engine): ``optuna studies --storage URL`` and ``optuna-dashboard URL`` list
slotune's sweeps. Optuna creates and versions its own tables (``studies``, ``trials``,
…, stamped in ``alembic_version``); ours are named apart (``sweep_trials``,
``slotune_alembic_version``), and our migrations never touch Optuna's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from slotune.tuner.db.errors import StorageError, translate
from slotune.tuner.db.session import make_db_engine
from slotune.tuner.settings import get_settings, normalize_database_url

if TYPE_CHECKING:  # optuna is a heavy import; only what builds a storage pays for it
    import optuna
    from optuna.storages import RDBStorage

__all__ = ["create_or_load_study", "optuna_storage", "optuna_url"]

_SQLITE_BUSY_TIMEOUT_S = 30.0


def optuna_url(url: str | None = None) -> str:
    """The URL to give Optuna's tools for ``url`` (default: the settings' database)."""
    return normalize_database_url(url or get_settings().database.url)


def optuna_storage(url: str | None = None, *, heartbeat_interval: int | None = None
                   ) -> RDBStorage:
    """An ``RDBStorage`` on slotune's database (``url`` or the settings').

    Optuna creates its tables on first use. Every call on it — building it, and each
    read or write a study, a sampler or a trial makes later — lets out only
    :class:`~slotune.tuner.db.errors.StorageError` for a database error (``StorageUnavailable``
    when unreachable), never SQLAlchemy's error nor Optuna's wrapper of it.
    """
    target = optuna_url(url)
    make_db_engine(target).dispose()  # creates a SQLite file's directory, like our engine does
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    backend = make_url(target).get_backend_name()
    if backend == "sqlite":
        engine_kwargs = {"connect_args": {"timeout": _SQLITE_BUSY_TIMEOUT_S}}
    elif backend == "postgresql":
        engine_kwargs["connect_args"] = {"connect_timeout": 5}
    storage_class = _translating_storage_class()
    with _translated():
        return storage_class(target, engine_kwargs=engine_kwargs,
                             heartbeat_interval=heartbeat_interval)


def create_or_load_study(
    name: str,
    *,
    url: str | None = None,
    storage: RDBStorage | None = None,
    direction: Literal["minimize", "maximize"] = "maximize",
    sampler: optuna.samplers.BaseSampler | None = None,
) -> optuna.Study:
    """The Optuna study ``name`` in slotune's database, created if new (resume-safe)."""
    import optuna

    with _translated():
        return optuna.create_study(
            study_name=name, storage=storage or optuna_storage(url), direction=direction,
            sampler=sampler, load_if_exists=True)


@contextmanager
def _translated() -> Iterator[None]:
    """Database errors out of Optuna as ours: SQLAlchemy's, or Optuna's wrapper of one."""
    import optuna

    try:
        yield
    except SQLAlchemyError as exc:
        raise translate(exc) from exc
    except optuna.exceptions.StorageInternalError as exc:
        # Optuna wraps the SQLAlchemy error it met in its own; unwrap it into ours.
        cause = exc.__cause__
        if isinstance(cause, SQLAlchemyError):
            raise translate(cause) from exc
        raise StorageError(str(exc)) from exc


# What Optuna's cache in front of an RDBStorage calls besides the public storage API.
_CACHE_CALLS = ("_create_new_trial", "_set_trial_param", "_get_best_trial_id", "_get_trials",
                "_get_stale_trial_ids")


@functools.cache
def _translating_storage_class() -> type[RDBStorage]:
    """``RDBStorage`` whose every storage call translates database errors (:func:`_translated`).

    A subclass, not a wrapper, so Optuna still puts its trial cache in front of it (it
    does so for an ``RDBStorage`` only); built on first use, as optuna is a heavy import.
    """
    from optuna.storages import RDBStorage

    def translating(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
            with _translated():
                return method(self, *args, **kwargs)
        return call

    names = [n for n in dir(RDBStorage) if not n.startswith("_")] + list(_CACHE_CALLS)
    methods = {name: translating(getattr(RDBStorage, name)) for name in names
               if inspect.isfunction(inspect.getattr_static(RDBStorage, name))}
    return type("TranslatingRDBStorage", (RDBStorage,), methods)
