"""The client: send one streaming request, stamp its raw times, never raise for a bad request.

Knows nothing of arrival schedules or scoring (guidellm's split). It streams over
aiohttp, the client ``vllm bench serve`` uses: on a machine the server keeps busy, httpx
costs the client enough CPU per chunk that chunks pile up unread (measured on the CPU
vLLM: about half of all inter-token gaps under 1 ms, and 0.5× vLLM's throughput at a
concurrency of 4), which is the very distortion a load generator must not add. Times are
``time.perf_counter()`` seconds relative to the run's start (the runner passes its
``t0``). A chunk "carries choices" when its ``choices`` list is non-empty, exactly the
chunks ``vllm bench serve`` timestamps; the trailing usage chunk (``choices: []``) is not
one of them. A failed request is a :class:`RequestRecord` with ``error`` set.

Every SSE event is stamped with the time its bytes came off the socket: the clock is read
once per network read, before anything is decoded or parsed, and each event completed by
that read carries it (no line iterator between the socket and the clock). Input lengths
are what the server counted (``usage.prompt_tokens``) whenever it says.

``start`` is read right before ``session.post``, where vLLM's client reads its ``st``.
vLLM's session trusts the environment (``trust_env=True``), so before each of its
requests leaves aiohttp looks up ``~/.netrc`` in the default executor and the proxy
variables in a thread, both inside vLLM's TTFT: measured against the CPU vLLM on the busy
2-core machine, 12.4 ms mean (median 5.3, p90 32) from ``st`` to the request's headers
going out, against 1.3 ms (median 0.3) without. The session the runner opens does not
trust the environment (no proxy, no netrc), so its TTFT has no such hops.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

import aiohttp

__all__ = [
    "TRIAL_REQUESTS",
    "Endpoint",
    "RequestOptions",
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
    """Input tokens: the server's ``usage.prompt_tokens``, else the length asked for."""
    requested_output_len: int
    timings: RequestTimings
    output_tokens: int | None = None
    """``usage.completion_tokens`` (falls back to the number of chunks if absent)."""
    error: str | None = None
    warmup: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    """The generated text, when :attr:`RequestOptions.keep_text` asked for it."""
    output_ids: tuple[int, ...] | None = None
    """The generated token ids, when asked for and the server sent them (vLLM's
    ``return_token_ids``)."""
    session: int | None = None
    """The conversation this request is a turn of (``multi_turn``), and which turn."""
    turn: int | None = None
    context_tokens: int = 0
    """Tokens of the prompt its own session had sent or received before: the
    conversation so far, which a prefix cache may serve (0 for a first turn)."""

    @property
    def success(self) -> bool:
        return self.error is None

    def scaled(self, k: float) -> RequestRecord:
        return replace(self, timings=self.timings.scaled(k))


