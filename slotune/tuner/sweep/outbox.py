"""The results outbox: a coordinator's writes that must happen, in order, outage or not.

Each entry is a list of steps (store the result, tell the strategy, account); a step that
raises one of the transient storage errors stops the drain, and the next drain starts
again at that step — so nothing a trial measured is lost while the database restarts,
and nothing is written twice. A :class:`~slotune.tuner.db.errors.Conflict` (a late result for a
row that moved on) drops its entry; :class:`~slotune.tuner.db.errors.LeaseLost` propagates (the
caller stops writing altogether). Needs neither a database nor an executor.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from slotune.tuner.db.errors import Conflict, LeaseLost

__all__ = ["Outbox", "Step"]

log = logging.getLogger(__name__)

Step = Callable[[], object]


class Outbox:
    """Entries of steps, drained in order; see the module docstring for the rules."""

    def __init__(self, transient: tuple[type[Exception], ...], *, name: str = "") -> None:
        self._transient = transient
        self._name = name
        self._entries: deque[deque[Step]] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, *steps: Step) -> None:
        self._entries.append(deque(steps))

    def clear(self) -> None:
        self._entries.clear()

    def drain(self, *, stopped: Callable[[], bool] = lambda: False) -> Exception | None:
        """Run what waits. Returns the storage error that stopped it (the rest waits for the
        next drain), else None; ``stopped()`` true after a step ends the drain at once."""
        while self._entries:
            steps = self._entries[0]
            while steps:
                try:
                    steps[0]()
                except LeaseLost:
                    raise  # a Conflict, but one that ends all writing: the caller's to handle
                except Conflict as exc:
                    log.warning("%s: a late result was refused and dropped: %s",
                                self._name, exc)
                    steps.clear()
                    break
                except self._transient as exc:
                    return exc
                if stopped():
                    return None
                steps.popleft()
            if self._entries:
                self._entries.popleft()
        return None
