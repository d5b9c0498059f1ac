"""Arrival schedules: when each request should start, from a seeded RNG and nothing else.

This layer only answers "when does request i start" (offsets from the run's start, in
engine seconds); the runner turns them into wall-clock targets (compressed by the time
scale) and the client sends. Gamma gaps follow ``vllm bench serve``: shape =
burstiness, scale = 1 / (rate · burstiness), so the mean rate is ``rate`` for any
burstiness, and the schedule is rescaled to last exactly ``n / rate`` as vLLM's is. Under
a ramp-up each gap is drawn at the rate of the request it leads to (vLLM's per-request
rate).

A trace's own timestamps win over the arrival process. At ``request_rate: inf`` they are
replayed as recorded; at a finite rate (a workload's, or a capacity probe's) they are
rescaled — every gap times one factor, so the bursts and lulls keep their shape — to
span ``(n − 1) / rate``, the span of ``n`` evenly spaced requests at that rate: the
trace's mean rate becomes the rate asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from slotune.workers.contracts import Arrivals

__all__ = ["arrival_offsets", "request_rates"]

_ARRIVAL_STREAM = 2


def arrival_offsets(
    n: int,
    arrivals: Arrivals,
    seed: int,
    trace_offsets: Sequence[float | None] | None = None,
) -> list[float]:
    """Start offsets in engine seconds, one per request, in order.

    ``trace_offsets``, when every entry is set, win over the arrival process (kept in the
    trace's order, the earliest moved to 0), rescaled to a finite ``request_rate`` (module
    docstring; a trace whose requests all share one timestamp stays one burst). Otherwise
    ``vllm bench serve``'s schedule: request ``i`` waits ``i + 1`` gaps (the first request
    waits one too), and at a fixed rate the offsets are rescaled so the last is exactly
    ``n / rate`` — the mean rate is the rate asked for, whatever the draw (vLLM's
    normalisation). A ramp-up is not
    rescaled; ``constant`` arrivals start at 0 and are ``1 / rate`` apart.
    """
    if n <= 0:
        return []
    if trace_offsets is not None and all(o is not None for o in trace_offsets[:n]):
        offsets = [float(o) for o in trace_offsets[:n] if o is not None]
        first = min(offsets)  # a trace's clock may not start at 0; ours does
        shifted = [o - first for o in offsets]
        span = max(shifted)
        rate = arrivals.request_rate
        if arrivals.ramp_up is None and math.isfinite(rate) and span > 0:
            factor = (len(shifted) - 1) / rate / span
            return [o * factor for o in shifted]
        return shifted
    rates = np.asarray(request_rates(n, arrivals))
    if np.isinf(rates).all():
        return [0.0] * n
    if arrivals.process == "constant":
        return [float(x) for x in np.arange(n) / rates]
    rng = np.random.default_rng([seed, _ARRIVAL_STREAM])
    shape = arrivals.burstiness
    delays = np.cumsum(rng.gamma(shape=shape, scale=1.0 / (rates * shape), size=n))
    if arrivals.ramp_up is None and delays[-1] > 0:
        delays *= (n / arrivals.request_rate) / delays[-1]
    return [float(d) for d in delays]


def request_rates(n: int, arrivals: Arrivals) -> list[float]:
    """The rate (req/s) each of ``n`` requests arrives at: the ramp-up's, else the fixed one.

    Request ``i``'s gap from request ``i − 1`` is drawn at rate ``i``'s.
    """
    if arrivals.ramp_up is None:
        return [arrivals.request_rate] * n
    return [arrivals.ramp_up.rate(i, n) for i in range(n)]
