"""The runner's own parts with no database: the tally and the launch queue.

The queue runs on the virtual executor and is driven through hooks that stand in for the
runner (proposals from a list, rows made up, records kept), so what it decides — what it
submits, what it holds back and why, what it records at once — is checked from what it did.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from slotune.tuner.db.records import TrialRecord
from slotune.tuner.strategies import NOISE_TOLERANCE, Proposal
from slotune.tuner.sweep.executors import VirtualExecutor
from slotune.tuner.sweep.launch_queue import Attempt, LaunchQueue
from slotune.tuner.sweep.launcher import GpuShare
from slotune.tuner.sweep.tally import Tally
from slotune.workers.contracts import TrialResult, TrialSpec
from tests.support.lab import FAST, SLOW, SPACE, spec


def row(id_: int, number: int = 0, params: dict[str, Any] | None = None) -> TrialRecord:
    return TrialRecord.model_construct(id=id_, sweep_id=1, number=number, attempt=1,
                                       params=params or {}, created_at=datetime.now(UTC))


def ok(objective: float, total_s: float = 10.0) -> TrialResult:
    return TrialResult.model_validate({"run_id": "t", "status": "ok", "objective": objective,
                                       "timings": {"total_s": total_s}})


def test_the_tally_counts_an_improvement_only_beyond_noise() -> None:
    tally = Tally()
    tally.account(row(1), ok(10.0), gpus=2)
    assert tally.best == (10.0, 1) and tally.since_improvement == 0
    within = 10.0 * (1 + NOISE_TOLERANCE / 2)
    tally.account(row(2, number=5), ok(within), gpus=1)
    # Better, so the best, but within noise: the plateau goes on.
    assert tally.best == (within, 2) and tally.since_improvement == 1
    assert tally.best_number() == 5
    tally.account(row(3), TrialResult(run_id="t", status="failed", failure="oom"), gpus=1)
    assert tally.since_improvement == 2 and tally.count("failed") == 1
    tally.account(row(4), ok(20.0), gpus=1)
    assert tally.best == (20.0, 4) and tally.since_improvement == 0
    assert tally.count("ok") == 3 and tally.mean_duration() == 10.0
    tally.spent(ok(0.0, total_s=3600.0), gpus=2)  # a retry or a baseline: cost only
    assert len(tally.results) == 4
    assert tally.gpu_hours == (10 * 2 + 10 + 0 + 10) / 3600 + 2


class Hooks:
    """Stands in for the runner: proposals from a list, rows made up, records kept."""

    def __init__(self, proposals: list[Proposal]) -> None:
        self.proposals = proposals
        self.started: list[int] = []
        self.recorded: list[tuple[int, TrialResult]] = []
        self.waiting_changes = 0

    def propose(self) -> tuple[Proposal, TrialSpec | None] | None:
        if not self.proposals:
            return None
        proposal = self.proposals.pop(0)
        return proposal, spec(proposal.params, f"s1-t{proposal.number}-a1")

    def start_trial(self, proposal: Proposal, spec: TrialSpec | None, *,
                    attempt: int) -> TrialRecord:
        self.started.append(proposal.number)
        return row(100 + proposal.number, proposal.number, proposal.params)

    def record(self, row: TrialRecord, proposal: Proposal, result: TrialResult,
               gpus: int = 0) -> None:
        self.recorded.append((proposal.number, result))

    def waiting_changed(self) -> None:
        self.waiting_changes += 1


def test_a_proposal_without_free_gpus_is_held_and_the_wait_said_once() -> None:
    share = GpuShare(2)
    share.join(1)
    share.join(2)
    assert share.acquire(2, 1)  # a sibling sweep holds its fair half
    queue = LaunchQueue(VirtualExecutor(2), share, SPACE, 1, max_parallel=None,
                        coordinator_id="coordinator-x")
    hooks = Hooks([Proposal(0, FAST), Proposal(1, SLOW)])
    assert queue.launch(hooks) and hooks.started == [0]
    assert queue.started() == 1 and queue.running_rows() == [100]
    assert not queue.launch(hooks) and queue.waiting_for_gpus
    assert queue.deferred is None and hooks.proposals  # nothing asked beyond the share
    share.release(2, 1)
    share.leave(2)  # the sibling is done: the whole share is this sweep's
    assert queue.launch(hooks) and hooks.started == [0, 1] and len(queue.trials) == 2
    queue.trials.cancel_all()


def test_a_sweep_with_nothing_running_says_what_it_waits_for_until_it_launches() -> None:
    share = GpuShare(1)
    share.join(1)
    share.join(2)
    assert share.acquire(2, 1)  # the only GPU is a sibling's
    queue = LaunchQueue(VirtualExecutor(1), share, SPACE, 1, max_parallel=None,
                        coordinator_id="coordinator-x")
    hooks = Hooks([Proposal(0, FAST)])
    assert not queue.launch(hooks) and queue.waiting_for_gpus and queue.unlaunched() is False
    queue.wait_for_gpus(hooks)
    queue.wait_for_gpus(hooks)
    assert hooks.waiting_changes == 1 and queue.waiting is not None
    assert queue.waiting["for"] == "1 GPU(s), held by other sweeps of coordinator coordinator-x"
    share.release(2, 1)
    assert queue.launch(hooks) and queue.waiting is None and hooks.waiting_changes == 2
    [tag] = queue.trials.tags()
    assert isinstance(tag, Attempt) and tag.proposal.number == 0
    queue.trials.cancel_all()


def test_a_preset_proposal_is_recorded_at_once_and_never_submitted() -> None:
    share = GpuShare(1)
    share.join(1)
    queue = LaunchQueue(VirtualExecutor(1), share, SPACE, 1, max_parallel=None,
                        coordinator_id="coordinator-x")
    known = TrialResult(run_id="t", status="infeasible", violated_rule="a rule")

    class Presets(Hooks):
        def propose(self) -> tuple[Proposal, TrialSpec | None] | None:
            return (self.proposals.pop(0), None) if self.proposals else None

    hooks = Presets([Proposal(0, FAST, preset=known)])
    assert queue.launch(hooks)
    assert hooks.started == [0] and hooks.recorded == [(0, known)] and not len(queue.trials)
