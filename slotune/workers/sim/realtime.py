"""The real-time driver: the engine core stepping on the wall clock behind the server.

Engine time runs ``time_scale`` times faster than the wall clock. While the engine is
busy, each step starts exactly when the previous one ended in engine time, so engine
time stays a pure function of the cost model: a late wake-up of the event loop delays
when tokens are delivered, never the modelled timings (at a time scale of K, one
millisecond of wall lag would otherwise add K milliseconds to every step). When the
engine is idle, the next step starts at the current engine time. How late each wake-up
is (the step-timing lag) is kept so the benchmark can show the driver keeps time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from slotune.workers.sim.config import EngineConfig, MemoryPlan
from slotune.workers.sim.core import EngineCrashed, SimRequest
from slotune.workers.sim.data_parallel import make_core

log = logging.getLogger("slotune.workers.sim")

SPIN_S = 0.001
"""How close to a step's end the driver stops sleeping and starts yielding instead."""


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """New output words for one request; ``finish_reason`` set on its last event."""

    words: list[str]
    finish_reason: str | None = None


class RequestHandle:
    """What a server handler holds for one in-flight request."""

    def __init__(self, request: SimRequest) -> None:
        self.request = request
        self.events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self.sent = 0


class RealTimeEngine:
    """Runs the engine core (or its data-parallel ranks) against the event loop's clock."""

    def __init__(self, config: EngineConfig, plan: MemoryPlan | None = None,
                 lag_window: int = 100_000) -> None:
        self.core = make_core(config, plan=plan)
        self.scale = config.time_scale
        self.handles: dict[str, RequestHandle] = {}
        self.lags: deque[float] = deque(maxlen=lag_window)
        self.crashed: str | None = None
        self.on_crash: Callable[[], None] | None = None
        """Called once the engine has died (the server shuts down, as vLLM's does)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        self._ids = 0

    def engine_now(self) -> float:
        # perf_counter, not loop.time(): uvloop caches its clock at millisecond resolution.
        return (time.perf_counter() - self._t0) * self.scale

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}"

    def submit(self, request_id: str, prompt_ids: list[int], max_tokens: int | None, *,
               min_tokens: int = 0, ignore_eos: bool = False) -> RequestHandle:
        """Queue a request (raises RequestRejected for what vLLM would refuse)."""
        req = self.core.add_request(request_id, prompt_ids, max_tokens, self.engine_now(),
                                    min_tokens=min_tokens, ignore_eos=ignore_eos)
        handle = RequestHandle(req)
        self.handles[request_id] = handle
        self._wake.set()
        return handle

    def abort(self, request_id: str) -> None:
        if self.handles.pop(request_id, None) is not None:
            self.core.abort(request_id, self.engine_now())

    async def _run(self) -> None:
        core = self.core
        busy_until: float | None = None
        while True:
            if not core.has_work():
                busy_until = None
                self._wake.clear()
                await self._wake.wait()
                continue
            start = self.engine_now() if busy_until is None else busy_until
            try:
                result = core.step(start)
            except EngineCrashed as exc:
                self.crashed = str(exc)
                log.error("EngineCore encountered a fatal error.\n%s", exc)
                self._fail_all()
                if self.on_crash is not None:
                    self.on_crash()
                return
            if result is None:
                # Only requests that arrive after ``start`` are queued: catch up to now.
                busy_until = None
                await asyncio.sleep(0)
                continue
            target = self._t0 + result.end_time / self.scale
            while (remaining := target - time.perf_counter()) > 0:
                # The selector's timeout has millisecond granularity: sleep to just short of
                # the target, then yield to the loop until it is reached.
                await asyncio.sleep(remaining - SPIN_S if remaining > 2 * SPIN_S else 0)
            self.lags.append(time.perf_counter() - target)
            self._deliver(result.new_tokens, result.finished)
            busy_until = result.end_time

    def _deliver(self, new_tokens: list[tuple[SimRequest, int]],
                 finished: list[SimRequest]) -> None:
        done = {id(r) for r in finished}
        for req, produced in new_tokens:
            handle = self.handles.get(req.request_id)
            if handle is None or (produced == 0 and id(req) not in done):
                continue
            words = req.output_words(handle.sent, req.num_output)
            handle.sent = req.num_output
            reason = req.finish_reason if id(req) in done else None
            handle.events.put_nowait(TokenEvent(words, reason))
            if reason is not None:
                del self.handles[req.request_id]

    def _fail_all(self) -> None:
        for handle in self.handles.values():
            handle.events.put_nowait(TokenEvent([], "error"))
        self.handles.clear()
