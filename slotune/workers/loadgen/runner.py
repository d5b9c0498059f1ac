"""The runner: warm-up, then the measured run — schedule, send, scrape, stop early if told.

It wires the three layers together (arrival schedule → client → records) and owns the
clock: arrival offsets are engine seconds, compressed by ``time_scale`` K into wall
time; every recorded timestamp is multiplied by K on the way out, so the records, the
duration and the send lag all read in engine time. Scoring is left to the caller.

Each request waits for its concurrency slot in its own task, as ``vllm bench serve``'s
``limited_request_func`` does: ``ready`` is when it got the slot, and the requests of
slots freed together leave in the same turn of the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np

from slotune.workers.contracts import (
    SLO,
    CustomDataset,
    MultiTurnDataset,
    ShareGPTDataset,
    Workload,
)
from slotune.workers.loadgen.client import (
    TRIAL_REQUESTS,
    Endpoint,
    RequestOptions,
    RequestRecord,
    RequestTimings,
    build_payload,
    endpoint_path,
    send_request,
)
from slotune.workers.loadgen.generate.arrivals import arrival_offsets
from slotune.workers.loadgen.generate.datasets import (
    WORD_TOKENIZER,
    RequestSpec,
    TextTokenizer,
    sample_run,
)
from slotune.workers.loadgen.generate.sessions import Conversation, group_sessions, session_offsets
from slotune.workers.loadgen.generate.tokens import ServerTokenizer, TokenPool, fetch_token_pool
from slotune.workers.loadgen.score.scoring import allowed_violations, violated_metrics
from slotune.workers.loadgen.scrape import MetricsScraper, ScrapeSummary

__all__ = [
    "LAG_FLOOR_MS",
    "AbortMonitor",
    "BenchmarkRun",
    "EarlyAbort",
    "SendLag",
    "ServerUnreachable",
    "run_benchmark",
    "run_benchmark_sync",
]

LAG_FLOOR_MS = 5.0
"""Send lag (engine ms, p99) always tolerated; above it and 5% of the tightest target the
run is client-bound."""

ProgressFn = Callable[[int, int, RequestRecord], None]


class ServerUnreachable(ConnectionError):
    """The server did not answer at all (refused, DNS, timeout)."""


@dataclass(frozen=True, slots=True)
class EarlyAbort:
    """Why measuring stopped before every request was sent."""

    reason: str
    metric: str
    violations: int
    allowed: int
    after_requests: int


@dataclass(frozen=True, slots=True)
class SendLag:
    """How late requests left vs their target (engine ms) and whether that distorts the run."""

    mean_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    tolerance_ms: float
    client_bound: bool

    @classmethod
    def of(cls, lags_ms: list[float], tolerance_ms: float) -> SendLag:
        if not lags_ms:
            return cls(0.0, 0.0, 0.0, 0.0, tolerance_ms, False)
        p99 = float(np.percentile(lags_ms, 99))
        return cls(
            float(np.mean(lags_ms)), float(np.percentile(lags_ms, 50)), p99,
            float(max(lags_ms)), tolerance_ms, p99 > tolerance_ms,
        )


@dataclass(slots=True)
class BenchmarkRun:
    """What one run recorded (engine time): measured and warm-up records, lag, metrics.

    ``started_at`` is the wall-clock time the measured run began (its time 0).
    """

    started_at: datetime
    duration_s: float
    records: list[RequestRecord]
    warmup_records: list[RequestRecord]
    send_lag: SendLag
    scrape: ScrapeSummary
    time_scale: float
    early_abort: EarlyAbort | None = None
    warnings: list[str] = field(default_factory=list)
    prompts_as: str = "text"
    """How prompts were sent: ``token ids`` of the server's tokenizer, or ``text``."""
    model: str = ""
    """The model name the requests carried."""
    listed_model: str | None = None
    """The first model the server listed at ``/v1/models``."""


