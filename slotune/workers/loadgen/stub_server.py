"""A streaming OpenAI-compatible stub with exactly known timing, for tests and benchmarks.

``python -m slotune.workers.loadgen.stub_server --port P --ttft-ms 100 --itl-ms 20`` streams the
first chunk ``ttft-ms`` after the request arrives and one chunk every ``itl-ms`` after
that (on an absolute schedule, so sleeps do not drift), ``max_tokens`` chunks in all,
then a usage chunk (``choices: []``) and ``[DONE]``. ``0`` for both makes a zero-cost
server (the load generator's overhead benchmark). It answers HTTP 500 for the model
``broken``, and serves a small vLLM-style ``/metrics`` unless ``--no-metrics``;
``--metrics-padding N`` adds N lines of other families, as a real vLLM page has
(histograms the load generator does not read). ``GET /stub/requests`` returns the last
1,000 generation requests it received (body, ``x-request-id``, ``x-team``, whether an
``Authorization`` header came), so tests can check what a client sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["build_app", "main"]

_LABELS = 'model_name="stub",engine="0"'


def build_app(ttft_s: float, itl_s: float, *, metrics: bool = True,
              metrics_padding: int = 0) -> Starlette:
    state = {"running": 0, "generation": 0, "prompt": 0, "requests": 0}
    received: deque[dict[str, Any]] = deque(maxlen=1000)
    # Built once: rendering it per scrape would stall this server's own streams.
    padding = "".join(["# TYPE vllm:request_params_n histogram\n"] + [
        f'vllm:request_params_n_bucket{{{_LABELS},le="{i}"}} {i}\n'
        for i in range(metrics_padding)]) if metrics_padding else ""

    async def stream(body: dict[str, Any], chat: bool) -> AsyncIterator[bytes]:
        start = time.perf_counter()
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        prompt = body.get("prompt") or " ".join(
            str(m.get("content", "")) for m in body.get("messages", [])
        )
        prompt_tokens = len(str(prompt).split())
        state["running"] += 1
        state["prompt"] += prompt_tokens
        try:
            for k in range(n):
                delay = start + ttft_s + k * itl_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                choice: dict[str, Any] = (
                    {"index": 0, "delta": {"content": " tok"}, "finish_reason": None}
                    if chat else {"index": 0, "text": " tok", "finish_reason": None}
                )
                if k == n - 1:
                    choice["finish_reason"] = "length"
                chunk = {"id": "stub", "object": "chunk", "model": body.get("model"),
                         "choices": [choice], "usage": None}
                state["generation"] += 1
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                     "total_tokens": prompt_tokens + n}
            yield f"data: {json.dumps({'id': 'stub', 'choices': [], 'usage': usage})}\n\n".encode()
            yield b"data: [DONE]\n\n"
        finally:
            state["running"] -= 1
            state["requests"] += 1

    def endpoint(chat: bool) -> Any:
        async def handle(request: Request) -> Response:
            body = await request.json()
            received.append({"path": request.url.path, "body": body,
                             "request_id": request.headers.get("x-request-id"),
                             "authorized": "authorization" in request.headers,
                             "team": request.headers.get("x-team")})
            if body.get("model") == "broken":
                return JSONResponse({"error": {"message": "model is broken"}}, status_code=500)
            return StreamingResponse(stream(body, chat), media_type="text/event-stream")

        return handle

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def requests_seen(_: Request) -> Response:
        return JSONResponse(list(received))

    async def health(_: Request) -> Response:
        return PlainTextResponse("")

    async def metrics_page(_: Request) -> Response:
        if not metrics:
            return PlainTextResponse("not found", status_code=404)
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{_LABELS}}} {state['running']}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{_LABELS}}} 0",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{_LABELS}}} 0.1",
            "# TYPE vllm:generation_tokens counter",
            f"vllm:generation_tokens_total{{{_LABELS}}} {state['generation']}",
            "# TYPE vllm:prompt_tokens counter",
            f"vllm:prompt_tokens_total{{{_LABELS}}} {state['prompt']}",
            "# TYPE vllm:num_preemptions counter",
            f"vllm:num_preemptions_total{{{_LABELS}}} 0",
        ]
        return PlainTextResponse("\n".join(lines) + "\n" + padding)

    return Starlette(routes=[
        Route("/v1/completions", endpoint(False), methods=["POST"]),
        Route("/v1/chat/completions", endpoint(True), methods=["POST"]),
        Route("/v1/models", models),
        Route("/health", health),
        Route("/stub/requests", requests_seen),
        Route("/metrics", metrics_page),
    ])


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m slotune.workers.loadgen.stub_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--no-metrics", action="store_true")
    parser.add_argument("--metrics-padding", type=int, default=0)
    args = parser.parse_args(argv)
    app = build_app(args.ttft_ms / 1000.0, args.itl_ms / 1000.0, metrics=not args.no_metrics,
                    metrics_padding=args.metrics_padding)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
