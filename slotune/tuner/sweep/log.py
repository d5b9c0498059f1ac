"""A sweep's log for files and log shippers: one line per trial start, trial end and phase.

rich's progress bar draws only on a terminal; written to a file (``slotune sweep run >
sweep.log``, ``nohup``, systemd, a Kubernetes job) it says nothing until the final table.
So when stdout is not a terminal, ``sweep run``, ``sweep resume`` and ``coordinator``
(which has no bar at all) hand the runner a :class:`SweepLog` instead, and each event is
one line, written and flushed as it happens:

* text (the default)::

    2026-12-03T15:04:05Z sweep 3 trial 4 started: max_num_seqs=128
    2026-12-03T15:04:37Z sweep 3 trial 4 ok: max_num_seqs=128 · objective 5.123 · 31.9 s
      · best 5.123 (trial 4) · 4/10 · ETA 96 s                  (one line in the log)
    2026-12-03T15:05:02Z sweep 3 trial 5 failed: … · oom: CUDA out of memory … · 12.0 s …
    2026-12-03T15:09:10Z sweep 3 phase confirm: budget: 10 trials

* ``json``: the same events, one JSON object per line (``event`` is ``trial_started``,
  ``trial_ended``, ``phase`` or ``sweep_finished``), for Loki, Fluent Bit, CloudWatch.
  Their ``trial`` and ``best_trial`` are Optuna trial numbers (``number``), as in the text.

A trial's configuration is written as its delta from the space's defaults (the knobs it
changed; ``defaults`` when it changed none), so a night's log reads as the experiments it
ran. Several sweeps of one coordinator share one log; a lock keeps their lines whole.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from slotune.tuner.sweep.progress import SweepProgress
from slotune.workers.contracts import KnobValue, TrialResult

__all__ = ["LOG_FORMATS", "LogFormat", "SweepEvents", "SweepLog", "config_delta"]

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")


def config_delta(params: Mapping[str, KnobValue],
                 defaults: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
    """The knobs of ``params`` that differ from ``defaults`` (the space's engine defaults)."""
    return {k: v for k, v in params.items() if k not in defaults or defaults[k] != v}


class SweepLog:
    """Writes sweep events to ``stream`` as lines of ``fmt`` (see the module docstring)."""

    def __init__(self, stream: TextIO | None, fmt: LogFormat = "text") -> None:
        """``stream`` None: a log that writes nothing (a terminal's bar says it all), so
        the runner logs every event the same way, log or not."""
        if fmt not in LOG_FORMATS:
            raise ValueError(f"log format {fmt!r}: valid: {', '.join(LOG_FORMATS)}")
        self.stream = stream
        self.fmt = fmt
        self._lock = threading.Lock()

    # ---- events -------------------------------------------------------------------

    def trial_started(self, sweep_id: int, number: int, delta: Mapping[str, KnobValue], *,
                      attempt: int = 1, repeat: int | None = None) -> None:
        what = _which(number, attempt, repeat)
        self._write({"event": "trial_started", "sweep": sweep_id, "trial": number,
                     "attempt": attempt, "repeat": repeat, "delta": dict(delta)},
                    f"sweep {sweep_id} {what} started: {_delta_text(delta)}")

    def trial_ended(self, sweep_id: int, number: int, delta: Mapping[str, KnobValue],
                    result: TrialResult, progress: SweepProgress | None, *,
                    best_number: int | None = None, attempt: int = 1,
                    repeat: int | None = None, retried: bool = False) -> None:
        """``progress`` (None in confirmation) gives the best so far and the ETA,
        ``best_number`` the number of the trial that holds that best; ``retried``: the
        attempt said nothing about the configuration (a lost worker) and runs again."""
        what = _which(number, attempt, repeat)
        outcome = (f"objective {result.objective:.3f}" if result.status == "ok"
                   else _failure_text(result))
        parts = [_delta_text(delta), outcome, f"{result.timings.total_s:.1f} s"]
        best = eta = None
        if progress is not None:
            best, eta = progress.best_objective, progress.eta_s
            parts.append("best —" if best is None
                         else f"best {best:.3f} (trial {best_number})")
            if progress.max_trials:
                parts.append(f"{progress.done + progress.failed + progress.infeasible}"
                             f"/{progress.max_trials}")
            parts.append("ETA —" if eta is None else f"ETA {eta:.0f} s")
        if retried:
            parts.append("runs again")
        self._write({"event": "trial_ended", "sweep": sweep_id, "trial": number,
                     "attempt": attempt, "repeat": repeat, "status": result.status,
                     "delta": dict(delta), "objective": result.objective,
                     "capacity": result.capacity, "failure": result.failure,
                     "failure_message": result.failure_message or result.violated_rule,
                     "wall_s": result.timings.total_s, "best_objective": best,
                     "best_trial": best_number if best is not None else None,
                     "eta_s": eta, "retried": retried},
                    f"sweep {sweep_id} {what} {result.status}: " + " · ".join(parts))

    def phase(self, sweep_id: int, progress: SweepProgress) -> None:
        detail = progress.stop_reason or ""
        best = ""
        if progress.phase == "done" and progress.best_objective is not None:
            best = f" · best {progress.best_objective:.3f} (trial {progress.best_number})"
        self._write({"event": "phase", "sweep": sweep_id, "phase": progress.phase,
                     "reason": progress.stop_reason,
                     "best_objective": progress.best_objective,
                     "best_trial": progress.best_number},
                    f"sweep {sweep_id} phase {progress.phase}" + (f": {detail}" if detail
                                                                 else "") + best)

    def message(self, event: str, text: str, **fields: Any) -> None:
        """Any other line (start-up, the sweep's end) in the log's format."""
        self._write({"event": event, **fields, "message": text}, text)

    # ---- helpers ------------------------------------------------------------------

    def _write(self, record: dict[str, Any], text: str) -> None:
        if self.stream is None:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.fmt == "json":
            line = json.dumps({"ts": now, **{k: v for k, v in record.items()
                                             if v is not None}}, default=str)
        else:
            line = f"{now} {text}"
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()  # a file's reader (tail -f) sees each trial as it ends


class SweepEvents:
    """One sweep's events in a :class:`SweepLog`: the sweep and its space's defaults bound
    (a trial is logged by its params, written as their delta), and a phase said once, when
    it changes."""

    def __init__(self, log: SweepLog, sweep_id: int,
                 defaults: Mapping[str, KnobValue]) -> None:
        self.log = log
        self.sweep_id = sweep_id
        self.defaults = defaults
        self._phase: str | None = None

    def trial_started(self, number: int, params: Mapping[str, KnobValue], *,
                      attempt: int = 1, repeat: int | None = None) -> None:
        self.log.trial_started(self.sweep_id, number, config_delta(params, self.defaults),
                               attempt=attempt, repeat=repeat)

    def trial_ended(self, number: int, params: Mapping[str, KnobValue], result: TrialResult,
                    progress: SweepProgress | None, *, best_number: int | None = None,
                    attempt: int = 1, repeat: int | None = None,
                    retried: bool = False) -> None:
        self.log.trial_ended(self.sweep_id, number, config_delta(params, self.defaults),
                             result, progress, best_number=best_number, attempt=attempt,
                             repeat=repeat, retried=retried)

    def phase(self, progress: SweepProgress) -> None:
        """One line when the phase changes (search, confirm, done, cancelled)."""
        if progress.phase != self._phase:
            self._phase = progress.phase
            self.log.phase(self.sweep_id, progress)


def _which(number: int, attempt: int, repeat: int | None) -> str:
    text = f"trial {number}"
    if repeat is not None:
        text += f" repeat {repeat}"
    if attempt > 1:
        text += f" (attempt {attempt})"
    return text


def _delta_text(delta: Mapping[str, KnobValue]) -> str:
    return " ".join(f"{k}={v}" for k, v in delta.items()) or "defaults"


def _failure_text(result: TrialResult) -> str:
    if result.status == "infeasible":
        return f"infeasible: {result.violated_rule or result.failure_message or 'no reason'}"
    message = " ".join((result.failure_message or "").split())
    if len(message) > 160:
        message = message[:157] + "…"
    return f"{result.failure}: {message}" if message else str(result.failure)
