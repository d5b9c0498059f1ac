"""Where a twin sweep's calibration is kept, and how a later sweep starts from it.

A ``twin`` sweep stores its twin's state — the factors, the last fit's residual and the
trials it came from, the engine version the trials ran — in its progress
(``progress.twin``, :class:`slotune.tuner.sweep.progress.TwinProgress`), written with every progress
update, so nothing learned is lost with the coordinator. A later ``twin`` sweep of the
same model, GPU and engine starts from the newest finished one (a warm start); when its
first trial reports another engine version, the twin starts afresh from the shipped
calibration and says so (:meth:`slotune.tuner.strategies.TwinStrategy._check_engine_version`).
"""

from __future__ import annotations

from typing import Any

from slotune.tuner.db.records import SweepRecord
from slotune.tuner.db.store import Store
from slotune.tuner.sweep.progress import SweepProgress

__all__ = ["warm_start"]

_LOOKBACK = 200
"""Finished sweeps searched for a calibration (newest first)."""


def warm_start(store: Store, sweep: SweepRecord) -> dict[str, Any]:
    """The TwinStrategy options that start ``sweep`` from the newest stored calibration of
    its model, GPU and engine (``{}``: none, the shipped prior)."""
    engine = sweep.space.get("engine", "sim")
    for other in store.list_sweeps(status="done", limit=_LOOKBACK).data:
        if other.id == sweep.id or other.strategy != "twin":
            continue
        if (other.model, other.gpu, other.space.get("engine", "sim")) != (
                sweep.model, sweep.gpu, engine):
            continue
        twin = SweepProgress.of(other.progress).twin
        if twin is None or twin.fit is None:
            continue
        return {
            "factors": twin.factors,
            "engine_version": twin.engine_version,
            "warm_start": (f"sweep {other.id}'s calibration ({len(twin.fit.trials)} trials, "
                           f"residual {twin.fit.residual:.3f}, engine "
                           f"{twin.engine_version or 'unknown'})"),
        }
    return {}
