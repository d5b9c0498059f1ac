"""How fast the simulated engine runs, in the two figures issue 2 sets targets for.

1. Virtual time: how many times faster than real time ``simulate`` runs 2,000 requests
   of the seed's load (Qwen2.5-7B on one RTX 4090, 512 in / 128 out, Poisson 20 req/s).
   The ratio is engine seconds simulated per wall second (best of ``--repeat`` runs, as
   this machine is noisy). Target: ≥ 1000×.
2. Real time: the real-time driver's step-timing lag p99 (how late the engine wakes up
   after each modelled step) while a streaming client on this machine drives the same
   load at the server. Read from the server's ``/sim/stats``. Target: ≤ 2 ms.

Usage: ``python benchmarks/sim_speed.py [--requests 2000] [--live-requests 400]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from slotune.workers.sim.config import build_config
from slotune.workers.sim.virtual_time import SimRequestSpec, random_prompt, simulate

MODEL = "Qwen/Qwen2.5-7B-Instruct"
GPU = "rtx4090"
VOCAB_WORDS = [f"tok{i}" for i in range(5000)]


def seed_load(n: int, rate: float, seed: int = 0) -> list[SimRequestSpec]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(SimRequestSpec(t, random_prompt(rng, 512), 128))
    return out


def virtual_time_speedup(n: int, repeat: int) -> tuple[float, float, float]:
    """(best speed-up, engine seconds simulated, best wall seconds)."""
    config = build_config(MODEL, sim_gpu=GPU)
    load = seed_load(n, 20.0)
    simulate(config, load[:20])  # warm caches (output-token table, imports)
    best_wall, engine_s = float("inf"), 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        result = simulate(config, load)
        wall = time.perf_counter() - start
        engine_s = result.duration
        best_wall = min(best_wall, wall)
    return engine_s / best_wall, engine_s, best_wall


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _drive(base_url: str, n: int, rate: float, seed: int = 1) -> int:
    """Send ``n`` streaming requests with Poisson arrivals; returns how many completed."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        async def one(delay: float) -> bool:
            await asyncio.sleep(delay)
            prompt = " ".join(rng.choice(VOCAB_WORDS) for _ in range(512))
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 128, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            async with client.stream("POST", "/v1/completions", json=body) as response:
                async for _ in response.aiter_lines():
                    pass
                return response.status_code == 200

        t, delays = 0.0, []
        for _ in range(n):
            t += rng.expovariate(rate)
            delays.append(t)
        done = await asyncio.gather(*(one(d) for d in delays))
    return sum(done)


def real_time_lag(n: int, rate: float) -> dict[str, float]:
    port = _free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"sim-speed-{port}.log"
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slotune.workers.sim", "serve", MODEL, "--sim-gpu", GPU,
             "--port", str(port), "--sim-startup-delay", "0"],
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base_url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        completed = asyncio.run(_drive(base_url, n, rate))
        stats = httpx.get(f"{base_url}/sim/stats").json()
        return {"completed": completed, "steps": stats["num_steps"],
                "lag_p50_ms": stats["lag_p50_s"] * 1e3, "lag_p99_ms": stats["lag_p99_s"] * 1e3,
                "lag_max_ms": stats["lag_max_s"] * 1e3}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--live-requests", type=int, default=400,
                        help="requests for the real-time lag run (0 skips it)")
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()

    speedup, engine_s, wall = virtual_time_speedup(args.requests, args.repeat)
    print(f"virtual-time core: {args.requests} requests = {engine_s:.1f} engine s in "
          f"{wall * 1e3:.0f} ms wall -> {speedup:.0f}x real time (target >= 1000x)")
    if args.live_requests:
        lag = real_time_lag(args.live_requests, args.rate)
        print(f"real-time driver: {lag['completed']:.0f} streamed requests at {args.rate:g} "
              f"req/s, {lag['steps']:.0f} steps: lag p50 {lag['lag_p50_ms']:.2f} ms, "
              f"p99 {lag['lag_p99_ms']:.2f} ms, max {lag['lag_max_ms']:.2f} ms "
              f"(target p99 <= 2 ms)")


if __name__ == "__main__":
    main()
