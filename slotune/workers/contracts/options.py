"""Engine options: each engine's own model, and the registry that finds it by the engine's kind.

A trial spec (and a search space) carries one ``options`` value whose type is its
engine's options model — a union over the registered engines, discriminated by the
spec's ``engine``. Each adapter declares its model beside itself
(:class:`slotune.workers.engines.sim.SimOptions`, :class:`slotune.workers.engines.vllm.VllmOptions`)
and registers it when its class is defined (:class:`slotune.workers.engines.base.EngineAdapter`), so
a new engine is one module under ``slotune/workers/engines/``.

This module is a leaf (pydantic only): :mod:`slotune.workers.contracts` validates specs with it
without importing the adapters, which import the contracts. The adapters are imported
(by name, once) the first time a kind is looked up.

How a spec or a space may write its engine's options (:func:`lift_engine_options`):

* ``options: {...}`` — the canonical spelling, what a dump writes;
* ``<kind>: {...}`` — under the engine's name (``sim: {seed: 1}``, ``vllm:
  {engine_binary: ...}``): what spaces and stored specs have always written for ``sim``;
* a field the model lists in ``flat_fields`` at the top level (vLLM's
  ``engine_binary:``, its spelling from before the union).

Another engine's options are refused with what was wrong and what is right, except the
defaults and nulls that specs stored before the union carry for every engine
(``sim: {seed: 0, …}`` on a vLLM spec, ``engine_binary: null`` on a simulated one).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Collection
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "ADAPTERS_PACKAGE",
    "OPTIONS_KEY",
    "EngineOptions",
    "engine_kinds",
    "lift_engine_options",
    "options_model",
    "register_options",
]

ADAPTERS_PACKAGE = "slotune.workers.engines"
"""The package whose modules are the engine adapters (imported to fill the registry)."""
OPTIONS_KEY = "options"
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")

_REGISTRY: dict[str, type[EngineOptions]] = {}


class EngineOptions(BaseModel):
    """Options of one engine (strict: an unknown field is an error). Subclass it beside
    the adapter; the adapter's ``options`` class attribute registers it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: ClassVar[str] = ""
    """How messages name the engine (``the simulated engine``); empty: ``engine <kind>``."""
    flat_fields: ClassVar[tuple[str, ...]] = ()
    """Fields that may also be written at the top level of a spec or a space (a spelling
    from before the union, kept so old files load; new engines need none)."""


