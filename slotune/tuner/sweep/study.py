"""A sweep's Optuna study: where it lives, and finding it again after any restart.

The study lives in our own database (``optuna-dashboard DATABASE_URL`` shows it) under
the sweep's study name. It is created once, by the first claim, and found again by every
later one — resume, takeover, a restart before any trial finished — so its trial numbers
go on and its history stays. Only a study left under the same name by another sweep (a
deleted sweep whose id the database handed out again) is replaced: a study is the
sweep's when its key (sweep id and creation time) matches.
"""

from __future__ import annotations

from typing import Any

import optuna

from slotune.tuner.db.optuna_storage import optuna_storage
from slotune.tuner.db.records import SweepRecord
from slotune.tuner.db.store import study_name_for
from slotune.tuner.strategies import StudyOpener

__all__ = ["STUDY_KEY_ATTR", "sweep_study"]

STUDY_KEY_ATTR = "slotune_sweep_key"
"""The study's owner: sweep id and creation time (ids can be handed out again)."""


def sweep_study(sweep: SweepRecord, database_url: str) -> StudyOpener:
    """The opener a strategy calls with its own sampler to get ``sweep``'s study."""

    def open_study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        storage = optuna_storage(database_url)
        key = f"{sweep.id}@{sweep.created_at.isoformat()}"
        name = sweep.optuna_study_name or study_name_for(sweep.id)
        try:
            found: optuna.Study | None = optuna.load_study(study_name=name, storage=storage,
                                                           sampler=sampler)
        except KeyError:
            found = None
        if found is not None and not _belongs(found.user_attrs, key, sweep.id):
            optuna.delete_study(study_name=name, storage=storage)
            found = None
        study = found or optuna.create_study(study_name=name, storage=storage,
                                             direction="maximize", sampler=sampler,
                                             load_if_exists=True)
        study.set_user_attr("slotune_sweep_id", sweep.id)
        study.set_user_attr(STUDY_KEY_ATTR, key)
        return study

    return open_study


def _belongs(attrs: dict[str, Any], key: str, sweep_id: int) -> bool:
    if STUDY_KEY_ATTR in attrs:
        return bool(attrs[STUDY_KEY_ATTR] == key)
    return bool(attrs.get("slotune_sweep_id") == sweep_id)  # made before the key existed