def endpoint_path(endpoint: Endpoint) -> str:
    return "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What every request carries besides its prompt and length, and what to keep of it.

    The default is a trial's request: greedy, generating exactly the length asked
    (``ignore_eos``). ``slotune bench`` sets these from ``vllm bench serve``'s flags.
    """

    sampling: Mapping[str, float | int] = field(
        default_factory=lambda: MappingProxyType({"temperature": 0.0}))
    """Sampling parameters sent as they are (vLLM's ``--temperature``, ``--top-p``, …)."""
    ignore_eos: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Merged into every body last (vLLM's ``--extra-body``), so it wins."""
    logprobs: int | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    request_id_prefix: str | None = None
    """Request ``i`` carries ``x-request-id: <prefix><i>`` (vLLM's ``--request-id-prefix``)."""
    keep_text: bool = False
    """Keep each response's generated text (``--save-detailed``'s ``generated_texts``)."""


TRIAL_REQUESTS = RequestOptions()


def build_payload(endpoint: Endpoint, model: str, prompt: str | list[int], output_len: int,
                  options: RequestOptions = TRIAL_REQUESTS, *,
                  history: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    """The JSON body ``vllm bench serve`` sends, usage streamed, with ``options`` applied.

    ``prompt`` is text or token ids (completions only; a chat message is text).
    ``history`` is a conversation's earlier chat messages, sent before ``prompt``.
    """
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        if not isinstance(prompt, str):
            raise TypeError("a chat request's prompt is text, not token ids")
        body["messages"] = [*history, {"role": "user", "content": prompt}]
        body["max_completion_tokens"] = output_len
    else:
        body.update(prompt=prompt, repetition_penalty=1.0, max_tokens=output_len,
                    logprobs=options.logprobs)
    body.update(stream=True, stream_options={"include_usage": True})
    if options.ignore_eos:
        body["ignore_eos"] = True
    body.update(options.sampling)
    body.update(options.extra_body)
    return body


async def send_request(
    session: aiohttp.ClientSession,
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
    headers: Mapping[str, str] | None = None,
    keep_text: bool = False,
) -> RequestRecord:
    """Send one streaming request to ``url`` (absolute) and record it; errors become
    ``RequestRecord.error``. A body asking for ``return_token_ids`` keeps the generated
    ids the chunks carry."""
    events = _StreamState(keep_text, bool(payload.get("return_token_ids")))
    clock = time.perf_counter
    start = clock() - t0
    error: str | None = None
    try:
        async with asyncio.timeout(deadline_s):
            async with session.post(url, json=payload, headers=headers) as response:
                if response.status != 200:
                    body = (await response.read())[:300].decode("utf-8", "replace")
                    error = f"HTTP {response.status}: {body.strip()}"
                else:
                    buffer = b""
                    async for data in response.content.iter_any():
                        arrived = clock() - t0  # first, before any decoding or parsing
                        buffer += data
                        *lines, buffer = buffer.split(b"\n")
                        for line in lines:
                            error = events.feed(line, arrived) or error
                    if buffer:
                        error = events.feed(buffer, clock() - t0) or error
    except TimeoutError:
        error = f"deadline exceeded: no complete response within {deadline_s:g} s"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except (json.JSONDecodeError, ValueError) as exc:
        error = f"malformed stream chunk: {exc}"
    chunks, usage_tokens = events.chunks, events.completion_tokens
    end = clock() - t0
    if error is None and not chunks:
        error = "Never received a valid chunk to calculate TTFT."
    tokens = usage_tokens[-1] if usage_tokens else (len(chunks) if chunks else None)
    timings = RequestTimings(target, ready, start, tuple(chunks), end)
    extra: dict[str, Any] = {}
    if not usage_tokens and error is None:
        extra["output_tokens_from"] = "chunk count"
    if events.prompt_tokens is None and error is None:
        extra["prompt_tokens_from"] = "request"
    return RequestRecord(
        index=index,
        prompt_len=events.prompt_tokens if events.prompt_tokens is not None else prompt_len,
        requested_output_len=int(payload.get("max_tokens")
                                 or payload.get("max_completion_tokens") or 0),
        timings=timings,
        output_tokens=tokens if error is None else None,
        error=error,
        warmup=warmup,
        extra=extra,
        text="".join(events.text) if keep_text else None,
        output_ids=tuple(events.output_ids) if events.output_ids is not None else None,
    )


class _StreamState:
    """What the SSE events of one response said, fed one line at a time with its arrival."""

    __slots__ = ("chunks", "completion_tokens", "keep_ids", "keep_text", "output_ids",
                 "prompt_tokens", "text")

    def __init__(self, keep_text: bool = False, keep_ids: bool = False) -> None:
        self.chunks: list[float] = []
        self.completion_tokens: list[int] = []
        self.prompt_tokens: int | None = None
        self.keep_text = keep_text
        self.text: list[str] = []
        self.keep_ids = keep_ids
        self.output_ids: list[int] | None = None

    def feed(self, line: bytes, arrived: float) -> str | None:
        """Take one line; returns an error the stream reported, if this line is one."""
        if not line.startswith(b"data:"):
            return None
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            return None
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"expected a JSON object, got {type(chunk).__name__}")
        choices = chunk.get("choices")
        if choices:
            self.chunks.append(arrived)
            if self.keep_text and isinstance(choices[0], dict):
                self.text.append(_chunk_text(choices[0]))
            if self.keep_ids and isinstance(choices[0], dict):
                ids = choices[0].get("token_ids")
                if isinstance(ids, list):
                    self.output_ids = (self.output_ids or []) + [int(i) for i in ids]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                self.completion_tokens.append(int(usage["completion_tokens"]))
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = int(usage["prompt_tokens"])
        if "error" in chunk and not chunk.get("choices"):
            return f"stream error: {json.dumps(chunk['error'])[:300]}"
        return None


def _chunk_text(choice: dict[str, Any]) -> str:
    """The text a completions (``text``) or chat (``delta.content``) choice carries."""
    text = choice.get("text")
    if text is None and isinstance(choice.get("delta"), dict):
        text = choice["delta"].get("content")
    return text if isinstance(text, str) else ""
