"""A sweep's confirmation, driven: its top results re-run, stored, and the winner named.

:class:`~slotune.tuner.sweep.confirmation.ConfirmationPhase` runs repeats and picks a winner without
a database; this is the sweep's side of it. :class:`SweepConfirmation` picks the top configurations
from the :class:`~slotune.tuner.sweep.tally.Tally`, builds each repeat's spec (in capacity mode a
fresh measurement: the space's full probe design on a sample of its own, bracketing from below what
its search run found; checked against the sweep's quality baseline like the search), logs and stores
every attempt as a ``repeat`` row through the sweep's
:class:`~slotune.tuner.sweep.recorder.SweepRecorder`, shows each to the strategy, and takes over the
repeats a previous coordinator of the sweep stored. The winner is marked ``confirmed`` only when its
repeats hold the SLO: a lucky search run is not. In capacity mode each candidate that held stores
its confirmation's interval on its search row, so the number every surface reports for it is the
confirmation's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slotune.tuner.db.records import TrialRecord
from slotune.tuner.strategies import Proposal, Strategy
from slotune.tuner.sweep.baselines import QualityBaselines
from slotune.tuner.sweep.confirmation import ConfirmationPhase, Slot, Trait, top_configurations
from slotune.tuner.sweep.launcher import TrialLauncher, retry_as
from slotune.tuner.sweep.log import SweepEvents
from slotune.tuner.sweep.recorder import HEARTBEAT_S, SweepRecorder
from slotune.tuner.sweep.request import SweepBudget
from slotune.tuner.sweep.resume import stored_repeats
from slotune.tuner.sweep.tally import Tally
from slotune.workers.contracts import (
    CapacitySearch,
    KnobValue,
    ObjectiveMode,
    TrialResult,
    TrialSpec,
    Workload,
)
from slotune.workers.engines import adapter_for
from slotune.workers.trial.capacity import confirm_search, fresh_sample

__all__ = ["SpecBuilder", "SweepConfirmation"]

SpecBuilder = Callable[..., TrialSpec]
"""The runner's spec of (params, run_id, **overrides), as its search trials get."""


@dataclass
class SweepConfirmation:
    """The confirmation phase of one sweep (see the module docstring)."""

    recorder: SweepRecorder
    log: SweepEvents
    strategy: Strategy
    tally: Tally
    baselines: QualityBaselines[Proposal]
    spec: SpecBuilder
    capacity: CapacitySearch
    """The space's capacity search, its full design (a repeat brackets from below what
    its search run found)."""
    workload: Workload
    """The space's workload (a repeat measures a fresh sample of it)."""
    mode: ObjectiveMode

    def run(self, launcher: TrialLauncher[Slot], limits: SweepBudget, *,
            keep_going: Callable[[], bool]) -> None:
        """Re-run the top ``limits.confirm_top`` configurations ``confirm_repeats`` times;
        a winner leaves the table and the confirmed best (or why there is none) in the
        tally. Nothing changes when there was no candidate or ``keep_going`` said stop."""
        tally, sweep_id = self.tally, self.recorder.sweep_id
        chosen = top_configurations([(row.params, res) for row, res in tally.results],
                                    limits.confirm_top)
        if not chosen:
            return
        top = [tally.results[i][0] for i in chosen]
        found = [_reading(tally.results[i][1]) for i in chosen]
        traits = [Trait(lossy=spec.quality is not None, gpus=spec.gpus)
                  for spec in (self.spec(row.params, "trait") for row in top)] \
            if self.mode == "capacity" else None

        def record(slot: Slot, attempt: int, spec: TrialSpec, result: TrialResult) -> None:
            row = top[slot[0]]
            self.log.trial_ended(row.number, row.params, result, None, attempt=attempt,
                                 repeat=slot[1] + 1,
                                 retried=retry_as(result, attempt) is not None)
            self.recorder.record(role="repeat", number=row.number, repeat=slot[1] + 1,
                                 repeat_of=row.id, attempt=attempt, params=row.params,
                                 spec=spec, result=result)
            self.strategy.observe_repeat(row.params, result)
            self.recorder.drain()

        def started(slot: Slot, attempt: int) -> None:
            row = top[slot[0]]  # handed to the launcher: its GPUs are held
            self.log.trial_started(row.number, row.params, attempt=attempt,
                                   repeat=slot[1] + 1)

        done, attempts = stored_repeats(self.recorder.store, sweep_id, top)
        for (i, _), result in done.items():
            self.strategy.observe_repeat(top[i].params, result)
        phase = ConfirmationPhase(launcher,
                                  lambda i, r, a: self._repeat_spec(top[i], r, a, found[i]),
                                  repeats=limits.confirm_repeats, record=record,
                                  started=started, done=done, attempts=attempts)
        try:
            outcome = phase.run([row.params for row in top], keep_going=keep_going,
                                traits=traits)
        finally:
            tally.gpu_hours += phase.gpu_hours
        while not self.recorder.drain() and not self.recorder.lease_lost:
            time.sleep(HEARTBEAT_S)  # every repeat is stored before the winner is named
        if outcome is None or outcome.winner is None:
            return
        store, lease = self.recorder.store, self.recorder.lease
        if traits is not None:
            # Each candidate that held now carries its confirmation's interval: what the
            # view, the planner and every surface read of it, never its search reading.
            for row, repeated, trait in zip(top, outcome.repeated, traits, strict=True):
                if repeated.held and repeated.low is not None:
                    store.set_capacity(row.id, low=repeated.low, high=repeated.high,
                                       capacity=repeated.capacity, gpus=trait.gpus,
                                       repeats=limits.confirm_repeats, lease=lease)
        winner = top[outcome.winner]
        if outcome.held:
            store.mark_confirmed(winner.id, repeats=limits.confirm_repeats, lease=lease)
            chosen_one = outcome.repeated[outcome.winner]
            mean = chosen_one.capacity / traits[outcome.winner].gpus \
                if traits is not None and chosen_one.capacity is not None else outcome.mean
            tally.best = (mean, winner.id)
        else:
            tally.best = None
            tally.unconfirmed = (
                "the best configurations did not hold the SLO when re-run "
                f"({limits.confirm_repeats} repeats each): their search results were not "
                "reproducible")
        tally.confirmation = [{"trial_id": top[row.pop("candidate")].id,
                               "number": top[i].number, **row}
                              for i, row in enumerate(outcome.table)]

    def _repeat_spec(self, row: TrialRecord, repeat: int, attempt: int,
                     found: float | None) -> TrialSpec:
        overrides: dict[str, Any] = {}
        if self.mode == "capacity":
            # Measured afresh: the space's full probe design, a sample of its own, and a
            # bracket of its own from below what the search found.
            search = self.capacity if not found else confirm_search(self.capacity, found)
            overrides["capacity"] = search
            overrides["workload"] = fresh_sample(self.workload, repeat)
        params: dict[str, KnobValue] = row.params
        spec = self.spec(params,
                         f"s{self.recorder.sweep_id}-t{row.number}-confirm{repeat}-a{attempt}",
                         **overrides)
        # A lossy configuration is checked against the sweep's baseline, as in the search.
        spec = self.baselines.ready(spec) or spec
        return adapter_for(spec.engine).repeat_spec(spec, repeat)


def _reading(result: TrialResult) -> float | None:
    """Where a search result put the capacity's lower end (what a repeat brackets from)."""
    return result.capacity_low if result.capacity_low is not None else result.capacity
