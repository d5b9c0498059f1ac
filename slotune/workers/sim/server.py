"""The simulated engine's OpenAI-compatible HTTP server (what ``vllm serve`` exposes).

Routes: ``/v1/completions`` and ``/v1/chat/completions`` (streaming SSE with
``stream_options.include_usage``, or whole responses), ``/v1/models``, ``/health``
(200 only once "loaded"), ``/metrics`` (Prometheus, vLLM's names), and
``/reset_prefix_cache``. Bad requests get OpenAI-style error bodies with status 400.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from slotune.workers.sim import tokenizer
from slotune.workers.sim.config import (
    SIM_ENGINE_VERSION,
    EngineConfig,
    EngineConfigError,
    MemoryPlan,
    config_from_args,
    graph_capture_seconds,
    load_seconds,
    plan_memory,
    startup_log_lines,
)
from slotune.workers.sim.core import RequestRejected
from slotune.workers.sim.metrics import EngineStatsCollector
from slotune.workers.sim.realtime import RealTimeEngine, RequestHandle

log = logging.getLogger("slotune.workers.sim")

MAX_STARTUP_DELAY_S = 1.0


class StreamOptions(BaseModel):
    include_usage: bool = False


class _GenerationParams(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)
    temperature: float | None = None
    return_token_ids: bool = False
    """vLLM's: each streamed chunk carries its new tokens' ids (``token_ids``)."""


class CompletionRequest(_GenerationParams):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None


class TokenizeRequest(BaseModel):
    """vLLM's two forms: a completions ``prompt``, or chat ``messages`` (templated)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either 'prompt' or 'messages'")
        return self


class ChatCompletionRequest(_GenerationParams):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


def error_body(message: str, status: int = 400, err_type: str = "BadRequestError") -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": err_type, "param": None, "code": status}},
        status_code=status,
    )


def _chat_prompt(messages: list[ChatMessage]) -> str:
    """A chat template: role markers around each message, then the assistant cue."""
    parts: list[str] = []
    for m in messages:
        if isinstance(m.content, list):
            text = " ".join(str(p.get("text", "")) for p in m.content if isinstance(p, dict))
        else:
            text = m.content or ""
        parts.append(f"<|im_start|>{m.role} {text} <|im_end|>")
    parts.append("<|im_start|>assistant")
    return " ".join(parts)


def _prompt_ids(prompt: object, vocab: int) -> list[int]:
    """Token ids of a completions ``prompt``: a text, token ids, or a one-element batch."""
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, vocab)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        ids = [int(t) for t in prompt]
        if any(t < 0 or t >= vocab for t in ids):
            raise RequestRejected(f"Token id out of vocabulary range [0, {vocab}).")
        return ids
    if isinstance(prompt, list) and len(prompt) == 1:
        return _prompt_ids(prompt[0], vocab)
    raise RequestRejected(
        "The simulated engine serves one prompt per request; send a string or a list of "
        "token ids."
    )


