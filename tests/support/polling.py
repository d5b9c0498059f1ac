"""Waiting in tests for something another process does, with a deadline that says what."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """``predicate()``'s first truthy value, polled every 0.1 s; AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
