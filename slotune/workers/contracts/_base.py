"""The strict base every contract derives from, and the limits and aliases they share."""

from __future__ import annotations

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
)

MAX_TOKENS = 10_000_000
"""Upper bound of any token length in a dataset: past every model's context window."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


RUN_ID_ALIASES = AliasChoices("run_id", "trial_id")
"""A run's name is read as ``run_id``, or as ``trial_id`` (its name until issue 27, still
in JSON stored or written before: specs and results in old rows, files, saved reports)."""