class AbortMonitor:
    """Counts SLO breakers per metric; trips once the verdict can only be a failure.

    By default that is when the gate's percentile can no longer hold (more breakers than
    it allows of ``n``); a capacity probe gives its own ``allowed`` per metric: breakers
    past which its confidence bound is over target
    (:mod:`slotune.workers.loadgen.score.verdict`)."""

    def __init__(self, slo: SLO | None, n: int,
                 allowed: Mapping[str, int] | None = None) -> None:
        self._slo = slo
        self._default = allowed_violations(n, slo.percentile) if slo else 0
        self._allowed = dict(allowed) if allowed is not None else {}
        self._bound = allowed is not None
        self._counts: dict[str, int] = {}
        self._seen = 0
        self.tripped: EarlyAbort | None = None

    def observe(self, record: RequestRecord) -> bool:
        self._seen += 1
        if self._slo is None or self.tripped is not None:
            return self.tripped is not None
        for metric in violated_metrics(record, self._slo):
            count = self._counts[metric] = self._counts.get(metric, 0) + 1
            allowed = self._allowed.get(metric, self._default)
            if count > allowed:
                target = self._slo.targets[metric]
                why = ("its confidence bound is over target" if self._bound
                       else "the gate can no longer hold")
                self.tripped = EarlyAbort(
                    reason=(
                        f"{count} requests broke {metric} ≤ {target:g} ms (failed ones count); "
                        f"p{self._slo.percentile:g} allows at most {allowed}: {why}"
                    ),
                    metric=metric,
                    violations=count,
                    allowed=allowed,
                    after_requests=self._seen,
                )
                return True
        return False


def _unreachable(base_url: str, exc: httpx.HTTPError) -> ServerUnreachable:
    return ServerUnreachable(f"cannot reach the server at {base_url}: {type(exc).__name__}"
                             + (f" ({exc})" if str(exc) else ""))


async def _preflight(client: httpx.AsyncClient, base_url: str,
                     ready_timeout_s: float) -> str | None:
    """Fail fast when nothing answers (with a ready timeout, wait up to it for an answer);
    the first model the server lists at ``/v1/models``, if it lists one."""
    deadline = time.monotonic() + ready_timeout_s
    while True:
        try:
            response = await client.get("/v1/models", timeout=10.0)
            break
        except httpx.HTTPError as exc:
            if time.monotonic() >= deadline:
                raise _unreachable(base_url, exc) from exc
        await asyncio.sleep(1.0)
    try:
        models = response.json().get("data") if response.status_code == 200 else None
    except (ValueError, AttributeError):
        return None
    if isinstance(models, list) and models and isinstance(models[0], dict) \
            and isinstance(models[0].get("id"), str):
        return str(models[0]["id"])
    return None


def _prompt(spec: RequestSpec, pool: TokenPool | None, endpoint: Endpoint) -> str | list[int]:
    """What to send as the prompt: the server's token ids where we have them, else text."""
    if endpoint == "completions" and spec.token_ids:
        return list(spec.token_ids)
    if pool is not None and spec.word_ids:
        return pool.token_ids(spec.word_ids)
    return spec.prompt


def _headers(options: RequestOptions, index: int) -> dict[str, str] | None:
    if options.request_id_prefix is None:
        return None
    return {"x-request-id": f"{options.request_id_prefix}{index}"}


async def _warmup(
    session: aiohttp.ClientSession,
    specs: list[RequestSpec],
    *,
    model: str,
    endpoint: Endpoint,
    url: str,
    concurrency: int,
    deadline_s: float,
    pool: TokenPool | None,
    options: RequestOptions,
) -> list[RequestRecord]:
    gate = asyncio.Semaphore(concurrency)
    t0 = time.perf_counter()

    async def one(i: int, spec: RequestSpec) -> RequestRecord:
        async with gate:
            now = time.perf_counter() - t0
            return await send_request(
                session, url,
                build_payload(endpoint, model, _prompt(spec, pool, endpoint), spec.output_len,
                              options),
                index=i, prompt_len=spec.prompt_len, t0=t0, target=now, ready=now,
                deadline_s=deadline_s, warmup=True,
            )

    return list(await asyncio.gather(*(one(i, s) for i, s in enumerate(specs))))


