"""Engine adapters: turn a TrialSpec into a running inference server, and end it.

``make_engine`` picks the adapter by the spec's ``engine`` (``adapter_for`` the class,
for what an engine knows before it runs); an unknown kind fails with the list of valid
ones.

Adding an engine is one module in this package: an :class:`EngineAdapter` subclass that
sets its ``kind`` and its ``options_model`` (an
:class:`~slotune.workers.contracts.options.EngineOptions` subclass beside it) registers itself
when the class is defined, and this package imports each of its public modules
(``pkgutil``), so nothing else is edited. :data:`ENGINES` is the registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from pathlib import Path

from slotune.workers.contracts import TrialSpec
from slotune.workers.engines._log_patterns import boot_phases
from slotune.workers.engines.base import (
    ADAPTERS,
    EngineAdapter,
    EngineFailure,
    EngineState,
    InvalidEngineArgs,
    classify_failure,
    flag_args,
    parse_startup_log,
)
from slotune.workers.engines.redact import redact_argv

ENGINES: dict[str, type[EngineAdapter]] = ADAPTERS
"""Engine kind → adapter class: every adapter module of this package, as it registered."""

__all__ = [
    "ENGINES",
    "EngineAdapter",
    "EngineFailure",
    "EngineState",
    "InvalidEngineArgs",
    "adapter_for",
    "boot_phases",
    "classify_failure",
    "flag_args",
    "make_engine",
    "parse_startup_log",
    "redact_argv",
]


def _import_adapters() -> None:
    # A module whose name starts with "_" is the package's own helper, not an adapter.
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_import_adapters()


def adapter_for(engine: str) -> type[EngineAdapter]:
    """The adapter class of an engine kind (what it knows without a running server)."""
    try:
        return ENGINES[engine]
    except KeyError:
        raise ValueError(
            f"unknown engine {engine!r}; valid: {', '.join(sorted(ENGINES))}") from None


def make_engine(spec: TrialSpec, workdir: Path, gpu_ids: Sequence[str] = ()) -> EngineAdapter:
    return adapter_for(spec.engine)(spec, workdir, gpu_ids)
