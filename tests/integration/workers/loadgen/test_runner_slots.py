"""Requests whose concurrency slots free together leave together, as vLLM's client sends them.

On the real CPU vLLM a closed loop runs in lockstep: the requests in flight finish in
the same engine step and free their slots together. The first request sent after that
wakes the idle server, which takes the CPU from the client until it has read the
request, so every request still waiting for its turn of the event loop leaves that
much later (3-68 ms on the 2-core machine). vLLM's ``limited_request_func`` has each
request wait on the semaphore in its own task, so all of them are sent in one turn
before the first send's bytes go out. Here a fake send does what aiohttp's does (its
bytes leave from a writer task on a later turn) and holds the loop there, as the lost
CPU does; the runner must start every request of a wave within that hold, not one
hold apart.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from slotune.workers.loadgen import runner
from slotune.workers.loadgen.client import TRIAL_REQUESTS, RequestRecord, RequestTimings
from slotune.workers.loadgen.generate.datasets import RequestSpec

HOLD_S = 0.03  # the CPU one send costs the client
WAVE_S = 0.25  # in-flight requests all finish on multiples of this (lockstep)
CONCURRENCY = 4
N = 3 * CONCURRENCY


def test_requests_of_slots_freed_together_leave_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = time.perf_counter

    async def fake_send(session: Any, url: str, payload: dict[str, Any], *, index: int,
                        prompt_len: int, t0: float, target: float, ready: float,
                        deadline_s: float, **_: Any) -> RequestRecord:
        start = clock() - t0

        async def write() -> None:
            time.sleep(HOLD_S)  # the point: the loop is held

        writer = asyncio.create_task(write())
        now = clock()
        await asyncio.sleep(WAVE_S - (now - t0) % WAVE_S)  # the engine step that ends it
        await writer
        end = clock() - t0
        return RequestRecord(index=index, prompt_len=prompt_len, requested_output_len=2,
                             timings=RequestTimings(target, ready, start, (end,), end),
                             output_tokens=1)

    monkeypatch.setattr(runner, "send_request", fake_send)
    specs = [RequestSpec("p", 4, 2) for _ in range(N)]

    async def measure() -> list[RequestRecord]:
        send = runner._Sending(None, "m", "completions",  # type: ignore[arg-type]
                               "http://unused/v1/completions", clock(), 1.0, 10.0, None,
                               TRIAL_REQUESTS)
        records, _, _ = await runner._measure(
            send, specs, [0.0] * N, concurrency=CONCURRENCY,
            monitor=runner.AbortMonitor(None, N), progress=None)
        return records

    records = asyncio.run(measure())
    assert len(records) == N
    starts = sorted(r.timings.start for r in records)
    ends = sorted(r.timings.end or 0.0 for r in records)
    # the request that takes the slot the k-th finished request freed
    waits = [starts[k + CONCURRENCY] - ends[k] for k in range(N - CONCURRENCY)]
    assert max(waits) < HOLD_S, [round(w * 1000, 1) for w in waits]
    # ready is when the slot was taken: the wait for it is not send lag, the send is prompt
    assert max(r.timings.send_lag for r in records) < HOLD_S
