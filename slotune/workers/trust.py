"""The trust boundary: who a space or a workload comes from, and what that lets it name.

Two origins:

* the **operator** — a space or workload file on a machine the user controls, given to
  the CLI, and everything slotune stored once it was checked — may name any file and any
  executable, as it always could;
* a **client** of the REST API (whoever holds a token) names data, never code nor a path
  on the server: an executable (an engine binary, a quality command) by the name the
  operator registered it under; a file (a trace, a conversation file, a device file, a
  model directory) by its relative path inside a data directory the operator allows,
  symlinks followed; a space or a workload by its shipped name, or inline.

A parse carries its :class:`Trust` in the pydantic validation context (``"trust"``, see
:meth:`Trust.context`), and each field that names a file or an executable asks it here,
in one place: :meth:`Trust.path`, :meth:`Trust.executable`, :meth:`Trust.quality_command`,
:meth:`Trust.shipped`. A parse without one is the operator's with nothing registered:
what slotune stored, what a worker validates.

**Names are resolved at the edge.** The stored space holds what the operator registered
(the binary's path, the command's argv, the file's absolute path), so a stored sweep
stays trusted data: a coordinator or worker runs it as before, needs no registry of its
own, and a registry changed later does not change what a queued sweep runs. Resolving
on the workers would have each worker tell a stored path from a name, and would let one
sweep's meaning differ from worker to worker.

Messages name the field and the value as given, never a resolved server path nor the
content of a file: a client's refusal must not be an oracle for the server's files.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo

__all__ = [
    "DATA_DIRS_ENV",
    "ENGINE_BINARIES_ENV",
    "OPERATOR",
    "QUALITY_COMMANDS_ENV",
    "REGISTERED_NAME",
    "Origin",
    "RegisteredCommand",
    "Trust",
    "TrustError",
    "trust_of",
]

ENGINE_BINARIES_ENV = "SLOTUNE_ENGINE_BINARIES"
QUALITY_COMMANDS_ENV = "SLOTUNE_QUALITY_COMMANDS"
DATA_DIRS_ENV = "SLOTUNE_DATA_DIRS"
REGISTERED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""What a registered engine or quality command may be called (never a path)."""

Origin = Literal["operator", "client"]
_CONTEXT_KEY = "trust"


class TrustError(ValueError):
    """A client named something only the operator may (the message says what it may)."""


class RegisteredCommand(BaseModel):
    """A quality command the operator registered: its argv (``{base_url}`` and
    ``{model}`` are filled in, as in a space's own) and how long it may run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: tuple[str, ...] = Field(min_length=1)
    timeout_s: float = Field(3600.0, gt=0, allow_inf_nan=False)


@dataclass(frozen=True)
class Trust:
    """Who a parse comes from, and what the operator registered for clients."""

    origin: Origin = "operator"
    engine_binaries: Mapping[str, str] = field(default_factory=dict)
    """Registered engine binaries: name → the executable's path on the workers."""
    quality_commands: Mapping[str, RegisteredCommand] = field(default_factory=dict)
    data_dirs: tuple[Path, ...] = ()
    """Where a client's files may live (resolved, symlinks followed)."""

    @property
    def client(self) -> bool:
        return self.origin == "client"

    def context(self, **extra: Any) -> dict[str, Any]:
        """A validation context carrying this trust (and ``extra``: base_dir, stored)."""
        return {**extra, _CONTEXT_KEY: self}

    # --- executables -------------------------------------------------------------------

    def executable(self, value: str, field: str) -> str:
        """The engine binary ``value`` names: a registered name's path; the operator's own
        path or command as given; a client's anything else refused."""
        registered = self.engine_binaries.get(value)
        if registered is not None:
            return registered
        if self.client:
            raise TrustError(f"{field} {value!r}: over the API an engine binary is named, "
                             f"not given: {_registered(self.engine_binaries, ENGINE_BINARIES_ENV)}")
        return value

    def quality_command(self, data: dict[str, Any], field: str) -> dict[str, Any]:
        """A quality command's fields with a registered ``name`` resolved to its argv and
        timeout. A client names one (and its ``min_score``); an operator may also give an
        argv of its own (a stored command carries both, and is kept as stored)."""
        name = data.get("name")
        given = sorted(key for key in ("argv", "timeout_s") if key in data)
        if self.client and (given or name is None):
            what = f"{given[0]}: " if given else ""
            raise TrustError(f"{what}over the API a quality command is named ({field}.name, "
                             "with min_score), not given: "
                             f"{_registered(self.quality_commands, QUALITY_COMMANDS_ENV)}")
        if name is None or "argv" in data:
            return data
        registered = self.quality_commands.get(name) if isinstance(name, str) else None
        if registered is None:
            raise TrustError(f"name {name!r}: not a registered quality command; "
                             f"{_registered(self.quality_commands, QUALITY_COMMANDS_ENV)}")
        return {**data, "argv": registered.argv, "timeout_s": registered.timeout_s}

    # --- files -------------------------------------------------------------------------

    def path(self, value: str, field: str, base: Path | None) -> Path:
        """The file or directory ``value`` names, absolute (symlinks followed).

        The operator's: from ``base`` (its file's directory; else the working directory),
        ``~`` expanded. A client's: a relative path inside a data directory, where it
        exists; anything else is refused with the same words whether or not it exists
        elsewhere.
        """
        if not self.client:
            return ((base or Path.cwd()) / Path(value).expanduser()).resolve()
        relative = Path(value)
        if not relative.is_absolute() and not value.startswith("~"):
            for root in self.data_dirs:
                candidate = (root / relative).resolve()
                if candidate.is_relative_to(root) and candidate.exists():
                    return candidate
        where = (f"one of the operator's data directories ({DATA_DIRS_ENV})"
                 if self.data_dirs else f"a data directory, and the operator allows none "
                                        f"({DATA_DIRS_ENV} is not set)")
        raise TrustError(f"{field} {value!r}: not a file in the data directories; over "
                         f"the API a file is named by its relative path inside {where}")

    def public(self, text: str, given: Mapping[Path, str] | None = None) -> str:
        """``text`` as a client may read it: each resolved path of ``given`` written as
        the client gave it, and any data directory as ``<data dir>``. The operator's
        text is its own, as it is."""
        if not self.client:
            return text
        for resolved, shown in (given or {}).items():
            text = text.replace(str(resolved), shown)
        for root in self.data_dirs:
            text = text.replace(str(root), "<data dir>")
        return text

    # --- shipped names -----------------------------------------------------------------

    def shipped(self, value: str, field: str, names: Collection[str]) -> str:
        """``value``: a client's must be one of ``names`` (what ships with slotune), never
        a path; the operator's is returned as is (a name or a file of its own)."""
        if self.client and value not in names:
            raise TrustError(f"{field} {value!r}: over the API give a shipped {field} "
                             f"({', '.join(sorted(names))}) or the {field} inline, not a "
                             "file path")
        return value


OPERATOR = Trust()
"""The operator with nothing registered: what a parse without a context is."""


def trust_of(info: ValidationInfo | None) -> Trust:
    """The trust a validation runs under (:data:`OPERATOR` when the context names none)."""
    context = info.context if info is not None else None
    trust = context.get(_CONTEXT_KEY) if isinstance(context, dict) else None
    return trust if isinstance(trust, Trust) else OPERATOR


def _registered(names: Collection[str], env: str) -> str:
    if not names:
        return f"the operator registers them in {env}, and none is registered"
    return f"registered: {', '.join(sorted(names))} (the operator's {env})"
