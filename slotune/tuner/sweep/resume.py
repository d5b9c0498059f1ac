"""Resuming a sweep from the database alone: what a previous coordinator left behind.

The database is the single source of truth, so a runner starts every sweep — new, resumed
or taken over — by reading it back:

* rows left ``running`` by a dead coordinator become ``lost`` and their params are
  re-enqueued in the Optuna study (whose trials that coordinator asked for are failed);
* stored quality baselines give back their answers, so no lossy trial boots one again;
* every stored search result is accounted and handed to the strategy, so nothing is
  measured twice (a lost worker's result is not a fact about its configuration);
* in confirmation, :func:`stored_repeats` says which repeats already stand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import optuna

from slotune.tuner.db.records import Lease, TrialRecord
from slotune.tuner.db.store import Store
from slotune.tuner.strategies import Proposal, Strategy
from slotune.tuner.sweep.baselines import QualityBaselines
from slotune.tuner.sweep.confirmation import Slot
from slotune.tuner.sweep.launcher import gpu_hours, retry_as
from slotune.tuner.sweep.tally import Tally
from slotune.workers.contracts import KnobValue, TrialResult, TrialSpec

__all__ = ["resume", "stored_repeats"]

log = logging.getLogger(__name__)


def resume(store: Store, sweep_id: int, lease: Lease, *, strategy: Strategy,
           baselines: QualityBaselines[Proposal], tally: Tally,
           gpus_of: Callable[[dict[str, KnobValue]], int]) -> None:
    """Bring ``strategy``, ``baselines`` and ``tally`` up to what the sweep stored."""
    study = strategy.study
    orphans = store.recover_orphans(sweep_id, lease=lease)
    running = {t.number: t for t in study.get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    for number in running:
        # Asked by a coordinator that died before it finished them: failed in Optuna.
        study.tell(number, state=optuna.trial.TrialState.FAIL)
    for orphan in orphans:
        study.enqueue_trial(orphan.params, skip_if_exists=False)
        log.info("sweep %s: trial %s (attempt %s) was lost with its coordinator; "
                 "re-enqueued", sweep_id, orphan.number, orphan.attempt)
    stored = [(TrialSpec.model_validate(row.spec), TrialResult.model_validate(row.result))
              for row in store.list_trials(sweep_id, role="any").data
              if row.role != "search" and row.spec is not None and row.result is not None]
    baselines.restore((spec, result) for spec, result in stored
                      if spec.golden_reference is not None)
    tally.gpu_hours += sum(gpu_hours(result, spec.gpus) for spec, result in stored)
    done = store.list_trials(sweep_id, status=["ok", "failed", "infeasible"])
    known = []
    for row in done.data:
        if row.result is None:
            continue
        result = TrialResult.model_validate(row.result)
        if result.failure == "worker_lost":
            continue  # transient: not a fact about the configuration
        known.append((row.params, result))
        tally.account(row, result, gpus=gpus_of(row.params))
    strategy.restore(known)


def stored_repeats(store: Store, sweep_id: int, top: list[TrialRecord]
                   ) -> tuple[dict[Slot, TrialResult], dict[Slot, int]]:
    """Repeats of ``top`` a previous coordinator of this sweep stored: the results that
    stand, and the attempts made per slot (so new attempts do not reuse a number)."""
    index = {row.id: i for i, row in enumerate(top)}
    done: dict[Slot, TrialResult] = {}
    attempts: dict[Slot, int] = {}
    for row in store.list_trials(sweep_id, role="repeat").data:
        if row.repeat_of not in index or row.result is None:
            continue
        slot = (index[row.repeat_of], row.repeat - 1)
        attempts[slot] = max(attempts.get(slot, 0), row.attempt)
        result = TrialResult.model_validate(row.result)
        if retry_as(result, row.attempt) is None:  # it stood, as it would have here
            done[slot] = result
    return done, attempts