async def run_benchmark(
    base_url: str,
    model: str | None,
    workload: Workload,
    slo: SLO | None = None,
    *,
    endpoint: Endpoint | None = None,
    path: str | None = None,
    time_scale: float = 1.0,
    early_abort: bool = False,
    scrape_metrics: bool = True,
    scrape_interval_s: float = 0.5,
    base_dir: Path | None = None,
    progress: ProgressFn | None = None,
    options: RequestOptions = TRIAL_REQUESTS,
    ready_timeout_s: float = 0.0,
    verify_tls: bool = True,
    abort_allowed: Mapping[str, int] | None = None,
) -> BenchmarkRun:
    """Warm up, then send ``workload.num_prompts`` requests on schedule and record them.

    ``model`` None asks the server (the first of ``/v1/models``). ``options`` shape
    every request (a trial's, by default); ``ready_timeout_s`` waits that long for a
    server that does not answer yet (vLLM's ``--ready-check-timeout-sec``) and for its
    first request to succeed. Raises :class:`ServerUnreachable` when the
    server does not answer at all; every other failure is a record with its error.
    """
    if time_scale <= 0 or not math.isfinite(time_scale):
        raise ValueError(f"time_scale must be a positive number, got {time_scale}")
    k = time_scale
    endpoint = endpoint or workload.endpoint
    path = path or endpoint_path(endpoint)
    deadline_wall = workload.request_timeout_s / k
    concurrency = workload.arrivals.max_concurrency
    url = base_url.rstrip("/") + path
    # httpx for the few control calls and the scraper; aiohttp streams the load (client.py)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(30.0, connect=10.0),
                                 headers=dict(options.headers), verify=verify_tls) as client, \
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ssl=verify_tls),
                headers=dict(options.headers),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0)) as session:
        listed = await _preflight(client, base_url, ready_timeout_s)
        model = model or listed  # vLLM's default --model: the server's first
        if model is None:
            raise ServerUnreachable(f"the server at {base_url} lists no model at /v1/models; "
                                    "pass --model")
        specs, warm_specs = await _sample(workload, base_dir, base_url, model, options,
                                          verify_tls)
        n = len(specs)  # a trace may hold fewer
        sessions = isinstance(workload.dataset, MultiTurnDataset)
        offsets = session_offsets(specs, workload.dataset, workload.arrivals, workload.seed) \
            if isinstance(workload.dataset, MultiTurnDataset) else arrival_offsets(
                n, workload.arrivals, workload.seed, [s.arrival_offset_s for s in specs])
        # Chat messages are text (the template adds its own tokens): lengths come from usage.
        pool = await fetch_token_pool(client, model) if endpoint == "completions" else None
        if ready_timeout_s > 0:
            await _until_ready(session, specs[0], model=model, endpoint=endpoint, url=url,
                               pool=pool,
                               options=options, timeout_s=ready_timeout_s, base_url=base_url)
        warm = await _warmup(
            session, warm_specs, model=model, endpoint=endpoint, url=url,
            concurrency=concurrency or max(1, len(warm_specs)), deadline_s=deadline_wall,
            pool=pool, options=options,
        )
        t0 = time.perf_counter()
        # the interval is engine time; keep at least 0.1 s of wall time between scrapes
        wall_interval = max(0.1, scrape_interval_s / k)
        scraper = MetricsScraper(client, base_url, t0=t0, interval_s=wall_interval)
        if scrape_metrics:
            await scraper.start()
            t0 = time.perf_counter()  # the baseline scrape is not part of the run
        started_at = datetime.now()
        try:
            send = _Sending(session, model, endpoint, url, t0, k, deadline_wall, pool, options)
            records, abort, end = await (_measure_sessions if sessions else _measure)(
                send, specs, offsets, concurrency=concurrency,
                monitor=AbortMonitor(slo if early_abort else None, n, abort_allowed),
                progress=progress,
            )
        except BaseException:
            # Cancelled (the trial's engine died) or failed: the scraper must not outlive
            # the client it scrapes with.
            await scraper.cancel()
            raise
        if scrape_metrics:
            await scraper.stop()
    scaled = [r.scaled(k) for r in records]
    load_end = max((r.timings.start for r in scaled), default=0.0)
    tolerance = LAG_FLOOR_MS
    if slo is not None and slo.targets:
        tolerance = max(LAG_FLOOR_MS, 0.05 * min(slo.targets.values()))
    lag = SendLag.of([r.timings.send_lag * 1000.0 for r in scaled], tolerance)
    warnings: list[str] = []
    if pool is None and endpoint == "completions" and any(s.word_ids for s in specs):
        warnings.append(
            "the server has no /tokenize: prompts went as text, so their lengths in tokens "
            "differ from the workload's; input tokens are the server's usage counts"
        )
    if lag.client_bound:
        warnings.append(
            f"client-bound: p99 send lag {lag.p99_ms:.1f} ms (engine time) exceeds "
            f"{lag.tolerance_ms:.1f} ms — the load generator could not keep the schedule; "
            "lower the rate or time scale, or run the client on a less loaded machine"
        )
    summary = (
        scraper.summary(k) if scrape_metrics
        else ScrapeSummary(available=False, error="scraping disabled")
    )
    summary.load_end_s = load_end
    return BenchmarkRun(
        started_at=started_at,
        duration_s=end * k,
        records=scaled,
        warmup_records=[r.scaled(k) for r in warm],
        send_lag=lag,
        scrape=summary,
        time_scale=k,
        early_abort=abort,
        warnings=warnings,
        prompts_as="token ids" if pool is not None else "text",
        model=model,
        listed_model=listed,
    )