def register_options(kind: str, model: type[EngineOptions]) -> None:
    """Make ``model`` the options of engine ``kind`` (an adapter's class definition calls
    this). A kind registered to another model is refused: two engines, one name."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"engine kind {kind!r}: use lower-case letters, digits, '-' and '_'")
    if kind == OPTIONS_KEY:
        raise ValueError(f"engine kind {kind!r} is the name of the options field")
    known = _REGISTRY.get(kind)
    if known is not None and (known.__module__, known.__qualname__) != \
            (model.__module__, model.__qualname__):  # the same class again: a module reload
        raise ValueError(f"engine {kind!r} is already registered, with options "
                         f"{known.__module__}.{known.__qualname__}")
    _REGISTRY[kind] = model


def _discover() -> None:
    # Importing the adapters' package imports every adapter module, and each adapter
    # registers itself as its class is defined (slotune.workers.engines.base.EngineAdapter).
    importlib.import_module(ADAPTERS_PACKAGE)


def engine_kinds() -> tuple[str, ...]:
    """Every registered engine kind, sorted."""
    _discover()
    return tuple(sorted(_REGISTRY))


def options_model(kind: str) -> type[EngineOptions]:
    """The options model of engine ``kind``; an unknown kind names the valid ones."""
    if kind not in _REGISTRY:
        _discover()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise ValueError(f"unknown engine {kind!r}; valid: {', '.join(sorted(_REGISTRY))}"
                         ) from None


def _named(kind: str, model: type[EngineOptions]) -> str:
    return f"{model.title} (engine: {kind})" if model.title else f"engine {kind}"


def _validated(model: type[EngineOptions], value: Any, key: str, engine: str,
               owner: str, context: Any = None) -> EngineOptions:
    if isinstance(value, EngineOptions):
        if not isinstance(value, model):
            theirs = next((k for k, m in _REGISTRY.items() if isinstance(value, m)), None)
            whose = _named(theirs, type(value)) if theirs else "no registered engine"
            raise ValueError(f"{key or OPTIONS_KEY}: {type(value).__name__} are the options of "
                             f"{whose}; this {owner}'s engine is {engine}, whose options are "
                             f"{model.__name__}")
        return value
    try:
        return model.model_validate(value, context=context)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join([*([key] if key else []), *(str(p) for p in err['loc'])])}: "
            f"{err['msg'].removeprefix('Value error, ')}{_whose(err['loc'], engine)}"
            for err in exc.errors())
        raise ValueError(f"{problems} (the options of {_named(engine, model)}: "
                         f"{', '.join(model.model_fields) or 'none'})") from None


def _whose(loc: tuple[int | str, ...], engine: str) -> str:
    """For a field another engine has: which (a misplaced option, not a misspelt one)."""
    owners = [kind for kind, model in _REGISTRY.items()
              if kind != engine and loc and loc[0] in model.model_fields]
    return f" ({loc[0]} is for engine: {', '.join(sorted(owners))})" if owners else ""


def lift_engine_options(data: Any, owner: str, default_engine: str,
                        fields: Collection[str] = (), context: Any = None) -> Any:
    """Raw fields of a spec or a space with its engine's options in one place,
    ``options``, an instance of the engine's model (see the module docstring for the
    spellings). ``owner`` names the thing in messages (``trial``, ``space``); ``fields``
    are its own field names, never read as an engine's name; ``context`` is the
    validation context the options are validated with (who gives them:
    :mod:`slotune.workers.trust`). Raises ``ValueError`` saying what was wrong and what is right."""
    if not isinstance(data, dict):
        return data
    engine = data.get("engine", default_engine)
    if not isinstance(engine, str):
        return data  # the engine field's own validation says what is wrong
    model = options_model(engine)  # discovers the adapters, so the registry is complete
    out = dict(data)
    given: list[tuple[str, EngineOptions]] = []
    if OPTIONS_KEY in out and out[OPTIONS_KEY] is not None:
        value = out.pop(OPTIONS_KEY)
        given.append((OPTIONS_KEY, _validated(model, value, OPTIONS_KEY, engine, owner,
                                              context)))
    out.pop(OPTIONS_KEY, None)
    if engine in out and engine not in fields:
        value = out.pop(engine)  # None: not given (an old space's dump: sim: null)
        if value is not None:
            given.append((engine, _validated(model, value, engine, engine, owner, context)))
    flat = {name: out.pop(name) for name in model.flat_fields if name in out}
    if any(value is not None for value in flat.values()):
        given.append((", ".join(flat), _validated(model, flat, "", engine, owner, context)))
    for kind, other in _REGISTRY.items():
        if kind == engine:
            continue
        _refuse_foreign(out, kind, other, engine, owner, fields)
    if len(given) > 1:
        raise ValueError(f"the {engine} engine's options are given twice ("
                         f"{' and '.join(key for key, _ in given)}): give them once, as "
                         f"{OPTIONS_KEY}")
    out[OPTIONS_KEY] = given[0][1] if given else _validated(model, {}, OPTIONS_KEY, engine,
                                                           owner, context)
    return out


def _refuse_foreign(out: dict[str, Any], kind: str, model: type[EngineOptions], engine: str,
                    owner: str, fields: Collection[str]) -> None:
    """Drop another engine's defaults (old specs carry them); refuse anything else."""
    if kind in out and kind not in fields:
        value = out.pop(kind)
        try:
            defaults = value is None or model.model_validate(value) == model()
        except ValidationError:
            defaults = False
        if not defaults:
            raise ValueError(f"{kind}: options of {_named(kind, model)}; this {owner}'s "
                             f"engine is {engine} (drop them, or set engine: {kind})")
    for name in model.flat_fields:
        if name in out and name not in fields:
            value = out.pop(name)
            if value is not None:
                raise ValueError(f"{name} is for engine: {kind} (an option of "
                                 f"{model.title or kind}); this {owner}'s engine is {engine} "
                                 f"(drop it, or set engine: {kind})")
