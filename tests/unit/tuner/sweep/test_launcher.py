"""The coordinator's launching and confirmation parts, with no database.

Trials run on the simulated engine in virtual time (``VirtualExecutor``): the parts are
driven as the runner drives them, and what they decide is checked from what they did.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from slotune.tuner.sweep.confirmation import ConfirmationPhase, Repeated, choose, top_configurations
from slotune.tuner.sweep.executors import TrialExecutor, VirtualExecutor
from slotune.tuner.sweep.launcher import MAX_ATTEMPTS, GpuShare, TrialLauncher, retry_as
from slotune.workers.contracts import TrialResult, TrialSpec
from slotune.workers.engines import adapter_for
from slotune.workers.engines.sim import sim_options
from slotune.workers.trial.virtual import run_virtual_trial
from tests.support.lab import FAST, SLOW, SPACE, spec


class Scripted(TrialExecutor):
    """The virtual executor, with chosen trials' results replaced as they come back."""

    kind = "virtual"

    def __init__(self, gpus: int = 2, replace: dict[str, dict[str, Any]] | None = None) -> None:
        self.inner = VirtualExecutor(gpus)
        self.replace = replace or {}
        self.submitted: list[str] = []
        self.seeds: set[int] = set()
        self.cancelled: list[Hashable] = []

    def submit(self, spec: TrialSpec) -> Hashable:
        self.submitted.append(spec.run_id)
        self.seeds.add(sim_options(spec).seed)
        return self.inner.submit(spec)

    def wait(self, handles: list[Hashable], timeout_s: float) -> list[tuple[Hashable, TrialResult]]:
        out = []
        for handle, result in self.inner.wait(handles, timeout_s):
            update = self.replace.pop(result.run_id, None)
            out.append((handle, result if update is None else TrialResult.model_validate(
                {**result.model_dump(), **update})))
        return out

    def gpu_count(self) -> int:
        return self.inner.gpu_count()

    def cancel(self, handle: Hashable) -> None:
        self.cancelled.append(handle)
        self.inner.cancel(handle)


LOST = {"status": "failed", "failure": "worker_lost", "failure_message": "node died",
        "objective": 0.0}


def test_retry_goes_by_failure_class_and_stops_after_the_last_attempt() -> None:
    lost = TrialResult(run_id="t", status="failed", failure="worker_lost",
                       failure_message="anything at all")
    assert retry_as(lost, 1) is lost
    assert retry_as(lost, MAX_ATTEMPTS) is None
    # A configuration's own failure stands, whatever its message says.
    oom = TrialResult(run_id="t", status="failed", failure="oom",
                      failure_message="worker_lost: node died")
    assert retry_as(oom, 1) is None
    # A gate failure the load generator says it caused is discarded, then run again.
    distorted = TrialResult(run_id="t", status="ok", gate_passed=False, objective=0.0,
                            metrics={"slotune": {"client_bound": True,
                                                 "send_lag_ms": {"p99": 90.0}}})
    recorded = retry_as(distorted, 1)
    assert recorded is not None and recorded.failure == "client_bound"
    assert recorded.status == "failed" and "90.0 ms" in (recorded.failure_message or "")
    honest = distorted.model_copy(update={"metrics": {"slotune": {"client_bound": False}}})
    assert retry_as(honest, 1) is None


def test_gpu_share_is_fair_and_total() -> None:
    share = GpuShare(4)
    share.join(1)
    assert all(share.acquire(1, 1) for _ in range(4))  # alone: everything
    assert not share.acquire(1, 1)
    share.join(2)
    assert share.active() == 2
    share.release(1, 1)
    share.release(1, 1)
    assert share.acquire(2, 2) and not share.acquire(2, 1)  # two of four each
    assert not share.acquire(1, 1)  # over its share while the other runs


def test_the_launcher_keeps_a_sweep_within_its_share_and_gives_gpus_back() -> None:
    executor = Scripted(gpus=2)
    share = GpuShare(2)
    share.join(1)
    share.join(2)
    launcher: TrialLauncher[str] = TrialLauncher(executor, share, sweep_id=1)
    first, second = spec(FAST, "s1-t1-a1"), spec(FAST, "s1-t2-a1")
    assert launcher.reserve(first)
    launcher.submit(first, "one")
    assert not launcher.has_room() and not launcher.reserve(second)  # one of two GPUs each
    assert launcher.tags() == ["one"]
    done: list[tuple[Any, TrialResult]] = []
    while not done:
        done = launcher.wait(5.0)
    assert done[0][0].tag == "one" and done[0][1].status == "ok"
    assert len(launcher) == 0 and launcher.reserve(second)  # its GPU is back
    launcher.submit(second, "two")
    launcher.cancel_all()
    assert len(launcher) == 0 and len(executor.cancelled) == 1
    assert launcher.has_room()
    # More GPUs than this coordinator schedules onto: never placed, said why.
    wide = spec({**FAST}, "s1-t3-a1").model_copy(
        update={"engine_args": {**FAST, "tensor_parallel_size": 4}, "knobs": {}})
    assert "needs 4 GPUs" in (launcher.never_placed(wide) or "")
    assert launcher.never_placed(first) is None


