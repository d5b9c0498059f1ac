"""The real-time driver: the engine core stepping on the wall clock behind the server.

Engine time runs ``time_scale`` times faster than the wall clock. Each step is scheduled
at the current engine time, the driver sleeps until the step's modelled end, then hands
every request its new tokens. How late each wake-up is (the step-timing lag) is kept so
the benchmark can show the driver keeps time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass

from workers.sim.config import EngineConfig, MemoryPlan
from workers.sim.core import EngineCore, EngineCrashed, SimRequest

log = logging.getLogger("workers.sim")


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
    """Runs an :class:`EngineCore` against the event loop's clock."""

    def __init__(self, config: EngineConfig, plan: MemoryPlan | None = None,
                 lag_window: int = 100_000) -> None:
        self.core = EngineCore(config, plan=plan)
        self.scale = config.time_scale
        self.handles: dict[str, RequestHandle] = {}
        self.lags: deque[float] = deque(maxlen=lag_window)
        self.crashed: str | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        self._ids = 0

    def engine_now(self) -> float:
        return (asyncio.get_running_loop().time() - self._t0) * self.scale

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        self._task = loop.create_task(self._run(), name="sim-engine")

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
        loop = asyncio.get_running_loop()
        core = self.core
        while True:
            if not core.has_work():
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                result = core.step(self.engine_now())
            except EngineCrashed as exc:
                self.crashed = str(exc)
                log.error("EngineCore encountered a fatal error.\n%s", exc)
                self._fail_all()
                return
            if result is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            target = self._t0 + result.end_time / self.scale
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.lags.append(max(0.0, loop.time() - target))
            self._deliver(result.new_tokens, result.finished)

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
