"""The results outbox on its own: order, retry from the failed step, conflicts, fencing."""

from __future__ import annotations

import pytest

from slotune.tuner.db.errors import Conflict, LeaseLost, StorageUnavailable
from slotune.tuner.sweep.outbox import Outbox


class Flaky:
    """A write that fails the first ``failures`` times it is tried."""

    def __init__(self, log: list[str], name: str, failures: int = 0,
                 error: Exception | None = None) -> None:
        self.log, self.name, self.failures = log, name, failures
        self.error = error or StorageUnavailable("database restarting")

    def __call__(self) -> None:
        if self.failures:
            self.failures -= 1
            raise self.error
        self.log.append(self.name)


def test_an_outage_stops_the_drain_and_the_next_resumes_at_the_failed_step() -> None:
    done: list[str] = []
    box = Outbox((StorageUnavailable,))
    box.add(Flaky(done, "store 1"), Flaky(done, "tell 1", failures=2), Flaky(done, "account 1"))
    box.add(Flaky(done, "store 2"))
    assert isinstance(box.drain(), StorageUnavailable) and done == ["store 1"]
    assert isinstance(box.drain(), StorageUnavailable) and done == ["store 1"]
    assert box.drain() is None and len(box) == 0
    assert done == ["store 1", "tell 1", "account 1", "store 2"]  # each once, in order


def test_a_conflict_drops_its_entry_and_the_rest_goes_on() -> None:
    done: list[str] = []
    box = Outbox((StorageUnavailable,))
    box.add(Flaky(done, "late", failures=1, error=Conflict("row moved on")),
            Flaky(done, "after late"))
    box.add(Flaky(done, "next"))
    assert box.drain() is None and done == ["next"]


def test_a_lost_lease_propagates_and_a_stop_ends_the_drain() -> None:
    done: list[str] = []
    box = Outbox((StorageUnavailable,))
    box.add(Flaky(done, "fenced", failures=1, error=LeaseLost("claimed elsewhere")))
    with pytest.raises(LeaseLost):
        box.drain()
    assert len(box) == 1  # left for the caller to drop
    stop = Outbox((StorageUnavailable,))
    stop.add(Flaky(done, "a"), Flaky(done, "b"))
    assert stop.drain(stopped=lambda: True) is None and done == ["a"]
