"""The search's launch queue: proposals on their way to a GPU, and why they wait.

A proposal the strategy made does not always run at once. It waits for GPUs other
sweeps of this coordinator hold (held here, *deferred*, so a database outage or a full
share retries the same one rather than asking for another); a lossy one waits for the
sweep's quality baseline (parked in :class:`~slotune.tuner.sweep.baselines.QualityBaselines`, then
*ready*, first in line); and one that can never run here — it breaks a rule of the space
or needs more GPUs than any node offers — is recorded ``infeasible`` at once, never booted
and never waited for.

:class:`LaunchQueue` keeps that state and the sweep's :class:`TrialLauncher`; what to
try, and storing, stay the runner's, reached through :class:`LaunchHooks`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from slotune.tuner.db.records import TrialRecord
from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies import Proposal, unplaceable_result
from slotune.tuner.sweep.baselines import QualityBaselines
from slotune.tuner.sweep.executors import TrialExecutor
from slotune.tuner.sweep.launcher import GpuShare, Launched, TrialLauncher, retry_as
from slotune.workers.contracts import TrialResult, TrialSpec

__all__ = ["Attempt", "Baseline", "LaunchHooks", "LaunchQueue"]


@dataclass
class Attempt:
    """A search trial in flight: its stored row and the proposal it answers."""

    row: TrialRecord
    proposal: Proposal


@dataclass
class Baseline:
    """A quality baseline in flight: its spec (as :mod:`slotune.tuner.sweep.baselines` keys it),
    which baseline of the sweep it is, and which attempt."""

    spec: TrialSpec
    number: int
    attempt: int = 1


class LaunchHooks(Protocol):
    """What the queue needs of the runner: proposals, and rows for what it starts."""

    def propose(self) -> tuple[Proposal, TrialSpec | None] | None:
        """The next proposal and its spec (None: a preset result), if the budget allows."""
        ...

    def start_trial(self, proposal: Proposal, spec: TrialSpec | None, *,
                    attempt: int) -> TrialRecord:
        """The stored row of an attempt about to start (or be recorded at once)."""
        ...

    def record(self, row: TrialRecord, proposal: Proposal, result: TrialResult,
               gpus: int = 0) -> None:
        """Record a search result; here one known without running (a preset one, or one
        never placeable), so on no GPUs."""
        ...

    def waiting_changed(self) -> None:
        """The sweep began or stopped waiting for GPUs (its progress says so)."""
        ...


class LaunchQueue:
    """One sweep's launches: in flight, deferred, parked and ready (module docstring)."""

    def __init__(self, executor: TrialExecutor, share: GpuShare, space: SearchSpace,
                 sweep_id: int, *, max_parallel: int | None, coordinator_id: str) -> None:
        self.sweep_id = sweep_id
        self.max_parallel = max_parallel
        self.coordinator_id = coordinator_id
        """Whose sibling sweeps hold the GPUs this one waits for (its progress says)."""
        self.trials: TrialLauncher[Attempt | Baseline] = TrialLauncher(
            executor, share, sweep_id)
        """The search's trials (and quality baselines) in flight."""
        self.baselines: QualityBaselines[Proposal] = QualityBaselines(
            space, sweep_id, max_parked=share.gpus)
        self.ready: list[tuple[Proposal, TrialSpec]] = []
        """Lossy proposals whose baseline answered, to launch before asking for more."""
        self.deferred: tuple[Proposal, TrialSpec | None] | None = None
        self.waiting_for_gpus = False
        """The last launch stopped for GPUs other sweeps hold, not for want of proposals."""
        self.waiting: dict[str, str] | None = None
        """What the sweep waits for and since when, while nothing of it runs."""

    def started(self) -> int:
        """Search trials asked for and not finished: in flight, parked or ready (a
        baseline itself is not a trial of the search)."""
        in_flight = sum(isinstance(tag, Attempt) for tag in self.trials.tags())
        return in_flight + self.baselines.parked + len(self.ready)

    def unlaunched(self) -> bool:
        """Proposals asked for but not running yet — waiting for their quality baseline, or
        for GPUs — which the sweep launches before it may end."""
        return bool(self.ready) or self.baselines.parked > 0 or self.deferred is not None

    def parallel(self) -> int:
        """How many trials of the sweep may run at once (the ETA's divisor)."""
        return max(1, min(self.trials.share.gpus, self.max_parallel or 10**6))

    def running_rows(self) -> list[int]:
        """The rows of the search trials in flight (a baseline's is written when it ends)."""
        return [run.row.id for run in self.trials.tags() if isinstance(run, Attempt)]

    def launch(self, hooks: LaunchHooks, *, ask: bool = True) -> bool:
        """Start what the GPUs, ``max_parallel`` and the hooks allow (``ask``: new proposals
        too, not only those that waited for their baseline); True if anything did."""
        self.waiting_for_gpus = False
        launched = self._start_baselines()
        while True:
            if self.max_parallel is not None and len(self.trials) >= self.max_parallel:
                break
            if self.deferred is None:
                if not self.trials.has_room():
                    self.waiting_for_gpus = True  # other sweeps of this coordinator hold them
                    break
                if self.ready:
                    self.deferred = self.ready.pop(0)
                else:
                    proposed = hooks.propose() if ask else None
                    if proposed is None:
                        break
                    # Held here until it is recorded: a database outage retries the same one.
                    self.deferred = proposed
            proposal, spec = self.deferred
            # Breaks a rule of the space, or needs more than any node will ever offer:
            # recorded infeasible at once, never booted, never waited for.
            known = proposal.preset if spec is None else self._never_placed(spec)
            if known is not None:
                row = hooks.start_trial(proposal, spec, attempt=1)
                self.deferred = None
                hooks.record(row, proposal, known)
                launched = True
                continue
            assert spec is not None  # only a preset proposal comes without one
            ready = self.baselines.ready(spec)
            if ready is None:
                # Lossy, and the sweep's baseline has not answered yet: it waits for it.
                if not self.baselines.park(proposal, spec):
                    break  # enough wait already: ask for nothing more until it answers
                self.deferred = None
                launched = self._start_baselines() or launched
                continue
            spec = ready
            if not self.trials.reserve(spec):
                self.waiting_for_gpus = True  # held until a GPU group of its size is free
                break
            try:
                row = hooks.start_trial(proposal, spec, attempt=1)
            except BaseException:
                self.trials.unreserve(spec)
                raise
            self.deferred = None
            self.trials.submit(spec, Attempt(row, proposal))
            launched = True
        if launched and self.waiting is not None:
            self.waiting = None
            hooks.waiting_changed()
        return launched

    def wait_for_gpus(self, hooks: LaunchHooks) -> None:
        """Nothing of this sweep runs: say what it waits for (once), and wait a little."""
        if self.waiting is None:
            gpus = self.deferred[1].gpus if self.deferred and self.deferred[1] else 1
            self.waiting = {"for": f"{gpus} GPU(s), held by other sweeps of coordinator "
                                   f"{self.coordinator_id}",
                            "since": datetime.now(UTC).isoformat()}
            hooks.waiting_changed()
        time.sleep(0.2)

    def relaunch(self, hooks: LaunchHooks, launched: Launched[Attempt | Baseline]) -> None:
        """Run a search attempt that said nothing about its configuration again."""
        assert isinstance(launched.tag, Attempt)
        proposal = launched.tag.proposal
        attempt = launched.tag.row.attempt + 1
        spec = launched.spec.model_copy(update={
            "run_id": f"s{self.sweep_id}-t{proposal.number}-a{attempt}"})
        row = hooks.start_trial(proposal, spec, attempt=attempt)
        self.trials.resubmit(spec, Attempt(row, proposal))

    def baseline_finished(self, run: Baseline, spec: TrialSpec, result: TrialResult
                          ) -> TrialResult:
        """A lost worker's baseline is run again, else the lossy proposals that waited for
        it go first in line (answers or no answers); the result to store as its row."""
        retry = retry_as(result, run.attempt)
        if retry is not None:
            again = spec.model_copy(update={
                "run_id": f"s{self.sweep_id}-baseline{run.number}-a{run.attempt + 1}"})
            self.trials.resubmit(again, Baseline(again, run.number, run.attempt + 1))
            return retry
        self.ready.extend(self.baselines.finished(spec, result))
        return result

    def _start_baselines(self) -> bool:
        """Start the quality baselines lossy proposals wait for, as GPUs allow."""
        started = False
        for spec in self.baselines.to_start():
            number = self.baselines.next_number
            spec = spec.model_copy(update={"run_id": f"s{self.sweep_id}-baseline{number}-a1"})
            never = self._never_placed(spec)
            if never is not None:  # its lossy trials learn why, and are not held forever
                self.baselines.started(spec)
                self.ready.extend(self.baselines.finished(spec, never))
                started = True
                continue
            if not self.trials.reserve(spec):
                self.waiting_for_gpus = True
                break
            self.baselines.started(spec)
            self.trials.submit(spec, Baseline(spec, number))
            started = True
        return started

    def _never_placed(self, spec: TrialSpec) -> TrialResult | None:
        """The infeasible result of a ``spec`` that can never run here (None: it can, now
        or once GPUs free up)."""
        reason = self.trials.never_placed(spec)
        return None if reason is None else unplaceable_result(spec.run_id, reason)
