"""The API for a test: its settings, the type of the clients its fixtures make, and the API
as a real process (``slotune api``, ``uvicorn --factory``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager

import httpx
from pydantic import SecretStr

from slotune.tuner.settings import ApiSettings, DatabaseSettings, Settings
from tests.support.api_data import TOKEN

__all__ = ["ClientFactory", "api_env", "serving", "settings_for"]

ClientFactory = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]
"""``async with make_client(token=…, read_token=…) as client`` (the API tests' fixture)."""


def settings_for(store_url: str, *, token: str | None = TOKEN, read_token: str | None = None,
                 max_body_bytes: int = 1 << 20) -> Settings:
    return Settings(
        database=DatabaseSettings(url=store_url),
        api=ApiSettings(token=SecretStr(token) if token is not None else None,
                        read_token=SecretStr(read_token) if read_token is not None else None,
                        max_body_bytes=max_body_bytes),
    )


def api_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLOTUNE_API") and k != "DATABASE_URL"}
    return {**env, **extra}


@contextmanager
def serving(argv: list[str], env: dict[str, str], port: int) -> Iterator[httpx.Client]:
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, process.communicate()[0]
                try:
                    client.get("/api/v1/health")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the API did not answer within 30 s"
                    time.sleep(0.2)
            yield client
    finally:
        process.send_signal(signal.SIGINT)  # uvicorn's graceful stop
        try:
            output = process.communicate(timeout=15)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            output = process.communicate()[0]
        assert TOKEN not in output  # the token never reaches the process's output
