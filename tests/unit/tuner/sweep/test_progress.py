"""The typed sweep progress: what the coordinator stores reads back, old rows included."""

from __future__ import annotations

from slotune.tuner.sweep.progress import SweepProgress


def test_a_queued_sweep_has_empty_progress() -> None:
    empty = SweepProgress.of({})
    assert (empty.phase, empty.trials, empty.best_trial_id, empty.waiting) == (
        "queued", 0, None, None)
    assert empty.stored() == {
        "phase": "queued", "trials": 0, "done": 0, "running": 0, "failed": 0, "infeasible": 0,
        "max_trials": None, "best_objective": None, "best_trial_id": None, "best_number": None,
        "best_params": None,
        "gpu_hours": 0.0, "eta_s": None, "updated_at": None}


def test_stored_progress_round_trips_with_the_json_keys_readers_use() -> None:
    stored = {"phase": "search", "trials": 3, "best_trial_id": 12, "best_objective": 4.5,
              "waiting": {"for": "2 GPU(s), held by other sweeps", "since": "2026-12-01"},
              "confirmation": [{"trial_id": 12, "params": {"max_num_seqs": 64},
                                "runs": [4.4, 4.6], "winner": True,
                                "details": [{"objective": 4.4, "status": "ok"}]}]}
    progress = SweepProgress.of(stored)
    assert progress.waiting is not None and progress.waiting.for_.startswith("2 GPU(s)")
    assert progress.confirmation[0].winner and progress.confirmation[0].runs == [4.4, 4.6]
    again = progress.stored()
    assert again["waiting"] == stored["waiting"]  # "for", as the dashboard reads it
    assert SweepProgress.of(again) == progress
    assert "stop_reason" not in again and "unconfirmed" not in again  # only once set


def test_what_an_older_version_stored_reads_without_failing() -> None:
    old = SweepProgress.of({"trials": 5, "done": "five", "legacy": {"x": 1},
                            "waiting": "GPUs"})
    assert old.trials == 5 and old.done == 0 and old.waiting is None
    assert "legacy" not in old.stored()
