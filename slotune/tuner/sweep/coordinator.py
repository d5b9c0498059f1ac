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
budget says whether to continue. The runner only wires the parts that each do one job,
and runs the loop:

* :mod:`slotune.tuner.sweep.study` — the Optuna study and strategy;
  :mod:`slotune.tuner.sweep.resume` — what the database says of the sweep when a runner starts;
* :mod:`slotune.tuner.sweep.launch_queue` — proposals on their way to a GPU (deferred, parked for
  their quality baseline, infeasible at once), over :mod:`slotune.tuner.sweep.launcher` (GPU share,
  in-flight trials, retries by failure class);
* :mod:`slotune.tuner.sweep.recorder` — every write under the lease, through
  :mod:`slotune.tuner.sweep.outbox` while the database is away, the heartbeat, and what a lost lease
  or a cancel means;
* :mod:`slotune.tuner.sweep.tally` — what finished and the best so far;
  :mod:`slotune.tuner.sweep.card_sync` — the strategy's experiment cards;
* :mod:`slotune.tuner.sweep.confirming` — the confirmation phase, over
  :mod:`slotune.tuner.sweep.confirmation` (the repeats and the winner);
* :mod:`slotune.tuner.sweep.progress` (what the CLI, the API and the dashboard read) and
  :mod:`slotune.tuner.sweep.log` (one line per event).

A trial's capacity search ranks (the space's ranking probes: the answer is measured in
confirmation) and starts where :mod:`slotune.tuner.sweep.start` predicts its capacity (the twin's
prior scaled by what the sweep measured, else the best capacity per GPU so far); how it
starts from there is :func:`slotune.workers.trial.capacity.warm_search`'s.

Every write a runner makes for its sweep carries the :class:`~slotune.tuner.db.records.Lease` its
claim returned. When the store refuses one (:class:`LeaseLost`: the sweep was claimed
again while this coordinator stalled), the runner stops its trials and touches nothing
more of the sweep: its late results are dropped with a log line, its successor owns them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slotune.tuner.db.errors import Conflict, LeaseLost, StorageUnavailable, describe
from slotune.tuner.db.records import Lease, SweepRecord, TrialRecord
from slotune.tuner.db.store import Store
from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies import (
    NOISE_TOLERANCE,
    Proposal,
    Strategy,
    TwinStrategy,
    make_strategy,
)
from slotune.tuner.sweep.calibrations import warm_start
from slotune.tuner.sweep.card_sync import sync_cards
from slotune.tuner.sweep.confirming import SweepConfirmation
from slotune.tuner.sweep.executors import ExecutorLost, TrialExecutor
from slotune.tuner.sweep.launch_queue import Attempt, Baseline, LaunchQueue
from slotune.tuner.sweep.launcher import GpuShare, InputFailure, Launched, TrialLauncher, retry_as
from slotune.tuner.sweep.log import SweepEvents, SweepLog
from slotune.tuner.sweep.progress import Phase, SweepProgress, sweep_progress
from slotune.tuner.sweep.recorder import HEARTBEAT_S, TRANSIENT_STORAGE_ERRORS, SweepRecorder
from slotune.tuner.sweep.request import SweepBudget, stored_space
from slotune.tuner.sweep.resume import resume
from slotune.tuner.sweep.start import StartPredictor
from slotune.tuner.sweep.study import sweep_study
from slotune.tuner.sweep.tally import Tally
from slotune.workers.contracts import KnobValue, TrialResult, TrialSpec, replica_gpus
from slotune.workers.trial.capacity import warm_search

__all__ = ["HEARTBEAT_S", "STALE_AFTER_S", "TRANSIENT_STORAGE_ERRORS", "Budget", "Coordinator",
           "SweepRunner", "new_coordinator_id"]

log = logging.getLogger(__name__)

STALE_AFTER_S = 15.0
"""A running sweep whose heartbeat this coordinator has seen stand still for this long
(on its own monotonic clock, :mod:`slotune.tuner.db.lease_watch`) may be taken over: heartbeats
come every few seconds, so this is several missed beats."""
WATCH_POLL_S = 1.0
"""How often ``run_sweep`` looks again at a lease it is waiting to see go silent."""
CLOCK_SKEW_WARN_S = 5.0
"""A host clock this far from the database's is said once at start: no lease depends on
it, but this coordinator's log times and the stored ones disagree."""

ProgressFn = Callable[[dict[str, Any]], None]


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