class SimServer:
    """Wires one :class:`RealTimeEngine` to the HTTP routes."""

    def __init__(self, config: EngineConfig, plan: MemoryPlan, startup_delay: float,
                 on_crash: Callable[[], None] | None = None) -> None:
        self.config = config
        self.on_crash = on_crash
        self.plan = plan
        self.startup_delay = startup_delay
        self.engine: RealTimeEngine | None = None
        self.ready = False
        self.created = int(time.time())
        self.registry = CollectorRegistry(auto_describe=True)
        self.app = self._build_app()

    def _engine(self) -> RealTimeEngine:
        assert self.engine is not None
        return self.engine

    def _build_app(self) -> FastAPI:
        @contextlib.asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            self.engine = RealTimeEngine(self.config, self.plan)
            self.engine.on_crash = self.on_crash
            self.registry.register(EngineStatsCollector(
                lambda: self._engine().core.stats, lambda: self._engine().core.gauges(),
                self.config.served_model_name,
            ))
            self.engine.start()
            loop = asyncio.get_running_loop()
            loop.call_later(self.startup_delay, self._mark_ready)
            yield
            await self.engine.stop()

        app = FastAPI(title="slotune simulated vLLM engine", lifespan=lifespan)

        @app.exception_handler(RequestValidationError)
        async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
                for e in exc.errors()
            )
            return error_body(f"Invalid request: {problems}")

        @app.get("/health")
        async def health() -> Response:
            if self.engine is not None and self.engine.crashed:
                return Response(status_code=500)
            return Response(status_code=200 if self.ready else 503)

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{
                "id": self.config.served_model_name, "object": "model",
                "created": self.created, "owned_by": "vllm", "root": self.config.model.name,
                "parent": None, "max_model_len": self.config.max_model_len,
            }]}

        @app.get("/metrics")
        async def metrics() -> Response:
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        @app.post("/tokenize")
        async def tokenize(body: TokenizeRequest) -> Response:
            """vLLM's route: the prompt's token ids (here: one per word; no special tokens)."""
            err = self._check_model(body.model)
            if err is not None:
                return err
            text = body.prompt if body.messages is None else _chat_prompt(body.messages)
            ids = tokenizer.encode(text or "", self.config.model.vocab_size)
            return JSONResponse({"count": len(ids), "max_model_len": self.config.max_model_len,
                                 "tokens": ids, "token_strs": None})

        @app.post("/reset_prefix_cache")
        async def reset_prefix_cache() -> Response:
            if not self._engine().core.reset_prefix_cache():
                log.warning("Failed to reset prefix cache because some blocks are in use.")
            return Response(status_code=200)

        @app.get("/sim/stats")
        async def sim_stats() -> dict[str, Any]:
            """Simulator-only: step-timing lag and engine facts (for benchmarks)."""
            engine = self._engine()
            lags = sorted(engine.lags)
            def pct(q: float) -> float | None:
                return lags[min(len(lags) - 1, int(q * len(lags)))] if lags else None
            return {
                "num_steps": engine.core.num_steps, "lag_samples": len(lags),
                "lag_p50_s": pct(0.50), "lag_p99_s": pct(0.99),
                "lag_max_s": lags[-1] if lags else None,
                "kv_cache_tokens": self.plan.kv_tokens, "config": self.config.resolved(),
            }

        @app.post("/v1/completions")
        async def completions(body: CompletionRequest, request: Request) -> Response:
            err = self._check_model(body.model)
            if err is not None:
                return err
            try:
                ids = _prompt_ids(body.prompt, self.config.model.vocab_size)
            except RequestRejected as exc:
                return error_body(str(exc))
            return await self._generate("cmpl", ids, body, body.max_tokens, request, chat=False)

        @app.post("/v1/chat/completions")
        async def chat(body: ChatCompletionRequest, request: Request) -> Response:
            err = self._check_model(body.model)
            if err is not None:
                return err
            ids = tokenizer.encode(_chat_prompt(body.messages), self.config.model.vocab_size)
            limit = body.max_completion_tokens or body.max_tokens
            return await self._generate("chatcmpl", ids, body, limit, request, chat=True)

        return app

    def _mark_ready(self) -> None:
        self.ready = True
        log.info("Application startup complete.")

    def _check_model(self, model: str | None) -> JSONResponse | None:
        if model is None or model in (self.config.served_model_name, self.config.model.name):
            return None
        return error_body(
            f"The model `{model}` does not exist.", status=404, err_type="NotFoundError"
        )

    async def _generate(self, kind: str, ids: list[int], body: _GenerationParams,
                        max_tokens: int | None, request: Request, *, chat: bool) -> Response:
        engine = self._engine()
        if engine.crashed:
            return error_body(f"The engine is dead: {engine.crashed}", status=500,
                              err_type="InternalServerError")
        if not self.ready:
            return error_body("The engine is still loading.", status=503,
                              err_type="ServiceUnavailableError")
        request_id = f"{kind}-{uuid.uuid4().hex}"
        try:
            handle = engine.submit(request_id, ids, max_tokens, min_tokens=body.min_tokens,
                                   ignore_eos=body.ignore_eos)
        except RequestRejected as exc:
            return error_body(str(exc))
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                self._stream(handle, request_id, chat=chat, include_usage=include_usage,
                             token_ids=body.return_token_ids),
                media_type="text/event-stream",
            )
        words: list[str] = []
        reason: str | None = None
        try:
            while reason is None:
                event = await handle.events.get()
                words.extend(event.words)
                reason = event.finish_reason
        finally:
            engine.abort(request_id)
        if reason == "error":
            return error_body(engine.crashed or "engine failed", status=500,
                              err_type="InternalServerError")
        text = "".join(f" {w}" for w in words)
        usage = self._usage(handle)
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant",
                                                              "content": text},
                                      "finish_reason": reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                      "stop_reason": None}
            obj = "text_completion"
        return JSONResponse({"id": request_id, "object": obj, "created": int(time.time()),
                             "model": self.config.served_model_name, "choices": [choice],
                             "usage": usage})

    @staticmethod
    def _usage(handle: RequestHandle) -> dict[str, int]:
        req = handle.request
        return {"prompt_tokens": req.num_prompt, "completion_tokens": req.num_output,
                "total_tokens": req.num_prompt + req.num_output}

    async def _stream(self, handle: RequestHandle, request_id: str, *, chat: bool,
                      include_usage: bool, token_ids: bool = False) -> AsyncIterator[bytes]:
        engine = self._engine()
        head = json.dumps({"id": request_id,
                           "object": "chat.completion.chunk" if chat else "text_completion",
                           "created": int(time.time()),
                           "model": self.config.served_model_name},
                          separators=(",", ":"))[:-1]
        usage_tail = ',"usage":null}\n\n' if include_usage else "}\n\n"
        # Chunks are a fixed template around the new text: this runs for every token of
        # every stream, on the same event loop that keeps the engine's time.
        if chat:
            before, after = ',"choices":[{"index":0,"delta":{"content":', \
                ',"logprobs":null,"finish_reason":'
        else:
            before, after = ',"choices":[{"index":0,"text":', \
                ',"logprobs":null,"finish_reason":'
        closing = ',"stop_reason":null' if not chat else ""
        vocab = self.config.model.vocab_size

        def chunk(words: list[str], reason: str | None) -> bytes:
            finish = "null" if reason is None else f'"{reason}"'
            text = "".join(f" {w}" for w in words)
            ids = "" if not token_ids else \
                f',"token_ids":[{",".join(str(tokenizer.word_to_id(w, vocab)) for w in words)}]'
            return f"data: {head}{before}{json.dumps(text)}" \
                   f"{'}' if chat else ''}{after}{finish}{closing}{ids}}}]{usage_tail}".encode()

        first = True
        try:
            while True:
                event = await handle.events.get()
                if event.finish_reason == "error":
                    message = engine.crashed or "engine failed"
                    yield f"data: {json.dumps({'error': {'message': message}})}\n\n".encode()
                    return
                if chat and first:
                    yield (f"data: {head}"
                           ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                           f'"logprobs":null,"finish_reason":null}}]{usage_tail}').encode()
                first = False
                yield chunk(event.words, event.finish_reason)
                if event.finish_reason is not None:
                    break
            if include_usage:
                usage = json.dumps(self._usage(handle), separators=(",", ":"))
                yield f'data: {head},"choices":[],"usage":{usage}}}\n\n'.encode()
            yield b"data: [DONE]\n\n"
        finally:
            # A client that hangs up mid-stream frees its KV blocks, as in vLLM.
            engine.abort(request_id)


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(
        "%(levelname)s %(asctime)s [%(module)s.py] %(message)s", datefmt="%m-%d %H:%M:%S"
    ))
    root = logging.getLogger("slotune.workers.sim")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def serve_from_args(args: argparse.Namespace) -> int:
    """Validate, size memory, log vLLM's start-up lines, then serve until SIGTERM."""
    _configure_logging()
    # vLLM 0.32 prints its version in a banner here, and again in the engine core's
    # "Initializing a V1 LLM engine (v…) with config" line (one of the start-up lines).
    log.info("slotune simulated vLLM engine, version %s", SIM_ENGINE_VERSION)
    log.info("non-default args: %s", {k: v for k, v in vars(args).items() if v is not None})
    try:
        config = config_from_args(args)
        plan = plan_memory(config)
    except (EngineConfigError, ValueError) as exc:
        # vLLM dies at start-up with the exception's sentence at the end: a pydantic
        # ValidationError for an argument its config classes refuse, else (memory
        # sizing in the engine core) a ValueError after "EngineCore failed to start.".
        if isinstance(exc, EngineConfigError) and exc.config_class is not None:
            lines = exc.log_lines()
        else:
            log.error("EngineCore failed to start.")
            lines = [f"ValueError: {exc}"]
        print("\n".join(lines), file=sys.stderr, flush=True)
        return 1
    # vLLM would see these devices; the trial worker reads the line back as a fact.
    log.info("CUDA_VISIBLE_DEVICES=%s", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    for line in startup_log_lines(config, plan):
        log.info(line)
    delay = args.sim_startup_delay
    if delay is None:
        modelled = load_seconds(config, plan) + (
            0.0 if config.enforce_eager else graph_capture_seconds(config))
        delay = min(MAX_STARTUP_DELAY_S, modelled / config.time_scale)
    import uvicorn

    uv_server: uvicorn.Server | None = None

    def shut_down() -> None:
        if uv_server is not None:
            uv_server.should_exit = True

    server = SimServer(config, plan, startup_delay=max(0.0, delay), on_crash=shut_down)
    log.info("Starting vLLM server on http://%s:%d", args.host, args.port)

    # The stdlib loop: its timers never fire early (uvloop rounds sub-millisecond sleeps).
    uv_config = uvicorn.Config(server.app, host=args.host, port=args.port, log_level="warning",
                               access_log=False, timeout_graceful_shutdown=2, loop="asyncio")
    uv_server = uvicorn.Server(uv_config)
    try:
        uv_server.run()
    except KeyboardInterrupt:  # pragma: no cover - interactive stop
        return 0
    if server.engine is not None and server.engine.crashed:
        return 1
    return 0 if uv_server.started else 1
