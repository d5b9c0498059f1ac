"""The client: send one streaming request, stamp its raw times, never raise for a bad request.

Knows nothing of arrival schedules or scoring (guidellm's split). Times are
``time.perf_counter()`` seconds relative to the run's start (the runner passes its
``t0``). A chunk "carries choices" when its ``choices`` list is non-empty, exactly the
chunks ``vllm bench serve`` timestamps; the trailing usage chunk (``choices: []``) is not
one of them. A failed request is a :class:`RequestRecord` with ``error`` set.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx

__all__ = [
    "Endpoint",
    "RequestRecord",
    "RequestTimings",
    "build_payload",
    "endpoint_path",
    "send_request",
]

Endpoint = Literal["completions", "chat"]


@dataclass(frozen=True, slots=True)
class RequestTimings:
    """Raw timestamps of one request (seconds since the run's start, guidellm-style).

    ``target``: when the schedule wanted it sent; ``ready``: when it was free to go
    (target, or later if it waited for a concurrency slot); ``start``: when the client
    began sending; ``chunks``: arrival of every chunk carrying choices; ``end``: when the
    response stream closed (or the request failed).
    """

    target: float
    ready: float
    start: float
    chunks: tuple[float, ...] = ()
    end: float | None = None

    @property
    def send_lag(self) -> float:
        """How late the client sent it, not counting a wait for a concurrency slot."""
        return max(0.0, self.start - self.ready)

    def scaled(self, k: float) -> RequestTimings:
        """Every timestamp × ``k`` (engine time when the engine runs ``k``× faster)."""
        if k == 1.0:
            return self
        return replace(
            self,
            target=self.target * k,
            ready=self.ready * k,
            start=self.start * k,
            chunks=tuple(c * k for c in self.chunks),
            end=None if self.end is None else self.end * k,
        )


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request's outcome: what was asked, what came back, its raw timings, its error."""

    index: int
    prompt_len: int
    requested_output_len: int
    timings: RequestTimings
    output_tokens: int | None = None
    """``usage.completion_tokens`` (falls back to the number of chunks if absent)."""
    error: str | None = None
    warmup: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.error is None

    def scaled(self, k: float) -> RequestRecord:
        return replace(self, timings=self.timings.scaled(k))


def endpoint_path(endpoint: Endpoint) -> str:
    return "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"


def build_payload(endpoint: Endpoint, model: str, prompt: str, output_len: int) -> dict[str, Any]:
    """The JSON body ``vllm bench serve`` would send: greedy, ``ignore_eos``, usage streamed."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": output_len,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = output_len
    else:
        body["prompt"] = prompt
    return body


async def send_request(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    *,
    index: int,
    prompt_len: int,
    t0: float,
    target: float,
    ready: float,
    deadline_s: float,
    warmup: bool = False,
) -> RequestRecord:
    """Send one streaming request and record it; errors become ``RequestRecord.error``."""
    chunks: list[float] = []
    usage_tokens: list[int] = []
    clock = time.perf_counter
    start = clock() - t0
    error: str | None = None
    try:
        async with asyncio.timeout(deadline_s):
            async with client.stream("POST", url, json=payload) as response:
                if response.status_code != 200:
                    body = (await response.aread())[:300].decode("utf-8", "replace")
                    error = f"HTTP {response.status_code}: {body.strip()}"
                else:
                    async for line in response.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            continue
                        now = clock() - t0
                        chunk = json.loads(data)
                        if chunk.get("choices"):
                            chunks.append(now)
                        usage = chunk.get("usage")
                        if isinstance(usage, dict) and "completion_tokens" in usage:
                            usage_tokens.append(int(usage["completion_tokens"]))
                        if "error" in chunk and not chunk.get("choices"):
                            error = f"stream error: {json.dumps(chunk['error'])[:300]}"
    except TimeoutError:
        error = f"deadline exceeded: no complete response within {deadline_s:g} s"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except (json.JSONDecodeError, ValueError) as exc:
        error = f"malformed stream chunk: {exc}"
    end = clock() - t0
    if error is None and not chunks:
        error = "Never received a valid chunk to calculate TTFT."
    tokens = usage_tokens[-1] if usage_tokens else (len(chunks) if chunks else None)
    timings = RequestTimings(target, ready, start, tuple(chunks), end)
    return RequestRecord(
        index=index,
        prompt_len=prompt_len,
        requested_output_len=int(payload.get("max_tokens", 0)),
        timings=timings,
        output_tokens=tokens if error is None else None,
        error=error,
        warmup=warmup,
        extra={} if usage_tokens or error else {"output_tokens_from": "chunk count"},
    )