class SweepRunner:
    """Runs one claimed sweep to its end: wires the parts and runs the loop (see the
    module docstring)."""

    def __init__(self, store: Store, sweep: SweepRecord, executor: TrialExecutor, *,
                 coordinator_id: str, database_url: str, share: GpuShare | None = None,
                 on_progress: ProgressFn | None = None,
                 sweep_log: SweepLog | None = None) -> None:
        if sweep.lease is None:
            raise ValueError(f"sweep {sweep.id} is not claimed: claim it before running it")
        share = share or GpuShare(executor.gpu_count())
        self.store = store
        self.sweep = sweep
        self.space: SearchSpace = stored_space(sweep.space)
        self.budget = Budget(SweepBudget.model_validate(sweep.budget))
        options = warm_start(store, sweep) if sweep.strategy == "twin" else {}
        self.strategy: Strategy = make_strategy(sweep.strategy, self.space, seed=sweep.seed,
                                                study=sweep_study(sweep, database_url),
                                                **options)
        self.queue = LaunchQueue(executor, share, self.space, sweep.id,
                                 max_parallel=self.budget.limits.max_parallel,
                                 coordinator_id=coordinator_id)
        self.recorder = SweepRecorder(store, sweep.id, sweep.lease, worker=coordinator_id,
                                      stop_trials=self.queue.trials.cancel_all)
        self.tally = Tally()
        self.log = SweepEvents(sweep_log or SweepLog(None), sweep.id, self.space.defaults())
        """One line per trial start and end and per phase (files and log shippers)."""
        self.on_progress = on_progress
        self.starts: StartPredictor | None = None
        """Predicts each capacity search's start (built at the first capacity trial)."""
        self._observed = 0

    @property
    def lease(self) -> Lease:
        return self.recorder.lease

    @property
    def lease_lost(self) -> bool:
        return self.recorder.lease_lost

    # ---- the loop -----------------------------------------------------------------

    def run(self) -> SweepRecord:
        share = self.queue.trials.share
        share.join(self.sweep.id)
        try:
            resume(self.store, self.sweep.id, self.lease, strategy=self.strategy,
                   baselines=self.queue.baselines, tally=self.tally, gpus_of=self._gpus_of)
            self.log.phase(self.progress(phase="search"))
            stop = self._search()
            if not self.recorder.cancelled:
                self._progress(phase="confirm", stop_reason=stop)
                self._confirm()
            if self.lease_lost:
                return self.store.get_sweep(self.sweep.id)
            if self.recorder.cancelled:
                self._progress(phase="cancelled", stop_reason=stop)
                return self.store.get_sweep(self.sweep.id)
            done = self.progress(phase="done", stop_reason=stop)
            final = self.store.update_sweep(self.sweep.id, status="done", stop_reason=stop,
                                            progress=done.stored(), lease=self.lease)
            self.log.phase(done)
            return final
        except LeaseLost as exc:
            self.recorder.fenced_out(exc)
            return self.store.get_sweep(self.sweep.id)
        except InputFailure as exc:
            # Not this coordinator's fault, nor a configuration's: stopped, with the file's
            # one line, its trials lost, to run again once the file is fixed (resume).
            if not self.lease_lost:
                reason = f"input error: {str(exc)[:400]}; fix the file, then resume the sweep"
                log.error("sweep %s stopped: %s", self.sweep.id, reason)
                self._abandon(reason)
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
            share.leave(self.sweep.id)

    def _search(self) -> str:
        stop: str | None = None
        trials = self.queue.trials
        while True:
            if not self._beat():
                return "cancelled"
            if not self.recorder.drain():
                # The database is away: trials keep running, their results wait here.
                if len(trials):
                    for launched, result in trials.wait(HEARTBEAT_S):
                        self._finished(launched, result)
                else:
                    time.sleep(HEARTBEAT_S / 2)
                continue
            if self.lease_lost:
                return "lease lost"
            stop = stop or self._stop_reason()
            if stop is None or self.queue.unlaunched():
                try:
                    self.queue.launch(self, ask=stop is None)
                except TRANSIENT_STORAGE_ERRORS as exc:
                    self.recorder.note_outage(exc)
                    continue
            if not len(trials):
                # Trials recorded without running (infeasible) may have used the budget up.
                stop = stop or self._stop_reason()
                if self.queue.unlaunched():
                    pass  # asked and counted: it runs once GPUs other sweeps hold free up
                elif stop is not None:
                    return stop
                elif self.strategy.done:
                    return self.strategy.stop_reason or "the strategy stopped"
                elif self.strategy.pending == 0 and not self.queue.launch(self) \
                        and not self.queue.waiting_for_gpus:
                    return self.strategy.stop_reason or "nothing left to try"
                if not len(trials):
                    self.queue.wait_for_gpus(self)  # a proposal waits for GPUs others hold
                    continue
            for launched, result in trials.wait(HEARTBEAT_S):
                self._finished(launched, result)

    def _stop_reason(self) -> str | None:
        return self.budget.stop_reason(trials=self._trials_started(),
                                       gpu_hours=self.tally.gpu_hours,
                                       since_improvement=self.tally.since_improvement)

    def _trials_started(self) -> int:
        """Search trials asked for: finished, in flight, waiting for the database or for
        their quality baseline (a baseline itself is not a trial of the search)."""
        return len(self.tally.results) + self.queue.started() + self.recorder.unrecorded

    # ---- what the launch queue asks of the runner (LaunchHooks) ---------------------

    def propose(self) -> tuple[Proposal, TrialSpec | None] | None:
        """The strategy's next proposal and its spec, while the trial budget allows."""
        if self._trials_started() >= self.budget.limits.max_trials:
            return None
        proposal = self.strategy.ask()
        if proposal is None:
            return None
        return proposal, None if proposal.preset is not None else self._spec(
            proposal.params, f"s{self.sweep.id}-t{proposal.number}-a1")

    def start_trial(self, proposal: Proposal, spec: TrialSpec | None, *,
                    attempt: int) -> TrialRecord:
        try:
            row = self.recorder.start_trial(proposal.number, proposal.params, spec, attempt)
        except LeaseLost:
            if attempt == 1:  # asked but never recorded: Optuna must not keep it RUNNING
                self.strategy.withdraw(proposal)
            raise
        self.log.trial_started(proposal.number, proposal.params, attempt=attempt)
        return row

    def waiting_changed(self) -> None:
        self._progress(phase="search")

    # ---- results ------------------------------------------------------------------

    def _finished(self, launched: Launched[Attempt | Baseline], result: TrialResult) -> None:
        run, gpus = launched.tag, launched.spec.gpus
        if isinstance(run, Baseline):
            # Stored as its row; a lost worker's is run again by the queue.
            self.tally.spent(result, gpus)
            stored = self.queue.baseline_finished(run, launched.spec, result)
            self.recorder.record(role="baseline", number=run.number, attempt=run.attempt,
                                 params={}, spec=launched.spec, result=stored)
        elif (retry := retry_as(result, run.row.attempt)) is not None:
            # Says nothing about the configuration: record this attempt, run it again.
            self.log.trial_ended(run.proposal.number, run.proposal.params, retry, None,
                                 attempt=run.row.attempt, retried=True)
            self.tally.spent(retry, gpus)
            self.recorder.add(
                lambda: self.store.finish_trial(run.row.id, retry, lease=self.lease),
                lambda: self.queue.relaunch(self, launched))
        else:
            self.record(run.row, run.proposal, result, gpus)
            return
        self.recorder.drain()

    def record(self, row: TrialRecord, proposal: Proposal, result: TrialResult,
               gpus: int = 0) -> None:
        """Store a search result, tell the strategy, account, sync the cards, say it:
        each step retried until done, as far as the database allows now. The tally is a
        step apart from the cards' writes: an outage while syncing them retries the sync,
        never the accounting (a result counted twice)."""
        self.recorder.unrecorded += 1
        stored: list[TrialRecord] = []

        def account() -> None:
            self.recorder.unrecorded -= 1
            self.tally.account(stored[0], result, gpus)

        def say() -> None:
            progress = self._progress(phase="search")
            self.log.trial_ended(proposal.number, proposal.params, result, progress,
                                 best_number=self.tally.best_number(), attempt=row.attempt)

        self.recorder.add(
            lambda: stored.append(self.store.finish_trial(row.id, result, lease=self.lease)),
            lambda: self.strategy.tell(proposal, result),
            account,
            lambda: sync_cards(self.store, self.sweep.id, self.strategy.cards,
                               lease=self.lease),
            say,
        )
        self.recorder.drain()

    def _gpus_of(self, params: dict[str, KnobValue]) -> int:
        return replica_gpus(self.space.flags(params))

    def _spec(self, params: dict[str, KnobValue], run_id: str, **overrides: Any) -> TrialSpec:
        if self.space.mode == "capacity" and "capacity" not in overrides:
            # A search trial ranks (the space's ranking probes; the answer is measured in
            # confirmation), starting where the best capacity per GPU so far says this
            # replica should be: a start saves probes, it cannot move the interval.
            search = self.space.capacity.for_ranking()
            start = self._predicted_capacity(params)
            if start is not None:
                search = warm_search(search, start)
            overrides["capacity"] = search
        return self.space.to_trial_spec(params, run_id, **overrides)

    def _predicted_capacity(self, params: dict[str, KnobValue]) -> float | None:
        """Where this configuration's capacity should be (:mod:`slotune.tuner.sweep.start`), else
        the best capacity per GPU so far on its GPUs; None for the first trial."""
        if self.starts is None:
            self.starts = StartPredictor(self.space)
        for row, result in self.tally.results[self._observed:]:
            self.starts.observe(row.params, result)
        self._observed = len(self.tally.results)
        predicted = self.starts.predict(params)
        best = self.tally.best
        if predicted is None and best is not None:
            predicted = best[0] * self._gpus_of(params)
        return predicted

    def _confirm(self) -> None:
        """Re-run the top configurations (:mod:`slotune.tuner.sweep.confirming`); keep what won."""
        trials = self.queue.trials
        SweepConfirmation(self.recorder, self.log, self.strategy, self.tally,
                          self.queue.baselines, self._spec, self.space.capacity,
                          self.space.resolve_workload(), self.space.mode,
                          ).run(TrialLauncher(trials.executor, trials.share, self.sweep.id),
                                self.budget.limits, keep_going=self._beat)

    # ---- progress and bookkeeping -------------------------------------------------

    def progress(self, *, phase: Phase, stop_reason: str | None = None) -> SweepProgress:
        limits = self.budget.limits
        return sweep_progress(
            phase, self.tally, started=self._trials_started(),
            running=len(self.queue.trials), max_trials=limits.max_trials,
            parallel=self.queue.parallel(), stop_reason=stop_reason, waiting=self.queue.waiting,
            twin=self.strategy.summary() if isinstance(self.strategy, TwinStrategy) else None)

    def _progress(self, *, phase: Phase, stop_reason: str | None = None
                  ) -> SweepProgress | None:
        """Store and publish the progress; the progress, None when the lease is lost."""
        typed = self.progress(phase=phase, stop_reason=stop_reason)
        progress = typed.stored()
        if not self.recorder.store_progress(progress):
            return None
        if self.on_progress is not None:
            self.on_progress(progress)
        self.log.phase(typed)
        return typed

    def _beat(self) -> bool:
        """Heartbeat the sweep and its running trials; False once the sweep is cancelled."""
        return self.recorder.beat(self.queue.running_rows())

    def _abandon(self, reason: str = "coordinator stopped; resume it") -> None:
        """An error or an interrupt in this process: stop its trials (their engines die
        with them), leave it resumable."""
        self.queue.trials.cancel_all()
        self.recorder.abandon(reason)


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
            log.warning("this host's clock is %.0f s %s the database's; no lease reads a "
                        "wall clock and stored times are the database's, so sweeps are "
                        "safe, but this log's times are off (check NTP on this host)", abs(skew),
                        "ahead of" if skew > 0 else "behind")

    def run_sweep(self, sweep_id: int, on_progress: ProgressFn | None = None, *,
                  takeover: bool = False) -> SweepRecord:
        """Claim one sweep and run it in this thread.

        A running sweep is taken over when its coordinator's heartbeat is stale, or at
        once with ``takeover`` (the user knows that coordinator is dead). :class:`LeaseLost`
        when another coordinator took it over while this one ran it.
        """
        self._check_clock()
        sweep = self._claim_one(sweep_id, takeover=takeover)
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

    def _claim_one(self, sweep_id: int, *, takeover: bool) -> SweepRecord:
        """Claim the sweep for :meth:`run_sweep`. One running under another coordinator is
        taken over at once with ``takeover``; else this waits up to one stale window,
        watching its heartbeat: standing still the whole time, it is taken over (its
        coordinator died); moving, the sweep is alive elsewhere (:class:`Conflict`)."""
        first: tuple[str | None, int, datetime | None] | None = None
        deadline = time.monotonic() + STALE_AFTER_S + 3 * WATCH_POLL_S
        while True:
            sweep = self.store.claim_sweep(sweep_id, self.coordinator_id,
                                           stale_after_s=0.0 if takeover else STALE_AFTER_S,
                                           executor=self.placement)
            if sweep is not None:
                return sweep
            current = self.store.get_sweep(sweep_id)
            seen = (current.claimed_by, current.lease_epoch, current.heartbeat_at)
            alive = first is not None and seen != first
            if takeover or current.status != "running" or alive \
                    or time.monotonic() >= deadline:
                held = f" (held by {current.claimed_by})" if current.claimed_by else ""
                hint = ("; its coordinator's heartbeat is live: if that coordinator is dead "
                        "after all, take the sweep over with --takeover"
                        if current.status == "running" and not takeover else "")
                raise Conflict(f"sweep {sweep_id} is {current.status}{held}; it cannot be run "
                               f"now{hint}")
            if first is None:
                first = seen
                log.warning("sweep %s is held by %s; waiting up to %.0f s to see its "
                            "heartbeat stand still before taking it over (--takeover: now)",
                            sweep_id, current.claimed_by, STALE_AFTER_S)
            time.sleep(WATCH_POLL_S)

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
