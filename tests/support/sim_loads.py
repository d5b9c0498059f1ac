"""Shared helpers for the simulated engine's tests: seeded synthetic loads."""

from __future__ import annotations

import random

import numpy as np

from slotune.workers.sim.virtual_time import SimRequestSpec, SimulationResult, random_prompt


def poisson_load(n: int, rate: float, input_len: int, output_len: int, *, seed: int = 0,
                 prefix: list[int] | None = None) -> list[SimRequestSpec]:
    """``n`` requests arriving as a Poisson process (``rate`` = inf: all at once)."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(n):
        if rate != float("inf"):
            t += rng.expovariate(rate)
        out.append(SimRequestSpec(t, random_prompt(rng, input_len, prefix=prefix or ()),
                                  output_len))
    return out


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def ttfts(result: SimulationResult) -> list[float]:
    return [r.ttft for r in result.requests if r.ttft is not None]


def tpots(result: SimulationResult) -> list[float]:
    return [r.tpot for r in result.requests if r.tpot is not None]


def itls(result: SimulationResult) -> list[float]:
    return [gap for r in result.requests for gap in r.itls]


def throughput(result: SimulationResult) -> float:
    """Completed requests per engine second."""
    return len([r for r in result.requests if r.finish_time is not None]) / result.duration
