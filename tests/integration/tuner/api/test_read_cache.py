"""The read path's cache (slotune.tuner.api.read_cache): answers from snapshots, never stale.

On SQLite and Postgres (the change key rests on each one's trigger, migration 0011): a
frontier read, then a trial added or finished through the store, then read again, shows
it; every write the surfaces read changes the workload's key; concurrent readers that
miss together compute once and all get the right answer; and the cached route sends the
bytes FastAPI itself would have sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from slotune.tuner.api import create_app
from slotune.tuner.api.read_cache import ReadCache
from slotune.tuner.db import migrate
from slotune.tuner.db.snapshot import WorkloadSnapshot, change_key, load_workload
from slotune.tuner.db.store import Store
from slotune.tuner.planning.frontier import Frontier, build_frontier
from slotune.workers.contracts import SLO, CapacityProbe, TrialResult, Workload
from tests.support.api import settings_for
from tests.support.rescored import probe
from tests.support.stores import (  # noqa: F401 - fixtures are found by name
    backend,
    empty_url,
    new_database,
)

FRONTIER = "/api/v1/workloads/fleet/frontier"


@pytest.fixture
def store(empty_url: str) -> Iterator[Store]:  # noqa: F811
    migrate.upgrade(empty_url)
    with Store(empty_url) as opened:
        yield opened


@pytest.fixture
def sweep_id(store: Store) -> int:
    sweep = store.create_sweep(name="s", workload=Workload(name="fleet"),
                               slo=SLO(ttft=300, tpot=50), space={}, model="m", gpu="l40s",
                               strategy="random", mode="capacity")
    _finished(store, sweep.id, 0, {"max_num_seqs": 64},
              probe(4, 100, 20), probe(6, 150, 25), probe(8, 200, 60))
    return sweep.id


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(store._url), store=store)) as c:
        yield c


def _result(number: int, probes: tuple[CapacityProbe, ...]) -> TrialResult:
    passed = [p.request_rate for p in probes if p.gate_passed]
    return TrialResult(run_id=f"t{number}", status="ok", objective=max(passed, default=0.0),
                       capacity=max(passed, default=0.0), gate_passed=True,
                       capacity_probes=probes)


def _finished(store: Store, sweep_id: int, number: int, config: dict[str, Any],
              *probes: CapacityProbe) -> int:
    row = store.start_trial(sweep_id, number=number, params=config, worker="w0")
    store.finish_trial(row.id, _result(number, probes))
    return row.id


def _trials_on_chart(client: TestClient) -> set[int]:
    response = client.get(FRONTIER)
    assert response.status_code == 200, response.text
    return {p["trial_id"] for p in response.json()["points"]}


def test_the_frontier_shows_a_trial_added_after_it_was_cached(
        store: Store, sweep_id: int, client: TestClient) -> None:
    before = _trials_on_chart(client)
    assert before == _trials_on_chart(client)  # served again (cached)
    added = _finished(store, sweep_id, 1, {"max_num_seqs": 128},
                      probe(5, 100, 20), probe(10, 250, 45))
    assert _trials_on_chart(client) == before | {added}


def test_the_frontier_shows_a_trial_that_finished_after_it_was_cached(
        store: Store, sweep_id: int, client: TestClient) -> None:
    """Started (no result: not on the chart), read, then finished: an UPDATE of a row the
    snapshot already counted — only the row's version says it changed."""
    running = store.start_trial(sweep_id, number=1, params={"max_num_seqs": 32}, worker="w0")
    assert running.id not in _trials_on_chart(client)
    store.finish_trial(running.id, _result(1, (probe(3, 90, 18), probe(7, 260, 70))))
    assert running.id in _trials_on_chart(client)


def test_every_write_the_surfaces_read_changes_the_workloads_key(
        store: Store, sweep_id: int) -> None:
    keys = [change_key(store, "fleet")]

    def changed() -> bool:
        keys.append(change_key(store, "fleet"))
        return keys[-1] != keys[-2]

    trial = store.start_trial(sweep_id, number=1, params={"max_num_seqs": 8}, worker="w0")
    assert changed()
    store.finish_trial(trial.id, _result(1, (probe(3, 90, 18),)))
    assert changed()
    store.set_capacity(trial.id, low=3.0, high=4.0, gpus=1, repeats=1)
    assert changed()
    store.mark_confirmed(trial.id, repeats=2)
    assert changed()
    store.update_sweep(sweep_id, progress={"note": "one more"})
    assert changed()
    store.add_card(sweep_id, step=1, symptom="s", evidence={}, hypothesis="h",
                   variable="max_num_seqs", values=[8], expected_direction="up")
    assert changed()
    assert not changed()  # reading changes nothing
    other = store.create_sweep(name="o", workload=Workload(name="other"), slo=SLO(ttft=300),
                               space={}, model="m", gpu="l40s", strategy="random")
    store.start_trial(other.id, number=0, params={}, worker="w0")
    assert not changed()  # another workload's writes are its own


