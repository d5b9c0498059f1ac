"""Arrival schedules: when each request should start, from a seeded RNG and nothing else.

This layer only answers "when does request i start" (offsets from the run's start, in
engine seconds); the runner turns them into wall-clock targets (compressed by the time
scale) and the client sends. Gamma gaps follow ``vllm bench serve``: shape =
burstiness, scale = 1 / (rate · burstiness), so the mean rate is ``rate`` for any
burstiness; the first request starts at 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from workers.contracts import Arrivals

__all__ = ["arrival_offsets"]

_ARRIVAL_STREAM = 2


def arrival_offsets(
    n: int,
    arrivals: Arrivals,
    seed: int,
    trace_offsets: Sequence[float | None] | None = None,
) -> list[float]:
    """Start offsets in engine seconds, one per request, the earliest at 0.

    ``trace_offsets``, when every entry is set, win over the arrival process (kept in the
    trace's order; requests are sent in that order).
    """
    if n <= 0:
        return []
    if trace_offsets is not None and all(o is not None for o in trace_offsets[:n]):
        offsets = [float(o) for o in trace_offsets[:n] if o is not None]
        first = min(offsets)  # a trace's clock may not start at 0; ours does
        return [o - first for o in offsets]
    rate = arrivals.request_rate
    if math.isinf(rate):
        return [0.0] * n
    if arrivals.process == "constant":
        gaps = np.full(n - 1, 1.0 / rate)
    else:
        rng = np.random.default_rng([seed, _ARRIVAL_STREAM])
        shape = arrivals.burstiness
        gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]
