"""The study coordinator: runs sweeps from the database, trials on the executor.

The database is the single source of truth, so a coordinator that dies resumes from it
alone. A :class:`SweepRunner` drives one claimed sweep:

1. **Resume.** Running trials left by a dead coordinator become ``lost``, their Optuna
   trials are failed and their params re-enqueued; everything already measured is
   handed to the strategy so nothing is measured twice.
2. **Search.** Optuna ask/tell through the strategy; as many trials in flight as there
   are free GPU groups of the size the spec needs (shared fairly between the sweeps of
   one coordinator); a configuration that breaks a rule of the space is recorded
   ``infeasible`` without booting; a lost worker is retried with the same params.
3. **Budgets.** Trials, GPU-hours, a deadline, parallelism and a plateau stop — checked
   by :class:`Budget`, apart from the strategy (which may stop on its own).
4. **Confirm.** The top configurations are re-run several times in interleaved order and
   the winner is the best lower confidence bound; its trial is marked ``confirmed``.

Three roles stay apart: the executor runs trials, the strategy says what to try, the
budget says whether to continue. The runner wires the parts that each do one job:
:mod:`tuner.study` (the Optuna study and strategy), :mod:`tuner.launcher` (GPU share,
in-flight trials, retries by failure class), :mod:`tuner.outbox` (results waiting for
the database), :mod:`tuner.confirmation` (the repeats and the winner) and
:mod:`tuner.progress` (what the CLI, the API and the dashboard read).

Every write a runner makes for its sweep carries the :class:`~tuner.db.records.Lease` its
claim returned. When the store refuses one (:class:`LeaseLost`: the sweep was claimed
again while this coordinator stalled), the runner stops its trials and touches nothing
more of the sweep: its late results are dropped with a log line, its successor owns them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import optuna

from tuner.baselines import QualityBaselines
from tuner.confirmation import ConfirmationPhase, Slot, top_configurations
from tuner.db.errors import Conflict, LeaseLost, StorageUnavailable, describe
from tuner.db.records import Lease, SweepRecord, TrialRecord
from tuner.executors import ExecutorLost, TrialExecutor
from tuner.launcher import GpuShare, Launched, TrialLauncher, gpu_hours, retry_as
from tuner.outbox import Outbox
from tuner.progress import Phase, SweepProgress
from tuner.spaces import SearchSpace
from tuner.store import Store
from tuner.strategies import (
    NOISE_TOLERANCE,
    Proposal,
    Strategy,
    TwinStrategy,
    make_strategy,
    unplaceable_result,
)
from tuner.study import sweep_study
from tuner.sweep_log import SweepLog, config_delta
from tuner.sweeps import SweepBudget, stored_space
from tuner.twin.calibrations import warm_start
from workers.contracts import KnobValue, TrialResult, TrialSpec, replica_gpus
from workers.engines import adapter_for
from workers.pipeline import remeasure_search, warm_search

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
STALE_AFTER_S = 15.0
"""A running sweep whose coordinator has not beaten for this long may be taken over
(heartbeats come every few seconds, so this is several missed beats)."""
CLOCK_SKEW_WARN_S = 5.0
"""A host clock this far from the database's is said once at start: leases and stored
times are on the database's clock, so the coordinator works, but its log's times are off."""

ProgressFn = Callable[[dict[str, Any]], None]

TRANSIENT_STORAGE_ERRORS: tuple[type[Exception], ...] = (StorageUnavailable,)
"""The database (ours or Optuna's, the same server) is down or restarting: retry later.
Optuna's storage translates its errors as the store does (``tuner.db.optuna_storage``)."""


@dataclass
class Budget:
    """Whether the sweep may start another trial (the third role, apart from strategy)."""

    limits: SweepBudget
    started_at: float = field(default_factory=time.monotonic)

    def stop_reason(self, *, trials: int, gpu_hours: float, since_improvement: int) -> str | None:
        b = self.limits
        if trials >= b.max_trials:
            return f"trial budget reached ({b.max_trials} trials)"
        if b.max_gpu_hours is not None and gpu_hours >= b.max_gpu_hours:
            return f"GPU-hour budget reached ({gpu_hours:.2f} ≥ {b.max_gpu_hours:g})"
        if b.deadline is not None:
            deadline = b.deadline if b.deadline.tzinfo else b.deadline.replace(tzinfo=UTC)
            if datetime.now(UTC) >= deadline:
                return f"deadline reached ({deadline.isoformat()})"
        if b.plateau_trials is not None and since_improvement >= b.plateau_trials:
            return (f"plateau: {since_improvement} trials without an improvement beyond "
                    f"{NOISE_TOLERANCE:.0%}")
        return None


@dataclass
class _Attempt:
    """A search trial in flight: its stored row and the proposal it answers."""

    row: TrialRecord
    proposal: Proposal


@dataclass
class _Baseline:
    """A quality baseline in flight: its spec (as :mod:`tuner.baselines` keys it), which
    baseline of the sweep it is, and which attempt."""

    spec: TrialSpec
    number: int
    attempt: int = 1


class SweepRunner:
    """Runs one claimed sweep to its end (see the module docstring)."""

    def __init__(self, store: Store, sweep: SweepRecord, executor: TrialExecutor, *,
                 coordinator_id: str, database_url: str, share: GpuShare | None = None,
                 on_progress: ProgressFn | None = None,
                 sweep_log: SweepLog | None = None) -> None:
        if sweep.lease is None:
            raise ValueError(f"sweep {sweep.id} is not claimed: claim it before running it")
        self.store = store
        self.sweep = sweep
        self.lease: Lease = sweep.lease
        self.executor = executor
        self.coordinator_id = coordinator_id
        self.database_url = database_url
        self.share = share or GpuShare(executor.gpu_count())
        self.trials: TrialLauncher[_Attempt | _Baseline] = TrialLauncher(
            executor, self.share, sweep.id)
        """The search's trials (and quality baselines) in flight."""
        self.on_progress = on_progress
        self.sweep_log = sweep_log or SweepLog(None)
        """One line per trial start and end and per phase (files and log shippers)."""
        self._logged_phase: Phase | None = None
        self.space: SearchSpace = stored_space(sweep.space)
        self._defaults = self.space.defaults()
        budget = dict(sweep.budget)
        self.seed = int(budget.pop("seed", 0))
        self.budget = Budget(SweepBudget.model_validate(budget))
        self.strategy: Strategy = self._strategy()
        self.baselines: QualityBaselines[Proposal] = QualityBaselines(
            self.space, sweep.id, max_parked=self.share.gpus)
        self._ready: list[tuple[Proposal, TrialSpec]] = []
        """Lossy proposals whose baseline answered, to launch before asking for more."""
        self.results: list[tuple[TrialRecord, TrialResult]] = []
        self.gpu_hours = 0.0
        self.best: tuple[float, int] | None = None
        self.since_improvement = 0
        self.cancelled = False
        self._last_beat = 0.0
        self._durations: list[float] = []
        self._deferred: tuple[Proposal, TrialSpec | None] | None = None
        self._waiting_for_gpus = False
        """The last launch stopped for GPUs other sweeps hold, not for want of proposals."""
        self._waiting: dict[str, str] | None = None
        """What the sweep waits for and since when, while nothing of it runs."""
        self.confirmation: list[dict[str, Any]] = []
        self.unconfirmed: str | None = None
        # Finished trials whose recording waits for the database (it may be restarting):
        # each item is a queue of steps, run in order, each retried until it succeeds.
        self._outbox = Outbox(TRANSIENT_STORAGE_ERRORS, name=f"sweep {sweep.id}")
        self._unrecorded = 0
        self._outage: str | None = None
        self.lease_lost = False
        """Another coordinator took the sweep over: every write of this one stops."""

    # ---- setup --------------------------------------------------------------------

    def _strategy(self) -> Strategy:
        options = warm_start(self.store, self.sweep) if self.sweep.strategy == "twin" else {}
        return make_strategy(self.sweep.strategy, self.space, seed=self.seed,
                             study=sweep_study(self.sweep, self.database_url), **options)

    def _resume(self) -> None:
        study = self.strategy.study
        orphans = self.store.recover_orphans(self.sweep.id, lease=self.lease)
        running = {t.number: t for t in study.get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        for number in running:
            # Asked by a coordinator that died before it finished them: failed in Optuna.
            study.tell(number, state=optuna.trial.TrialState.FAIL)
        for orphan in orphans:
            study.enqueue_trial(orphan.params, skip_if_exists=False)
            log.info("sweep %s: trial %s (attempt %s) was lost with its coordinator; "
                     "re-enqueued", self.sweep.id, orphan.number, orphan.attempt)
        stored = [(TrialSpec.model_validate(row.spec), TrialResult.model_validate(row.result))
                  for row in self.store.list_trials(self.sweep.id, role="any").data
                  if row.role != "search" and row.spec is not None and row.result is not None]
        self.baselines.restore((spec, result) for spec, result in stored
                               if spec.golden_reference is not None)
        self.gpu_hours += sum(gpu_hours(result, spec.gpus) for spec, result in stored)
        done = self.store.list_trials(self.sweep.id, status=["ok", "failed", "infeasible"])
        known = []
        for row in done.data:
            if row.result is None:
                continue
            result = TrialResult.model_validate(row.result)
            if result.failure == "worker_lost":
                continue  # transient: not a fact about the configuration
            known.append((row.params, result))
            self._account(row, result, gpus=self._gpus_of(row.params))
        self.strategy.restore(known)

    # ---- the loop -----------------------------------------------------------------

    def run(self) -> SweepRecord:
        self.share.join(self.sweep.id)
        try:
            self._resume()
            self._say_phase(self.progress(phase="search"))
            stop = self._search()
            if not self.cancelled:
                self._progress(phase="confirm", stop_reason=stop)
                self._confirm()
            if self.lease_lost:
                return self.store.get_sweep(self.sweep.id)
            if self.cancelled:
                self._progress(phase="cancelled", stop_reason=stop)
                return self.store.get_sweep(self.sweep.id)
            done = self.progress(phase="done", stop_reason=stop)
            final = self.store.update_sweep(self.sweep.id, status="done", stop_reason=stop,
                                            progress=done.stored(), lease=self.lease)
            self._say_phase(done)
            return final
        except LeaseLost as exc:
            self._fenced_out(exc)
            return self.store.get_sweep(self.sweep.id)
        except ExecutorLost as exc:
            if not self.lease_lost:
                self._abandon(f"{exc}; resume it")
            raise
        except BaseException:
            if not self.lease_lost:
                self._abandon()
            raise
        finally:
            self.share.leave(self.sweep.id)

    def _search(self) -> str:
        stop: str | None = None
        while True:
            if not self._beat():
                return "cancelled"
            if not self._drain():
                # The database is away: trials keep running, their results wait here.
                if len(self.trials):
                    for launched, result in self.trials.wait(HEARTBEAT_S):
                        self._finished(launched, result)
                else:
                    time.sleep(HEARTBEAT_S / 2)
                continue
            if self.lease_lost:
                return "lease lost"
            stop = stop or self.budget.stop_reason(
                trials=self._trials_started(), gpu_hours=self.gpu_hours,
                since_improvement=self.since_improvement)
            if stop is None or self._unlaunched():
                try:
                    self._launch(ask=stop is None)
                except TRANSIENT_STORAGE_ERRORS as exc:
                    self._note_outage(exc)
                    continue
            if not len(self.trials):
                # Trials recorded without running (infeasible) may have used the budget up.
                stop = stop or self.budget.stop_reason(
                    trials=self._trials_started(), gpu_hours=self.gpu_hours,
                    since_improvement=self.since_improvement)
                if self._unlaunched():
                    pass  # asked and counted: it runs once GPUs other sweeps hold free up
                elif stop is not None:
                    return stop
                elif self.strategy.done:
                    return self.strategy.stop_reason or "the strategy stopped"
                elif self.strategy.pending == 0 and not self._launch() \
                        and not self._waiting_for_gpus:
                    return self.strategy.stop_reason or "nothing left to try"
                if not len(self.trials):
                    self._wait_for_gpus()  # a proposal waits for GPUs other sweeps hold
                    continue
            for launched, result in self.trials.wait(HEARTBEAT_S):
                self._finished(launched, result)

    def _unlaunched(self) -> bool:
        """Proposals asked for but not running yet — waiting for their quality baseline, or
        for GPUs — which the sweep launches before it may end."""
        return bool(self._ready) or self.baselines.parked > 0 or self._deferred is not None

    def _trials_started(self) -> int:
        """Search trials asked for: finished, in flight, waiting for the database or for
        their quality baseline (a baseline itself is not a trial of the search)."""
        in_flight = sum(isinstance(tag, _Attempt) for tag in self.trials.tags())
        return (len(self.results) + in_flight + self._unrecorded + self.baselines.parked
                + len(self._ready))

    def _launch(self, *, ask: bool = True) -> bool:
        """Start what the budget, the GPUs and the strategy allow (``ask``: new proposals
        too, not only those that waited for their baseline); True if anything did."""
        self._waiting_for_gpus = False
        launched = self._start_baselines()
        limit = self.budget.limits.max_parallel
        while True:
            if limit is not None and len(self.trials) >= limit:
                break
            if self._deferred is None:
                if not self.trials.has_room():
                    self._waiting_for_gpus = True  # other sweeps of this coordinator hold them
                    break
                if self._ready:
                    self._deferred = self._ready.pop(0)
                else:
                    if not ask or self._trials_started() >= self.budget.limits.max_trials:
                        break
                    proposal = self.strategy.ask()
                    if proposal is None:
                        break
                    spec = None if proposal.preset is not None else self._spec(
                        proposal.params, f"s{self.sweep.id}-t{proposal.number}-a1")
                    # Held here until it is recorded: a database outage retries the same one.
                    self._deferred = (proposal, spec)
            proposal, spec = self._deferred
            # Breaks a rule of the space, or needs more than any node will ever offer:
            # recorded infeasible at once, never booted, never waited for.
            known = proposal.preset if spec is None else self._never_placed(spec)
            if known is not None:
                row = self._start_trial(proposal, spec, attempt=1)
                self._deferred = None
                self._enqueue_record(row, proposal, known, 0)
                self._drain()
                launched = True
                continue
            assert spec is not None  # only a preset proposal comes without one
            ready = self.baselines.ready(spec)
            if ready is None:
                # Lossy, and the sweep's baseline has not answered yet: it waits for it.
                if not self.baselines.park(proposal, spec):
                    break  # enough wait already: ask for nothing more until it answers
                self._deferred = None
                launched = self._start_baselines() or launched
                continue
            spec = ready
            if not self.trials.reserve(spec):
                self._waiting_for_gpus = True  # held until a GPU group of its size is free
                break
            try:
                row = self._start_trial(proposal, spec, attempt=1)
            except BaseException:
                self.trials.unreserve(spec)
                raise
            self._deferred = None
            self.trials.submit(spec, _Attempt(row, proposal))
            launched = True
        if launched and self._waiting is not None:
            self._waiting = None
            self._progress(phase="search")
        return launched

    def _wait_for_gpus(self) -> None:
        """Nothing of this sweep runs: say so in its progress (once), and wait a little."""
        if self._waiting is None:
            gpus = self._deferred[1].gpus if self._deferred and self._deferred[1] else 1
            self._waiting = {"for": f"{gpus} GPU(s), held by other sweeps of coordinator "
                                    f"{self.coordinator_id}",
                             "since": datetime.now(UTC).isoformat()}
            self._progress(phase="search")
        time.sleep(0.2)

    def _start_baselines(self) -> bool:
        """Start the quality baselines lossy proposals wait for, as GPUs allow."""
        started = False
        for spec in self.baselines.to_start():
            number = self.baselines.next_number
            spec = spec.model_copy(update={"trial_id": f"s{self.sweep.id}-baseline{number}-a1"})
            never = self._never_placed(spec)
            if never is not None:  # its lossy trials learn why, and are not held forever
                self.baselines.started(spec)
                self._ready.extend(self.baselines.finished(spec, never))
                started = True
                continue
            if not self.trials.reserve(spec):
                self._waiting_for_gpus = True
                break
            self.baselines.started(spec)
            self.trials.submit(spec, _Baseline(spec, number))
            started = True
        return started

    def _never_placed(self, spec: TrialSpec) -> TrialResult | None:
        """The infeasible result of a ``spec`` that can never run here (None: it can, now
        or once GPUs free up)."""
        reason = self.trials.never_placed(spec)
        return None if reason is None else unplaceable_result(spec.trial_id, reason)

    def _start_trial(self, proposal: Proposal, spec: TrialSpec | None, *,
                     attempt: int) -> TrialRecord:
        try:
            row = self.store.start_trial(self.sweep.id, number=proposal.number,
                                         params=proposal.params, spec=spec, attempt=attempt,
                                         worker=self.coordinator_id, lease=self.lease)
        except LeaseLost:
            if attempt == 1:  # asked but never recorded: Optuna must not keep it RUNNING
                self.strategy.withdraw(proposal)
            raise
        self.sweep_log.trial_started(self.sweep.id, proposal.number,
                                     self._delta(proposal.params), attempt=attempt)
        return row

    def _finished(self, launched: Launched[_Attempt | _Baseline], result: TrialResult) -> None:
        run, gpus = launched.tag, launched.spec.gpus
        if isinstance(run, _Baseline):
            self._baseline_finished(run, launched.spec, result)
            return
        retry = retry_as(result, run.row.attempt)
        if retry is not None:
            # Says nothing about the configuration: record this attempt, run it again.
            self.sweep_log.trial_ended(self.sweep.id, run.proposal.number,
                                       self._delta(run.proposal.params), retry, None,
                                       attempt=run.row.attempt, retried=True)
            self.gpu_hours += gpu_hours(retry, gpus)
            self._outbox.add(
                lambda: self.store.finish_trial(run.row.id, retry, lease=self.lease),
                lambda: self._relaunch(launched))
        else:
            self._enqueue_record(run.row, run.proposal, result, gpus)
        self._drain()

    def _baseline_finished(self, run: _Baseline, spec: TrialSpec, result: TrialResult) -> None:
        """Store the baseline's boot as its row; a lost worker's is run again, else the
        lossy proposals that waited for it go first in line (answers or no answers)."""
        self.gpu_hours += gpu_hours(result, spec.gpus)
        retry = retry_as(result, run.attempt)
        stored = retry if retry is not None else result
        self._outbox.add(lambda: self.store.record_trial(
            self.sweep.id, role="baseline", number=run.number, attempt=run.attempt,
            params={}, spec=spec, result=stored, worker=self.coordinator_id, lease=self.lease))
        if retry is not None:
            again = spec.model_copy(update={
                "trial_id": f"s{self.sweep.id}-baseline{run.number}-a{run.attempt + 1}"})
            self.trials.resubmit(again, _Baseline(again, run.number, run.attempt + 1))
        else:
            self._ready.extend(self.baselines.finished(spec, result))
        self._drain()

    def _relaunch(self, launched: Launched[_Attempt | _Baseline]) -> None:
        assert isinstance(launched.tag, _Attempt)
        proposal = launched.tag.proposal
        attempt = launched.tag.row.attempt + 1
        spec = launched.spec.model_copy(update={
            "trial_id": f"s{self.sweep.id}-t{proposal.number}-a{attempt}"})
        row = self._start_trial(proposal, spec, attempt=attempt)
        self.trials.resubmit(spec, _Attempt(row, proposal))

    def _enqueue_record(self, row: TrialRecord, proposal: Proposal, result: TrialResult,
                        gpus: int) -> None:
        """Store the result, tell the strategy, account: each step retried until done."""
        self._unrecorded += 1
        stored: list[TrialRecord] = []

        def account() -> None:
            self._unrecorded -= 1
            self._account(stored[0], result, gpus)
            self._sync_cards()
            progress = self._progress(phase="search")
            self.sweep_log.trial_ended(self.sweep.id, proposal.number,
                                       self._delta(proposal.params), result, progress,
                                       best_trial=self._best_number(),
                                       attempt=row.attempt)

        self._outbox.add(
            lambda: stored.append(self.store.finish_trial(row.id, result, lease=self.lease)),
            lambda: self.strategy.tell(proposal, result),
            account,
        )

    def _drain(self) -> bool:
        """Run what waits in the outbox; False while the database is still away."""
        try:
            outage = self._outbox.drain(stopped=lambda: self.lease_lost)
        except LeaseLost as exc:
            self._fenced_out(exc)
            return True
        if outage is not None:
            self._note_outage(outage)
            return False
        if self._outage is not None and not self.lease_lost:
            log.warning("sweep %s: the database is back; recorded what waited",
                        self.sweep.id)
            self._outage = None
        return True

    def _fenced_out(self, exc: LeaseLost) -> None:
        """The sweep was claimed again: stop its trials here, drop what waits, write nothing."""
        if not self.lease_lost:
            log.warning("sweep %s: this coordinator lost its lease (%s); stopping without "
                        "touching the sweep, %d unrecorded result(s) dropped",
                        self.sweep.id, exc, self._unrecorded + len(self._outbox))
        self.lease_lost = self.cancelled = True
        self._stop_trials()
        self._outbox.clear()

    def _stop_trials(self) -> None:
        """Cancel every trial this runner has in flight (their engines die with them)."""
        self.trials.cancel_all()

    def _note_outage(self, exc: Exception) -> None:
        reason = describe(exc)
        if self._outage is None:
            log.warning("sweep %s: database unavailable (%s); results are kept and written "
                        "once it is back", self.sweep.id, reason[:200])
        self._outage = reason

    def _account(self, row: TrialRecord, result: TrialResult, gpus: int) -> None:
        self.results.append((row, result))
        self.gpu_hours += gpu_hours(result, gpus)
        if result.status == "ok" and result.timings.total_s:
            self._durations.append(result.timings.total_s)
        improved = result.status == "ok" and result.objective > 0 and (
            self.best is None or result.objective > self.best[0] * (1 + NOISE_TOLERANCE))
        if improved:
            self.best = (result.objective, row.id)
            self.since_improvement = 0
        else:
            if (result.status == "ok" and self.best is not None
                    and result.objective > self.best[0]):
                self.best = (result.objective, row.id)  # better, but within noise
            self.since_improvement += 1

    def _gpus_of(self, params: dict[str, KnobValue]) -> int:
        return replica_gpus(self.space.flags(params))

    def _spec(self, params: dict[str, KnobValue], trial_id: str, **overrides: Any) -> TrialSpec:
        if self.space.mode == "capacity" and self.best is not None and "capacity" not in overrides:
            # The capacity search starts from the best capacity per GPU so far (the
            # objective in capacity mode), which is all it needs of the sweep.
            overrides["capacity"] = warm_search(self.space.capacity, self.best[0],
                                                self._gpus_of(params))
        return self.space.to_trial_spec(params, trial_id, **overrides)

    # ---- confirmation -------------------------------------------------------------

    def _confirm(self) -> None:
        """Re-run the top configurations (:mod:`tuner.confirmation`); store what won."""
        limits = self.budget.limits
        chosen = top_configurations([(row.params, res) for row, res in self.results],
                                    limits.confirm_top)
        if not chosen:
            return
        top = [self.results[i][0] for i in chosen]
        found = [self.results[i][1].capacity for i in chosen]

        def record(slot: Slot, attempt: int, spec: TrialSpec, result: TrialResult) -> None:
            row = top[slot[0]]
            self.sweep_log.trial_ended(
                self.sweep.id, row.number, self._delta(row.params), result, None,
                attempt=attempt, repeat=slot[1] + 1,
                retried=retry_as(result, attempt) is not None)
            self._outbox.add(lambda: self.store.record_trial(
                self.sweep.id, role="repeat", number=row.number, repeat=slot[1] + 1,
                repeat_of=row.id, attempt=attempt, params=row.params, spec=spec,
                result=result, worker=self.coordinator_id, lease=self.lease))
            self.strategy.observe_repeat(row.params, result)
            self._drain()

        done, attempts = self._stored_repeats(top)
        for (i, _), result in done.items():
            self.strategy.observe_repeat(top[i].params, result)
        def started(slot: Slot, attempt: int) -> None:
            row = top[slot[0]]  # handed to the launcher: its GPUs are held
            self.sweep_log.trial_started(self.sweep.id, row.number,
                                         self._delta(row.params), attempt=attempt,
                                         repeat=slot[1] + 1)

        phase = ConfirmationPhase(TrialLauncher(self.executor, self.share, self.sweep.id),
                                  lambda i, r, a: self._repeat_spec(top[i], r, a, found[i]),
                                  repeats=limits.confirm_repeats, record=record,
                                  started=started, done=done, attempts=attempts)
        try:
            outcome = phase.run([row.params for row in top], keep_going=self._beat)
        finally:
            self.gpu_hours += phase.gpu_hours
        while not self._drain() and not self.lease_lost:
            time.sleep(HEARTBEAT_S)  # every repeat is stored before the winner is named
        if outcome is None or outcome.winner is None:
            return
        winner = top[outcome.winner]
        if outcome.held:
            # Confirmed only when the repeats hold the SLO: a lucky search run is not.
            self.store.mark_confirmed(winner.id, repeats=limits.confirm_repeats,
                                      lease=self.lease)
            self.best = (outcome.mean, winner.id)
        else:
            self.best = None
            self.unconfirmed = ("the best configurations did not hold the SLO when re-run "
                                f"({limits.confirm_repeats} repeats each): their search "
                                "results were not reproducible")
        self.confirmation = [{"trial_id": top[row.pop("candidate")].id, **row}
                             for row in outcome.table]

    def _stored_repeats(self, top: list[TrialRecord]
                        ) -> tuple[dict[Slot, TrialResult], dict[Slot, int]]:
        """Repeats of ``top`` a previous coordinator of this sweep stored: the results that
        stand, and the attempts made per slot (so new attempts do not reuse a number)."""
        index = {row.id: i for i, row in enumerate(top)}
        done: dict[Slot, TrialResult] = {}
        attempts: dict[Slot, int] = {}
        for row in self.store.list_trials(self.sweep.id, role="repeat").data:
            if row.repeat_of not in index or row.result is None:
                continue
            slot = (index[row.repeat_of], row.repeat - 1)
            attempts[slot] = max(attempts.get(slot, 0), row.attempt)
            result = TrialResult.model_validate(row.result)
            if retry_as(result, row.attempt) is None:  # it stood, as it would have here
                done[slot] = result
        return done, attempts

    def _repeat_spec(self, row: TrialRecord, repeat: int, attempt: int,
                     capacity: float | None) -> TrialSpec:
        overrides: dict[str, Any] = {}
        if capacity:  # re-measured around what the first run found
            overrides["capacity"] = remeasure_search(self.space.capacity, capacity)
        spec = self._spec(row.params,
                          f"s{self.sweep.id}-t{row.number}-confirm{repeat}-a{attempt}",
                          **overrides)
        # A lossy configuration is checked against the sweep's baseline, as in the search.
        spec = self.baselines.ready(spec) or spec
        return adapter_for(spec.engine).repeat_spec(spec, repeat)

    # ---- bookkeeping --------------------------------------------------------------

    def _beat(self) -> bool:
        """Heartbeat the sweep and its running trials; False once the sweep is cancelled."""
        now = time.monotonic()
        if now - self._last_beat < HEARTBEAT_S and not self.cancelled:
            return True
        self._last_beat = now
        if self.lease_lost:
            return False
        try:
            self.store.heartbeat_sweep(self.lease)
        except TRANSIENT_STORAGE_ERRORS as exc:
            self._note_outage(exc)
            return True
        except LeaseLost as exc:
            self._fenced_out(exc)  # another coordinator owns it now: touch nothing of its
            return False
        except Conflict:  # cancelled (or finished) under this lease: stop, leave it resumable
            self.cancelled = True
            self._stop_trials()
            self.store.recover_orphans(self.sweep.id, lease=self.lease)
            return False
        try:
            for run in self.trials.tags():
                if isinstance(run, _Attempt):  # a baseline's row is written when it ends
                    self.store.heartbeat_trial(run.row.id, lease=self.lease)
        except TRANSIENT_STORAGE_ERRORS as exc:
            self._note_outage(exc)
        except LeaseLost as exc:
            self._fenced_out(exc)
            return False
        return True

    def _sync_cards(self) -> None:
        cards = self.strategy.cards
        if not cards:
            return
        stored = {c.step: c for c in self.store.list_cards(self.sweep.id)}
        for card in cards:
            data = card.to_dict()
            existing = stored.get(card.step)
            if existing is None:
                existing = self.store.add_card(
                    self.sweep.id, step=card.step, symptom=card.symptom,
                    evidence=card.evidence, hypothesis=card.hypothesis,
                    variable=card.variable, values=list(card.values),
                    expected_direction=card.expected, controls=card.controls,
                    stop_condition=card.stop_condition, lease=self.lease)
            if card.verdict is not None and existing.verdict is None:
                self.store.resolve_card(existing.id, result={
                    "summary": card.result, "results": data["results"],
                    "baseline_value": card.baseline_value}, verdict=card.verdict,
                    rollback=card.rollback or None, values=list(card.values),
                    lease=self.lease)

    def progress(self, *, phase: Phase, stop_reason: str | None = None) -> SweepProgress:
        statuses = [res.status for _, res in self.results]
        remaining = max(0, self.budget.limits.max_trials - self._trials_started())
        parallel = max(1, min(self.share.gpus, self.budget.limits.max_parallel or 10**6))
        mean = sum(self._durations) / len(self._durations) if self._durations else None
        eta = None if mean is None else (
            math.ceil((remaining + len(self.trials)) / parallel) * mean)
        best_row = next((row for row, _ in self.results
                         if self.best is not None and row.id == self.best[1]), None)
        return SweepProgress.model_validate({
            "phase": phase, "trials": self._trials_started(),
            "done": sum(s == "ok" for s in statuses), "running": len(self.trials),
            "failed": sum(s == "failed" for s in statuses),
            "infeasible": sum(s == "infeasible" for s in statuses),
            "max_trials": self.budget.limits.max_trials,
            "best_objective": self.best[0] if self.best else None,
            "best_trial_id": self.best[1] if self.best else None,
            "best_params": best_row.params if best_row else None,
            "gpu_hours": round(self.gpu_hours, 4), "eta_s": eta,
            "updated_at": datetime.now(UTC).isoformat(),
            "stop_reason": stop_reason,
            "confirmation": self.confirmation,
            "unconfirmed": self.unconfirmed,
            "waiting": self._waiting if phase == "search" else None,
            "twin": (self.strategy.summary() if isinstance(self.strategy, TwinStrategy)
                     else None),
        })

    def _progress(self, *, phase: Phase, stop_reason: str | None = None
                  ) -> SweepProgress | None:
        """Store and publish the progress; the progress, None when the lease is lost."""
        typed = self.progress(phase=phase, stop_reason=stop_reason)
        progress = typed.stored()
        if self.lease_lost:
            return None
        try:
            self.store.update_sweep(self.sweep.id, progress=progress, lease=self.lease)
        except LeaseLost as exc:
            self._fenced_out(exc)
            return None
        except Conflict:
            self.cancelled = True
        except TRANSIENT_STORAGE_ERRORS as exc:
            self._note_outage(exc)  # progress is rewritten whole at the next update
        if self.on_progress is not None:
            self.on_progress(progress)
        self._say_phase(typed)
        return typed

    def _say_phase(self, progress: SweepProgress) -> None:
        """One log line when the phase changes (search, confirm, done, cancelled)."""
        if progress.phase != self._logged_phase:
            self._logged_phase = progress.phase
            self.sweep_log.phase(self.sweep.id, progress)

    def _delta(self, params: dict[str, KnobValue]) -> dict[str, KnobValue]:
        return config_delta(params, self._defaults)

    def _best_number(self) -> int | None:
        """The trial number (not the row id) of the best result so far."""
        if self.best is None:
            return None
        return next((row.number for row, _ in self.results if row.id == self.best[1]), None)

    def _abandon(self, reason: str = "coordinator stopped; resume it") -> None:
        """An error or an interrupt in this process: stop its trials, leave it resumable."""
        self._stop_trials()
        try:
            self.store.recover_orphans(self.sweep.id, lease=self.lease)
            self.store.update_sweep(self.sweep.id, status="failed", stop_reason=reason,
                                    lease=self.lease)
        except LeaseLost as exc:
            self._fenced_out(exc)
        except Exception:  # already failing: the original error is the one that matters
            log.exception("sweep %s: could not record the stop", self.sweep.id)


def new_coordinator_id() -> str:
    return f"coordinator-{uuid.uuid4().hex[:8]}"


class Coordinator:
    """Claims queued sweeps from the database and runs them, several at once."""

    def __init__(self, store: Store, executor: TrialExecutor, *, database_url: str,
                 coordinator_id: str | None = None, max_sweeps: int = 4,
                 sweep_log: SweepLog | None = None) -> None:
        self.store = store
        self.sweep_log = sweep_log
        """Where every sweep this coordinator runs logs its trials and phases."""
        self.executor = executor
        self.database_url = database_url
        self.coordinator_id = coordinator_id or new_coordinator_id()
        self.placement = executor.choice()
        """What claimed sweeps record of where they run (asked of the executor once: on
        Ray it is a call to the head)."""
        self.share = GpuShare(self.placement.gpus)
        self.max_sweeps = max_sweeps
        self._threads: dict[int, threading.Thread] = {}
        self._clock_checked = False

    def _check_clock(self) -> None:
        """Say once if this host's clock disagrees with the database's."""
        if self._clock_checked:
            return
        skew = self.store.clock_skew_s()
        self._clock_checked = True
        if abs(skew) > CLOCK_SKEW_WARN_S:
            log.warning("this host's clock is %.0f s %s the database's; leases and stored "
                        "times follow the database's clock, so sweeps are safe, but this "
                        "log's times are off (check NTP on this host)", abs(skew),
                        "ahead of" if skew > 0 else "behind")

    def run_sweep(self, sweep_id: int, on_progress: ProgressFn | None = None, *,
                  takeover: bool = False) -> SweepRecord:
        """Claim one sweep and run it in this thread.

        A running sweep is taken over when its coordinator's heartbeat is stale, or at
        once with ``takeover`` (the user knows that coordinator is dead). :class:`LeaseLost`
        when another coordinator took it over while this one ran it.
        """
        self._check_clock()
        sweep = self.store.claim_sweep(sweep_id, self.coordinator_id,
                                       stale_after_s=0.0 if takeover else STALE_AFTER_S,
                                       executor=self.placement)
        if sweep is None:
            current = self.store.get_sweep(sweep_id)
            raise Conflict(f"sweep {sweep_id} is {current.status}"
                           + (f" (held by {current.claimed_by})" if current.claimed_by else "")
                           + "; it cannot be run now")
        runner = SweepRunner(self.store, sweep, self.executor,
                             coordinator_id=self.coordinator_id,
                             database_url=self.database_url, share=self.share,
                             on_progress=on_progress, sweep_log=self.sweep_log)
        final = runner.run()
        if runner.lease_lost:
            raise LeaseLost(f"sweep {sweep_id} was taken over by {final.claimed_by} while "
                            f"this coordinator stalled (its lease {runner.lease.epoch} "
                            "ended); it goes on there, and this one stopped without "
                            "touching it")
        return final

    def serve(self, *, poll_s: float = 2.0, once: bool = False,
              stop: threading.Event | None = None, start_wait_s: float | None = None) -> None:
        """Run queued sweeps as they come, each in its own thread, sharing the GPUs.

        A database that does not answer is waited for, at start as mid-run (backoff, one
        line when it goes, one when it is back); at start for at most ``start_wait_s``
        (None: forever), then :class:`StorageUnavailable`. A schema that is not there
        once it answers is :class:`SchemaMissing`: waiting would not fix it.
        """
        stop = stop or threading.Event()
        outage = _Outage()
        answered = False  # the database has answered once: no more waiting "at start"
        since = time.monotonic()
        while not stop.is_set():
            for sweep_id, thread in list(self._threads.items()):
                if not thread.is_alive():
                    del self._threads[sweep_id]
            try:
                self.executor.check()
            except ExecutorLost:  # end, for a supervisor to restart us once it is back
                for thread in list(self._threads.values()):
                    thread.join(timeout=15.0)  # each sweep back in the queue first
                raise
            try:
                if not answered:
                    self.store.check_schema()
                    answered = True
                self._check_clock()
                self._claim_and_start()
            except TRANSIENT_STORAGE_ERRORS as exc:
                # Ride it out: the sweeps already running keep their results in their
                # outboxes; claiming resumes when the database answers again.
                if (not answered and start_wait_s is not None
                        and time.monotonic() - since >= start_wait_s):
                    raise StorageUnavailable(
                        f"{describe(exc)}; gave up waiting for the database after "
                        f"{start_wait_s:g} s at start") from exc
                outage.failed(exc)
                stop.wait(outage.backoff_s(poll_s))
                continue
            outage.recovered()
            if once and not self._threads:
                return
            stop.wait(poll_s)

    def _claim_and_start(self) -> None:
        # Every sweep claimed in one pass joins the GPU share before any of them starts:
        # sweeps queued together split the GPUs from their first trial, instead of the
        # first one taking them all while the next is still being set up.
        claimed: list[tuple[int, SweepRunner]] = []
        try:
            self._claim(claimed)
        finally:
            for sweep_id, runner in claimed:
                thread = threading.Thread(target=self._run_served, args=(runner,),
                                          name=f"sweep-{sweep_id}", daemon=True)
                self._threads[sweep_id] = thread
                thread.start()

    def _run_served(self, runner: SweepRunner) -> None:
        """One served sweep. With the executor gone it goes back to the queue (its trials
        marked lost), for this coordinator's successor to claim when the cluster is back."""
        try:
            runner.run()
        except ExecutorLost as exc:
            sweep_id = runner.sweep.id
            try:
                if self.store.get_sweep(sweep_id).status == "failed":
                    self.store.requeue_sweep(sweep_id)
            except Exception:  # the database may be away too: a resume finds it failed
                log.exception("sweep %s: could not requeue it", sweep_id)
            log.error("sweep %s back in the queue: %s", sweep_id, exc)

    def _claim(self, claimed: list[tuple[int, SweepRunner]]) -> None:
        while len(self._threads) + len(claimed) < self.max_sweeps:
            sweep = self.store.claim_next_sweep(self.coordinator_id,
                                                stale_after_s=STALE_AFTER_S,
                                                executor=self.placement)
            if sweep is None:
                return
            try:
                runner = SweepRunner(self.store, sweep, self.executor,
                                     coordinator_id=self.coordinator_id,
                                     database_url=self.database_url, share=self.share,
                                     sweep_log=self.sweep_log)
            except TRANSIENT_STORAGE_ERRORS:
                raise  # claimed but not started: it goes stale and is claimed again
            except Exception as exc:  # a sweep that can never start must not stop the rest
                log.error("sweep %s cannot start: %s", sweep.id, exc)
                self.store.update_sweep(sweep.id, status="failed",
                                        stop_reason=f"cannot start: {exc}"[:500],
                                        lease=sweep.lease)
                continue
            self.share.join(sweep.id)
            claimed.append((sweep.id, runner))


class _Outage:
    """One log line when the database goes away, one when it is back; backoff between."""

    MAX_BACKOFF_S = 30.0

    def __init__(self) -> None:
        self.since: float | None = None
        self.attempts = 0

    def failed(self, exc: Exception) -> None:
        if self.since is None:
            self.since = time.monotonic()
            log.warning("database unavailable (%s); retrying with backoff until it is back",
                        describe(exc)[:200])
        self.attempts += 1

    def backoff_s(self, poll_s: float) -> float:
        return float(min(self.MAX_BACKOFF_S, poll_s * 2 ** min(self.attempts - 1, 5)))

    def recovered(self) -> None:
        if self.since is not None:
            log.warning("the database is back after %.0f s; claiming sweeps again",
                        time.monotonic() - self.since)
        self.since, self.attempts = None, 0