def test_concurrent_readers_compute_once_and_agree(store: Store, sweep_id: int) -> None:
    cache = ReadCache(store)
    computing = threading.Event()
    release = threading.Event()
    calls = []

    def slow_frontier(snapshot: WorkloadSnapshot) -> Frontier:
        calls.append(snapshot)
        computing.set()
        release.wait(10)
        return build_frontier(snapshot)

    with ThreadPoolExecutor(16) as pool:
        first = pool.submit(cache.derived, "fleet", "frontier", slow_frontier)
        assert computing.wait(10)
        rest = [pool.submit(cache.derived, "fleet", "frontier", slow_frontier)
                for _ in range(15)]
        release.set()
        answers = [first.result(10), *(f.result(10) for f in rest)]
    assert len(calls) == 1 and cache.computed == 2  # the snapshot, then the frontier
    assert all(a is answers[0] for a in answers)
    assert answers[0] == build_frontier(load_workload(store, "fleet"))


def test_readers_racing_a_writer_never_see_an_answer_older_than_their_request(
        store: Store, sweep_id: int) -> None:
    """Each reader notes how many trials were stored before it asked; its frontier holds
    at least those (a snapshot is never older than the key it is cached under)."""
    cache = ReadCache(store)
    stored = [1]
    errors: list[str] = []

    def read() -> None:
        for _ in range(10):
            floor = stored[0]
            frontier = cache.derived("fleet", "frontier", build_frontier)
            if len({p.trial_id for p in frontier.points}) < floor:
                errors.append(f"{len({p.trial_id for p in frontier.points})} < {floor}")

    readers = [threading.Thread(target=read) for _ in range(8)]
    for r in readers:
        r.start()
    for number in range(1, 6):
        _finished(store, sweep_id, number, {"max_num_seqs": 8 * number},
                  probe(2, 80, 15), probe(4 + number, 280, 40))
        stored[0] += 1
    for r in readers:
        r.join(60)
    assert not errors
    frontier = cache.derived("fleet", "frontier", build_frontier)
    assert len({p.trial_id for p in frontier.points}) == 6


def test_an_error_reaches_every_waiter_and_is_not_cached(store: Store, sweep_id: int) -> None:
    cache = ReadCache(store)
    attempts = []

    def failing(_: WorkloadSnapshot) -> None:
        attempts.append(1)
        raise RuntimeError("boom")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            cache.derived("fleet", "failing", failing)
    assert len(attempts) == 2


def test_the_cache_is_bounded(store: Store, sweep_id: int) -> None:
    cache = ReadCache(store, max_entries=3)
    for i in range(10):
        cache.derived("fleet", ("n", i), lambda _s, i=i: i)
    assert len(cache._entries) <= 3


def test_the_cached_frontier_is_the_bytes_fastapi_sends_for_the_model(
        store: Store, sweep_id: int, client: TestClient) -> None:
    frontier = build_frontier(load_workload(store, "fleet"),
                              gpu_prices=settings_for(store._url).planner.prices(None))
    plain = FastAPI()

    @plain.get("/f", response_model=Frontier)
    def as_model() -> Frontier:
        return frontier

    expected = TestClient(plain).get("/f")
    got = client.get(FRONTIER)
    assert got.content == expected.content
    assert got.headers["content-type"] == expected.headers["content-type"]
    csv = client.get(FRONTIER, params={"format": "csv"})
    assert csv.headers["content-type"].startswith("text/csv")


def test_a_report_is_rebuilt_when_its_sweep_changes(
        store: Store, sweep_id: int, client: TestClient) -> None:
    first = client.get(f"/api/v1/sweeps/{sweep_id}/report", params={"format": "md"})
    assert first.status_code == 200
    store.update_sweep(sweep_id, status="cancelled", stop_reason="a reason to find")
    second = client.get(f"/api/v1/sweeps/{sweep_id}/report", params={"format": "md"})
    assert "a reason to find" in second.text and first.text != second.text
    assert client.get("/api/v1/sweeps/999999/report").status_code == 404

