"""The simulated engine's memory and build time for a model with a huge KV block count.

Issue 38: a tiny model (hidden size 8, one layer: 512 bytes of KV a block) has 150
million KV blocks on an H100 and 250 million on an H200; a block pool with a Python list
per block took 2.4 GB and 4.0 GB of RSS, and building each engine took seconds. Target:
the simulated engine's RSS for the tiny model on an H200 under 300 MB.

Two figures per GPU:

1. In process: the time to build the engine (its config and :class:`EngineCore`) and
   what that allocates (tracemalloc's peak).
2. As a real server (``python -m slotune.workers.sim serve``, what a trial boots): its peak RSS
   (``VmHWM``) after start-up and a few streamed requests.

Usage: ``python benchmarks/sim_memory.py [--gpus h100-sxm,h200] [--requests 20]``.
Exits 1 when a server's peak RSS is over the target.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import httpx

from slotune.workers.engines.process import free_port
from slotune.workers.sim.config import build_config
from slotune.workers.sim.core import EngineCore

TINY_MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "intermediate_size": 16, "vocab_size": 512, "max_position_embeddings": 2048,
              "torch_dtype": "bfloat16"}
TARGET_RSS_MB = 300.0


def build(model_dir: Path, gpu: str) -> tuple[int, float, float]:
    """(KV blocks, seconds to build the engine, MiB allocated while building it)."""
    tracemalloc.start()
    began = time.perf_counter()
    core = EngineCore(build_config(str(model_dir), sim_gpu=gpu))
    seconds = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return core.plan.num_blocks, seconds, peak / 2**20


def server_peak_rss_mb(model_dir: Path, gpu: str, requests: int) -> float:
    """The simulated engine's peak RSS as a server process, after ``requests`` requests."""
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"sim-memory-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slotune.workers.sim", "serve", str(model_dir), "--sim-gpu", gpu,
             "--port", str(port), "--sim-startup-delay", "0"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the simulated engine exited {proc.returncode}: "
                                 f"{log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the simulated engine was not healthy in 60 s: {log}")
            time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=60) as client:
            for i in range(requests):
                body = {"model": str(model_dir), "prompt": f"request {i} " * 64,
                        "max_tokens": 32, "ignore_eos": True}
                client.post("/v1/completions", json=body).raise_for_status()
        return _vm_hwm_mb(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc (Linux only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="h100-sxm,h200")
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    over = False
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "tiny"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(TINY_MODEL))
        for gpu in args.gpus.split(","):
            blocks, seconds, allocated = build(model_dir, gpu)
            rss = server_peak_rss_mb(model_dir, gpu, args.requests)
            verdict = "NOT MET" if rss > TARGET_RSS_MB else "met"
            over |= rss > TARGET_RSS_MB
            print(f"tiny model on {gpu}: {blocks:,} KV blocks; engine built in "
                  f"{seconds * 1e3:.1f} ms, {allocated:.2f} MiB allocated; server peak RSS "
                  f"{rss:.0f} MB after {args.requests} requests "
                  f"(target < {TARGET_RSS_MB:.0f} MB: {verdict})")
    raise SystemExit(1 if over else 0)


if __name__ == "__main__":
    main()
