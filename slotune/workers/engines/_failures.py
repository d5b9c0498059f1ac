"""What an engine adapter raises for engine behaviour: a classified failure with evidence.

Apart from the adapter (:mod:`slotune.workers.engines.base`) so that both of its halves, the
command line (:mod:`slotune.workers.engines._command`) and the process
(:mod:`slotune.workers.engines._lifecycle`), raise the same errors without importing each other.
"""

from __future__ import annotations

from slotune.workers.contracts import FailureClass

__all__ = ["EngineFailure", "InvalidEngineArgs"]


class EngineFailure(Exception):
    """The engine could not serve: a classified failure with its evidence."""

    def __init__(self, failure: FailureClass, message: str, *, exit_code: int | None = None,
                 log_tail: str | None = None, boot_s: float | None = None) -> None:
        super().__init__(message)
        self.failure: FailureClass = failure
        self.message = message
        self.exit_code = exit_code
        self.log_tail = log_tail
        self.boot_s = boot_s
        """Engine seconds the start-up took before it failed, where the engine itself
        keeps the time (the virtual-time simulator); None: the caller's clock says."""


class InvalidEngineArgs(EngineFailure):
    """Arguments the engine does not take (refused before anything runs)."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_config", message)