def phase(executor: TrialExecutor, calls: list[tuple[int, int, int]],
          candidates: list[dict[str, Any]], repeats: int = 2) -> ConfirmationPhase:
    share = GpuShare(executor.gpu_count())
    share.join(7)

    def spec_for(i: int, r: int, attempt: int) -> TrialSpec:
        calls.append((i, r, attempt))
        return adapter_for("sim").repeat_spec(
            spec(candidates[i], f"s7-t{i}-confirm{r}-a{attempt}"), r)

    return ConfirmationPhase(TrialLauncher(executor, share, 7), spec_for, repeats=repeats)


def test_confirmation_repeats_interleaved_retries_a_lost_worker_and_picks_the_winner() -> None:
    executor = Scripted(gpus=1, replace={"s7-t1-confirm0-a1": LOST})
    calls: list[tuple[int, int, int]] = []
    confirmation = phase(executor, calls, [SLOW, FAST])
    outcome = confirmation.run([SLOW, FAST])
    assert outcome is not None
    # Repeat 0 of each, then repeat 1 of each; the lost run again, as a second attempt.
    assert [c for c in calls if c[2] == 1] == [(0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)]
    assert [c for c in calls if c[2] > 1] == [(1, 0, 2)]
    assert [t for t in executor.submitted if t.endswith("-a1")] == [
        "s7-t0-confirm0-a1", "s7-t1-confirm0-a1", "s7-t0-confirm1-a1", "s7-t1-confirm1-a1"]
    assert {row["candidate"] for row in outcome.table} == {0, 1}
    assert all(len(row["runs"]) == 2 for row in outcome.table)
    # The winner is the candidate with the best lower bound, and it held the SLO.
    best = max(outcome.table, key=lambda row: row["lcb"])
    assert outcome.winner == best["candidate"] and best["winner"] and outcome.held
    assert confirmation.gpu_hours > 0
    # Each repeat of the simulated engine drew its noise from its own seed.
    base = sim_options(SPACE.to_trial_spec(FAST, "x")).seed
    assert executor.seeds == {base + 1000, base + 2000}


def test_a_winner_whose_repeats_break_the_slo_is_not_held() -> None:
    broken = {"objective": 0.0, "gate_passed": False}
    executor = Scripted(gpus=2, replace={f"s7-t{i}-confirm{r}-a1": broken
                                         for i in range(2) for r in range(2)})
    outcome = phase(executor, [], [FAST, SLOW]).run([FAST, SLOW])
    assert outcome is not None and outcome.winner is not None and not outcome.held


class Stalled(Scripted):
    """Trials that never come back (a hung node), until they are cancelled."""

    def wait(self, handles: list[Hashable], timeout_s: float) -> list[tuple[Hashable, TrialResult]]:
        return []


def test_a_stopped_confirmation_cancels_its_runs() -> None:
    executor = Stalled(gpus=2)
    beats = iter([True, False])
    confirmation = phase(executor, [], [FAST, SLOW])
    outcome = confirmation.run([FAST, SLOW], keep_going=lambda: next(beats, False))
    assert outcome is None
    assert len(executor.cancelled) == 2 == len(executor.submitted)  # both in flight, both ended
    assert len(confirmation.launcher) == 0 and confirmation.launcher.has_room()


def test_top_configurations_are_the_best_distinct_ok_ones() -> None:
    def result(objective: float) -> TrialResult:
        return TrialResult(run_id="t", status="ok", objective=objective,
                           gate_passed=objective > 0)

    crashed = TrialResult(run_id="t", status="failed", failure="crashed")
    results = [(SLOW, result(1.0)), (FAST, result(3.0)), (FAST, result(2.9)),
               (SLOW, result(0.0)), ({**FAST, "max_num_seqs": 64}, result(2.0)),
               ({**FAST, "max_num_seqs": 256}, crashed)]
    assert top_configurations(results, 0) == []  # confirm_top 0: confirmation is off
    assert top_configurations(results, 2) == [1, 4]
    assert top_configurations(results, 5) == [1, 4, 0]
    assert top_configurations([(SLOW, result(0.0))], 3) == []


def test_the_winner_is_the_best_lower_bound_and_noisy_repeats_are_doubted() -> None:
    # Three noisy repeats of a configuration starved of batch tokens and of a good one,
    # measured by the simulated engine: the good one wins on its lower bound, and a
    # candidate whose runs spread widely gets a bound below its mean.
    starved = {**FAST, "max_num_batched_tokens": 256}

    def runs(params: dict[str, Any]) -> list[TrialResult]:
        out = []
        for repeat in range(3):
            s = spec(params, f"c{repeat}")
            s = s.model_copy(update={"options": sim_options(s).model_copy(
                update={"noise": 0.05, "seed": repeat})})
            out.append(run_virtual_trial(s, per_request=False))
        return out

    candidates = [Repeated.of(runs(starved)), Repeated.of(runs(FAST))]
    assert all(c.lcb <= c.mean for c in candidates)
    assert len(set(candidates[1].objectives)) > 1  # noise: the repeats differ
    assert choose(candidates) == 1
    # A lucky single high run does not beat steady ones: the spread costs its bound.
    steady = Repeated.of([TrialResult(run_id="s", status="ok", objective=v, headroom=0.5)
                          for v in (10.0, 10.1, 9.9)])
    lucky = Repeated.of([TrialResult(run_id="l", status="ok", objective=v, headroom=0.5)
                         for v in (14.0, 5.0, 12.0)])
    assert lucky.mean > steady.mean and choose([lucky, steady]) == 1
    assert choose([]) is None
