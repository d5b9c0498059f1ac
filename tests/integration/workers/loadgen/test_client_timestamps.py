"""Every SSE event is stamped when its bytes arrive; input lengths are the server's count.

A server in its own thread (its own event loop, so its timing does not depend on the
client's) writes events on a known schedule, some of them several to one TCP write, the
way a busy server flushes. The client must stamp each write's events with that write's
arrival and never stamp a later write early or an earlier one late.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator

import aiohttp
import pytest

from slotune.workers.loadgen.client import build_payload, send_request

GAP_S = 0.05
# Writes of the stream: each a list of events sent in one TCP write, GAP_S apart.
WRITES = [[0], [1, 2], [3], [4, 5, 6], [7]]


def _event(i: int) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "text": f" t{i}"}]}).encode() + b"\n\n"


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")  # the body is small and ignored
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"connection: close\r\n\r\n")
    await writer.drain()
    for events in WRITES:
        await asyncio.sleep(GAP_S)
        writer.write(b"".join(_event(i) for i in events))
        await writer.drain()
    usage = {"prompt_tokens": 37, "completion_tokens": 8, "total_tokens": 45}
    writer.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
                 + b"\n\ndata: [DONE]\n\n")
    await writer.drain()
    writer.close()


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, asyncio.base_events.Server] = {}

    async def start() -> None:
        box["server"] = await asyncio.start_server(_serve, "127.0.0.1", 0)
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    assert started.wait(5)
    port = box["server"].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(box["server"].close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _send(url: str) -> tuple[list[float], int, int | None]:
    async def go() -> tuple[list[float], int, int | None]:
        async with aiohttp.ClientSession() as session:
            t0 = time.perf_counter()
            record = await send_request(
                session, url + "/v1/completions", build_payload("completions", "m", [1, 2, 3], 8),
                index=0, prompt_len=3, t0=t0, target=0.0, ready=0.0, deadline_s=10)
        assert record.error is None, record.error
        return list(record.timings.chunks), record.prompt_len, record.output_tokens

    return asyncio.run(go())


def test_each_event_carries_the_arrival_of_the_write_that_brought_it(server_url: str) -> None:
    chunks, _, _ = _send(server_url)
    assert len(chunks) == 8
    by_write = [[chunks[i] for i in events] for events in WRITES]
    for stamps in by_write:  # events of one write arrived together
        assert max(stamps) - min(stamps) < 0.002
    firsts = [stamps[0] for stamps in by_write]
    gaps = [b - a for a, b in itertools.pairwise(firsts)]
    # each later write was stamped a write-gap later, not early (bunched) nor late
    assert all(GAP_S * 0.7 < g < GAP_S * 1.8 for g in gaps), gaps


def test_input_length_is_what_the_server_counted(server_url: str) -> None:
    _, prompt_len, output_tokens = _send(server_url)
    assert prompt_len == 37  # usage.prompt_tokens, not the 3 ids the request carried
    assert output_tokens == 8
