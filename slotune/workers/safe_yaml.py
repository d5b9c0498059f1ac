"""Bounded, safe YAML loading for files a user (or someone else) wrote.

``yaml.safe_load`` already refuses ``!!python/object`` tags, but it still expands
anchors and aliases: a few hundred bytes can describe a list of a billion items (the
"billion laughs" alias bomb), and whatever walks the result (validation, JSON
serialisation) would expand it. Our files never need anchors, so :func:`load_yaml`
refuses any alias outright and caps the document's size before parsing. A key given
twice in one mapping is refused too, naming both lines: YAML's loaders let the last one
win, so a knob's values written earlier vanished without a word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["MAX_YAML_BYTES", "DuplicateKeyError", "YamlInputError", "load_yaml",
           "load_yaml_file", "unique_keys"]

MAX_YAML_BYTES = 1 << 20
"""1 MiB: a search space or workload is a few KiB; anything larger is a mistake."""


class YamlInputError(ValueError):
    """A YAML document we refuse: too large, not YAML, an alias, or a non-safe tag."""


class DuplicateKeyError(ValueError):
    """A JSON object that gives one key twice (``json.loads``' ``object_pairs_hook``)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for JSON a user wrote: the same rule as YAML's, a key given
    twice in one object is refused, not silently overwritten by the last."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKeyError(f"key {key!r} is given twice in one object; keep one "
                                    "(a list of values is one key)")
        result[key] = value
    return result


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (``*name``), so nothing expands beyond the text,
    and a key repeated in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader refuses it below
                continue
            seen[key] = line
            if first is not None:
                raise YamlInputError(f"line {line}: key {key!r} is given twice (lines {first} "
                                     f"and {line}); keep one (a list of values is one key)")
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise YamlInputError(
                f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not "
                "accepted; write the value out in full")
        return super().compose_node(parent, index)


def load_yaml(text: str | bytes, where: str, *, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Parse one YAML document safely; errors name ``where`` and say what would be right."""
    size = len(text.encode("utf-8")) if isinstance(text, str) else len(text)
    if size > max_bytes:
        raise YamlInputError(f"{where}: {size} bytes is larger than the {max_bytes}-byte limit "
                             "for a YAML file")
    try:
        return yaml.load(text, Loader=_NoAliasLoader)
    except YamlInputError as exc:
        raise YamlInputError(f"{where}: {exc}") from None
    except yaml.constructor.ConstructorError as exc:
        line = f"line {exc.problem_mark.line + 1}: " if exc.problem_mark else ""
        raise YamlInputError(
            f"{where}: {line}{exc.problem}; only plain YAML is accepted (mappings, lists, "
            "strings, numbers, true/false, null), no language-specific tags") from None
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise YamlInputError(f"{where}: not valid YAML: {detail}") from None


def load_yaml_file(path: Path, where: str | None = None, *,
                   max_bytes: int = MAX_YAML_BYTES) -> Any:
    """:func:`load_yaml` of a file, refusing an oversized one before reading it."""
    where = where or str(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise YamlInputError(f"{where}: {size} bytes is larger than the {max_bytes}-byte "
                                 "limit for a YAML file")
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise YamlInputError(f"{where}: cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlInputError(f"{where}: not UTF-8 text") from None
    return load_yaml(text, where, max_bytes=max_bytes)
