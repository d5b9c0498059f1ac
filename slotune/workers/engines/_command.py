"""What an engine runs: the registry of engine kinds, its argv and its environment.

Pure: nothing here starts a process (that is :mod:`slotune.workers.engines._lifecycle`). An
adapter (:mod:`slotune.workers.engines.base`) registers its kind with :func:`register_engine`
when its class is defined, builds its argv from :func:`flag_args` after
:func:`check_known_args`, and its environment with :func:`engine_environment`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import TypeVar

from slotune.workers.contracts import KnobValue, TrialSpec
from slotune.workers.contracts.options import EngineOptions, register_options
from slotune.workers.engines._failures import InvalidEngineArgs

__all__ = ["BASE_ENV", "check_known_args", "engine_environment", "flag_args",
           "register_engine"]

BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
"""Variables every engine inherits; anything else must be on the spec's allow-list."""

_T = TypeVar("_T")


def register_engine(registry: MutableMapping[str, type[_T]], cls: type[_T], kind: str,
                    options_model: type[EngineOptions]) -> None:
    """Enter ``cls`` in ``registry`` as engine ``kind`` with its options; a kind taken by
    another class is refused (the same class defined again, a module reloaded, is not)."""
    known = registry.get(kind)
    if known is not None and (known.__module__, known.__qualname__) != \
            (cls.__module__, cls.__qualname__):
        raise TypeError(f"engine {kind!r} is already {known.__module__}."
                        f"{known.__qualname__}; {cls.__qualname__} needs a kind of its own")
    register_options(kind, options_model)
    registry[kind] = cls


def flag_args(flags: Mapping[str, KnobValue]) -> list[str]:
    """vLLM-style arguments: ``--name=value``; booleans ``--x``/``--no-x``; objects as JSON."""
    out: list[str] = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        # ``--flag=value`` as one element: a value that looks like an option (say
        # "--enforce-eager") can then never be read by the engine as a flag of its own.
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, dict):
            out.append(f"{flag}={json.dumps(value, separators=(',', ':'), sort_keys=True)}")
        else:
            out.append(f"{flag}={value}")
    return out


def check_known_args(kind: str, spec: TrialSpec, known_args: Iterable[str]) -> None:
    """:class:`InvalidEngineArgs` for a flag the engine does not take and the space did
    not declare, naming the ones it takes."""
    known = frozenset(known_args)
    unknown = sorted(set(spec.engine_flags) - known - set(spec.allowed_extra_args))
    if unknown:
        raise InvalidEngineArgs(
            f"unknown engine argument(s) for {kind}: {', '.join(unknown)}; declare "
            "them in the search space's allowed_extra_args, or use one of: "
            + ", ".join(sorted(known))
        )


def engine_environment(spec: TrialSpec, gpu_ids: Sequence[str],
                       env_prefixes: tuple[str, ...]) -> dict[str, str]:
    """Base variables, the allow-listed passthrough, and the GPUs Ray assigned."""
    env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    for name, value in os.environ.items():
        if env_prefixes and name.startswith(env_prefixes):
            env[name] = value
    for name in spec.env_passthrough:
        if name in os.environ:
            env[name] = os.environ[name]
    if gpu_ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
    # Marks the process as this trial's, so a leak can always be traced to its trial.
    env["SLOTUNE_RUN_ID"] = spec.run_id
    return env