async def _sample(
    workload: Workload, base_dir: Path | None, base_url: str, model: str,
    options: RequestOptions, verify_tls: bool,
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """The measured and warm-up requests; text datasets counted by the server's tokenizer
    (blocking calls, so in a worker thread)."""
    tokenizer: TextTokenizer = WORD_TOKENIZER
    server: ServerTokenizer | None = None
    if isinstance(workload.dataset, ShareGPTDataset | CustomDataset) or (
            isinstance(workload.dataset, MultiTurnDataset) and workload.dataset.path):
        tokenizer = server = ServerTokenizer(base_url, model, options.headers, verify=verify_tls)

    def draw() -> tuple[list[RequestSpec], list[RequestSpec]]:
        try:
            return sample_run(workload.dataset, workload.num_prompts, workload.warmup_requests,
                              workload.seed, base_dir=base_dir, tokenizer=tokenizer,
                              token_seed=workload.token_seed)
        finally:
            if server is not None:
                server.close()

    return await asyncio.to_thread(draw)


async def _until_ready(
    session: aiohttp.ClientSession, spec: RequestSpec, *, model: str, endpoint: Endpoint,
    url: str, pool: TokenPool | None, options: RequestOptions, timeout_s: float, base_url: str,
) -> None:
    """Send the first request until it succeeds, for at most ``timeout_s`` (vLLM's ready check)."""
    deadline = time.monotonic() + timeout_s
    payload = build_payload(endpoint, model, _prompt(spec, pool, endpoint), spec.output_len,
                            options)
    while True:
        t0 = time.perf_counter()
        record = await send_request(
            session, url, payload, index=0, prompt_len=spec.prompt_len,
            t0=t0, target=0.0, ready=0.0, deadline_s=max(1.0, deadline - time.monotonic()),
            warmup=True)
        if record.success:
            return
        if time.monotonic() >= deadline:
            raise ServerUnreachable(f"the server at {base_url} was not ready within "
                                    f"{timeout_s:g} s: its first request failed: {record.error}")
        await asyncio.sleep(1.0)


@dataclass(frozen=True, slots=True)
class _Sending:
    """What every measured request of a run shares: the HTTP session, where requests go,
    how they are built, and the clock (``t0`` the run's start, ``k`` the time scale)."""

    session: aiohttp.ClientSession
    model: str
    endpoint: Endpoint
    url: str
    t0: float
    k: float
    deadline_s: float
    pool: TokenPool | None
    options: RequestOptions


async def _measure(
    send: _Sending,
    specs: list[RequestSpec],
    offsets: list[float],
    *,
    concurrency: int | None,
    monitor: AbortMonitor,
    progress: ProgressFn | None,
) -> tuple[list[RequestRecord], EarlyAbort | None, float]:
    session, model, endpoint, url = send.session, send.model, send.endpoint, send.url
    t0, k, deadline_s, pool, options = send.t0, send.k, send.deadline_s, send.pool, send.options
    slots = asyncio.Semaphore(concurrency) if concurrency else None
    done: list[RequestRecord] = []
    stop = asyncio.Event()
    drained = asyncio.Event()  # every request scheduled has finished
    scheduling = True
    tasks: set[asyncio.Task[RequestRecord | None]] = set()
    clock = time.perf_counter

    async def one(i: int, spec: RequestSpec, target: float) -> RequestRecord | None:
        # The request waits for its slot itself, as vLLM's ``limited_request_func`` does:
        # the requests of slots freed together all start in the next turn of the event
        # loop, before any of their bytes go out (aiohttp writes a body from a task on a
        # later turn). Taking slots in the scheduling loop instead took the next slot only
        # after the previous request's bytes had gone out, and on a busy machine the send
        # that wakes an idle server costs the client the CPU for a while (5-12 ms on the
        # 2-core machine), so the second to fourth request of a closed-loop wave left
        # 3-68 ms after their slots freed and the server batched them otherwise than
        # vLLM's client makes it; ``ready`` stamped after that wait hid it from send lag.
        async with slots if slots is not None else contextlib.nullcontext():
            if stop.is_set():
                return None
            ready = max(target, clock() - t0)
            payload = build_payload(endpoint, model, _prompt(spec, pool, endpoint),
                                    spec.output_len, options)
            return await send_request(
                session, url, payload, index=i, prompt_len=spec.prompt_len, t0=t0,
                target=target, ready=ready, deadline_s=deadline_s,
                headers=_headers(options, i), keep_text=options.keep_text,
            )

    def finished(task: asyncio.Task[RequestRecord | None]) -> None:
        tasks.discard(task)
        if not tasks and not scheduling:
            drained.set()
        if task.cancelled():
            return
        record = task.result()
        if record is None:
            return
        done.append(record)
        if progress is not None:
            progress(len(done), len(specs), record)
        if monitor.observe(record):
            stop.set()

    for i, (spec, offset) in enumerate(zip(specs, offsets, strict=True)):
        target = offset / k
        await _until(target, t0, stop)
        if stop.is_set():
            break
        task = asyncio.create_task(one(i, spec, target))
        tasks.add(task)
        task.add_done_callback(finished)
    scheduling = False
    if tasks and not stop.is_set():
        halt, idle = asyncio.ensure_future(stop.wait()), asyncio.ensure_future(drained.wait())
        await asyncio.wait({halt, idle}, return_when=asyncio.FIRST_COMPLETED)
        halt.cancel()
        idle.cancel()
    end = clock() - t0
    for task in list(tasks):
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    done.sort(key=lambda r: r.index)
    return done, monitor.tripped, end


async def _measure_sessions(
    send: _Sending,
    specs: list[RequestSpec],
    offsets: list[float],
    *,
    concurrency: int | None,
    monitor: AbortMonitor,
    progress: ProgressFn | None,
) -> tuple[list[RequestRecord], EarlyAbort | None, float]:
    """Conversations: each session starts at its offset and sends its turns one after
    another, each ``think_time_s`` after the previous answer (:mod:`sessions`). A failed
    turn ends its session; the turns it never sent are failed records, so the run
    still scores ``len(specs)`` requests."""
    session, model, endpoint, url = send.session, send.model, send.endpoint, send.url
    t0, k, deadline_s, pool, options = send.t0, send.k, send.deadline_s, send.pool, send.options
    slots = asyncio.Semaphore(concurrency) if concurrency else None
    done: list[RequestRecord] = []
    stop = asyncio.Event()
    clock = time.perf_counter

    def finish(record: RequestRecord) -> None:
        done.append(record)
        if progress is not None:
            progress(len(done), len(specs), record)
        if monitor.observe(record):
            stop.set()

    async def converse(indices: list[int], offset: float) -> None:
        conversation = Conversation()
        target = offset / k
        last: RequestRecord | None = None
        for position, i in enumerate(indices):
            spec = specs[i]
            if last is not None:  # the user reads the answer, then writes the next turn
                target = (last.timings.end or clock() - t0) + spec.think_time_s / k
            await _until(target, t0, stop)
            if stop.is_set():
                return
            async with slots if slots is not None else contextlib.nullcontext():
                chat = endpoint == "chat"
                message = spec.prompt if chat or conversation.ids is None \
                    else _prompt(spec, pool, endpoint)
                prompt = conversation.prompt(message, chat)
                payload = build_payload(endpoint, model, prompt, spec.output_len, options,
                                        history=conversation.messages if chat else ())
                if isinstance(prompt, list):
                    payload["return_token_ids"] = True
                record = await send_request(
                    session, url, payload, index=i, prompt_len=spec.prompt_len, t0=t0,
                    target=target, ready=max(target, clock() - t0), deadline_s=deadline_s,
                    headers=_headers(options, i), keep_text=True)
            answered = replace(record, session=spec.session, turn=spec.turn,
                               context_tokens=conversation.context_tokens)
            finish(answered if options.keep_text else replace(answered, text=None))
            if not record.success:
                for j in indices[position + 1:]:
                    finish(_unsent(specs[j], j, answered, clock() - t0))
                return
            conversation.answered(prompt, spec.prompt, answered)
            last = answered

    tasks = [asyncio.create_task(converse(group, offset))
             for group, offset in zip(group_sessions(specs), offsets, strict=True)]
    waiter = asyncio.ensure_future(stop.wait())
    pending: set[asyncio.Future[Any]] = {*tasks}
    while pending and not stop.is_set():
        _, pending = await asyncio.wait({*pending, waiter},
                                        return_when=asyncio.FIRST_COMPLETED)
        pending.discard(waiter)
    waiter.cancel()
    end = clock() - t0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    done.sort(key=lambda r: r.index)
    return done, monitor.tripped, end


async def _until(target: float, t0: float, stop: asyncio.Event) -> None:
    """Wait until ``target`` (wall seconds after ``t0``), or until the run is stopped."""
    delay = target - (time.perf_counter() - t0)
    if delay > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


def _unsent(spec: RequestSpec, index: int, failed: RequestRecord, now: float) -> RequestRecord:
    """A turn its session never sent: an earlier turn failed."""
    return RequestRecord(
        index=index, prompt_len=spec.prompt_len, requested_output_len=spec.output_len,
        timings=RequestTimings(now, now, now, (), now), session=spec.session, turn=spec.turn,
        error=f"not sent: turn {failed.turn} of its session failed ({failed.error})")


def run_benchmark_sync(*args: Any, **kwargs: Any) -> BenchmarkRun:
    """:func:`run_benchmark` on a fresh event loop (uvloop when installed)."""
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(run_benchmark(*args, **kwargs))
