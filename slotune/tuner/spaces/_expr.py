"""A tiny, safe expression language for search-space rules (``"a >= b and c < 4096"``).

Rules are parsed with :mod:`ast` and only a whitelist of node kinds is accepted: knob
names, numbers, booleans, ``+ - * /``, unary minus, comparisons (chained too) and
``and``/``or``/``not``. Nothing is ever handed to ``eval``: a rule from a YAML file is
data, and a file someone else wrote must not be able to run code.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Rule", "RuleError"]

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None,
                             "True": True, "False": False, "None": None}
"""YAML's spellings and Python's: a rule reads like the file around it."""
_ALLOWED = "knob names, numbers, true/false/null, + - * /, comparisons, and/or/not"


class RuleError(ValueError):
    """A rule that does not parse, uses something outside the language, or names no knob."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed rule; :meth:`holds` evaluates it over a mapping of names to values."""

    text: str
    tree: ast.Expression
    names: frozenset[str]

    @classmethod
    def parse(cls, text: str, known: set[str] | None = None) -> Rule:
        """Parse ``text``; ``known`` (when given) is the set of names a rule may use."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise RuleError(f"rule {text!r} does not parse: {exc.msg}") from None
        names: set[str] = set()
        for node in ast.walk(tree):
            _check_node(node, text)
            if isinstance(node, ast.Name) and node.id not in _LITERALS:
                names.add(node.id)
        if known is not None and (unknown := names - known):
            raise RuleError(
                f"rule {text!r} names {', '.join(sorted(unknown))}, which is not a knob or "
                f"fixed argument of the space; valid: {', '.join(sorted(known))}"
            )
        return cls(text.strip(), tree, frozenset(names))

    def holds(self, values: Mapping[str, Any]) -> bool:
        """True when the rule holds; a rule over a name that has no value, or a value it
        cannot compare, holds (unknown: the engine's own check decides)."""
        if any(values.get(n) is None for n in self.names):
            return True
        try:
            return bool(_eval(self.tree.body, values))
        except (TypeError, ZeroDivisionError):
            # A value of the wrong type (``--set max_num_seqs=abc``) cannot be judged here;
            # the engine refuses it with its own message.
            return True


def _check_node(node: ast.AST, text: str) -> None:
    ok = (
        ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
        ast.UAdd, ast.BinOp, ast.Compare, ast.Name, ast.Load, ast.Constant,
        *_BINARY, *_COMPARE,
    )
    if not isinstance(node, ok):
        raise RuleError(f"rule {text!r} uses {type(node).__name__}; allowed: {_ALLOWED}")
    if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | bool | None):
        raise RuleError(f"rule {text!r}: constant {node.value!r} is not a number; "
                        f"allowed: {_ALLOWED}")


def _eval(node: ast.AST, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return _LITERALS[node.id] if node.id in _LITERALS else values[node.id]
    if isinstance(node, ast.UnaryOp):
        inner = _eval(node.operand, values)
        if isinstance(node.op, ast.Not):
            return not inner
        return -inner if isinstance(node.op, ast.USub) else +inner
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    if isinstance(node, ast.BoolOp):
        parts = (_eval(v, values) for v in node.values)
        return all(parts) if isinstance(node.op, ast.And) else any(parts)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise RuleError(f"cannot evaluate {type(node).__name__}")  # pragma: no cover - parse checks
