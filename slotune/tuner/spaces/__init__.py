"""Search spaces: YAML knob spaces, their rules, and the trial specs they make (DESIGN §6)."""

from __future__ import annotations

from slotune.tuner.spaces._expr import Rule, RuleError
from slotune.tuner.spaces._model import (
    BUILTIN_RULES,
    KNOB_TYPES,
    Knob,
    SearchSpace,
    SpaceError,
    distribution,
    knob_choices,
    load_space,
    parse_space,
)

__all__ = [
    "BUILTIN_RULES",
    "KNOB_TYPES",
    "Knob",
    "Rule",
    "RuleError",
    "SearchSpace",
    "SpaceError",
    "distribution",
    "knob_choices",
    "load_space",
    "parse_space",
]
