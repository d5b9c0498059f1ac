"""Where the real vLLM engine (CPU build) and its tiny model live, for the tests that use it.

``bash scripts/setup_vllm_cpu.sh`` makes both (``.vllm/`` in the checkout; CI runs it
first). ``SLOTUNE_VLLM_BIN``, ``SLOTUNE_VLLM_MODEL`` and ``SLOTUNE_VLLM_MOE_MODEL``
point elsewhere. A test marked
``vllm`` that finds neither fails and says how to make them: a missing engine is a
missing install step, not a reason to skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slotune.workers.contracts import SLO, TrialSpec, TrialTimeouts, Workload
from slotune.workers.engines import EngineFailure, make_engine
from tests.support.paths import REPO

KV_CACHE_BYTES = 256 << 20
"""Keeps one CPU server near 2 GB of memory (two run at once on these machines)."""
SERVE_ARGS: dict[str, Any] = {"load_format": "dummy", "enforce_eager": True,
                              "kv_cache_memory_bytes": KV_CACHE_BYTES, "max_model_len": 1024}
"""The tiny model has random weights (``dummy``); eager mode starts in seconds, not minutes."""
EXTRA_ARGS = ("kv_cache_memory_bytes",)
STARTUP_S = 240.0


def vllm_binary() -> str:
    path = os.environ.get("SLOTUNE_VLLM_BIN") or str(REPO / ".vllm" / "venv" / "bin" / "vllm")
    if not Path(path).is_file():
        pytest.fail(f"no vLLM engine at {path}: run `bash scripts/setup_vllm_cpu.sh` "
                    "(or set SLOTUNE_VLLM_BIN)", pytrace=False)
    return path


def tiny_model() -> str:
    path = os.environ.get("SLOTUNE_VLLM_MODEL") or str(REPO / ".vllm" / "models" / "tiny-llama")
    if not (Path(path) / "config.json").is_file():
        pytest.fail(f"no tiny model at {path}: run `bash scripts/setup_vllm_cpu.sh` "
                    "(or set SLOTUNE_VLLM_MODEL)", pytrace=False)
    return path


def tiny_moe_model() -> str:
    """The tiny mixture-of-experts model (Qwen3-MoE, 4 experts, 2 per token)."""
    path = os.environ.get("SLOTUNE_VLLM_MOE_MODEL") or str(
        REPO / ".vllm" / "models" / "tiny-qwen3-moe")
    if not (Path(path) / "config.json").is_file():
        pytest.fail(f"no tiny MoE model at {path}: run `bash scripts/setup_vllm_cpu.sh` "
                    "(or set SLOTUNE_VLLM_MOE_MODEL)", pytrace=False)
    return path


def serve_spec(run_id: str, max_model_len: int = 2048) -> TrialSpec:
    """A spec of the tiny model on the CPU build: what the vLLM adapter boots for a test
    that needs a server of its own (not a trial's)."""
    return TrialSpec(run_id=run_id, engine="vllm", model=tiny_model(), device="cpu",
                     engine_args={**SERVE_ARGS, "max_model_len": max_model_len},
                     allowed_extra_args=EXTRA_ARGS, engine_binary=vllm_binary(),
                     workload=Workload(), slo=SLO(ttft=1000),
                     timeouts=TrialTimeouts(startup_s=STARTUP_S))


@contextlib.contextmanager
def serving(folder: Path, max_model_len: int = 2048) -> Iterator[str]:
    """A real ``vllm serve`` of the tiny model, booted by the vLLM adapter as a trial's
    would be (its argv, environment and process group); yields its base URL, stops it
    after."""
    spec = serve_spec(f"serving-{folder.name}", max_model_len)
    with make_engine(spec, folder) as engine:
        try:
            asyncio.run(engine.boot(STARTUP_S))
        except EngineFailure as exc:
            pytest.fail(f"vllm serve did not come up ({exc.failure}): {exc.message}\n"
                        f"{(exc.log_tail or '')[-3000:]}", pytrace=False)
        yield engine.base_url
