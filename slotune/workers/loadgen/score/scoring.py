"""Scoring: pure functions from recorded timings (+ SLO) to metrics, goodput, gate, objective.

Definitions follow ``vllm bench serve`` (``calculate_metrics``) to the letter:

* TTFT = first chunk carrying choices − start; ITL = gaps between such chunks;
  E2EL = last such chunk − start; output tokens = ``usage.completion_tokens``;
  TPOT = (E2EL − TTFT) / (output_tokens − 1), only for requests with > 1 token;
* summaries are over successful requests; an empty list reads as 0 (vLLM's
  ``np.mean(x or 0)``); percentiles use numpy's default (linear) method;
* throughputs count successful requests and their prompt + output tokens.

Ours on top (DESIGN §3):

* a request is *good* when each of its metrics is within every SLO target, TPOT
  counting as 0 when it made ≤ 1 token; its ITL is its largest gap (every gap within
  target — vLLM's ``--goodput`` has no ITL, this is the literal reading);
* the *gate*: the SLO percentile of each targeted metric within target. A failed
  request counts as an infinitely slow one for the gate (vLLM's summaries leave
  failures out, which would let a run that drops requests pass);
* objective = request_goodput if the gate holds, else 0.0; constraint per target =
  observed/target − 1 (≤ 0 feasible), capped at :data:`CONSTRAINT_CAP` so it stays finite.

Inputs are in engine time (the runner has already applied the time scale).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from slotune.workers.contracts import SLO, SLO_METRICS, SLOMetric
from slotune.workers.loadgen.score.gate import CONSTRAINT_CAP, GateCheck, slo_gate

if TYPE_CHECKING:  # annotations only: scoring needs no HTTP client at run time
    from slotune.workers.loadgen.client import RequestRecord

__all__ = [
    "CONSTRAINT_CAP",
    "DEFAULT_PERCENTILES",
    "PROBE_PERCENTILES",
    "GateCheck",
    "MetricSummary",
    "RequestMetrics",
    "Score",
    "allowed_violations",
    "gate_percentiles",
    "gate_values",
    "percentile",
    "percentile_key",
    "request_metrics",
    "score",
    "summarize",
    "violated_metrics",
]

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
PROBE_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
"""The percentiles a capacity probe keeps of each metric (and its SLO's own)."""
_MS = 1000.0


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """One successful request's metrics in seconds (TPOT None when ≤ 1 output token)."""

    ttft: float
    e2el: float
    itls: tuple[float, ...]
    tpot: float | None
    output_tokens: int

    def value(self, metric: SLOMetric) -> float:
        """The request's own value of ``metric`` for the goodput rule (seconds)."""
        if metric == "ttft":
            return self.ttft
        if metric == "e2el":
            return self.e2el
        if metric == "tpot":
            return 0.0 if self.tpot is None else self.tpot
        return max(self.itls, default=0.0)


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """mean / median / std and percentiles of one metric, in ms."""

    mean: float
    median: float
    std: float
    percentiles: dict[float, float]


@dataclass(frozen=True, slots=True)
class Score:
    """Everything computed from one run's records."""

    num_requests: int
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    good_requests: int
    request_goodput: float
    token_goodput: float
    summaries: dict[str, MetricSummary]
    gate: bool
    gate_reason: str
    checks: list[GateCheck]
    objective: float
    per_request: list[RequestMetrics | None] = field(repr=False, default_factory=list)

    @property
    def constraints(self) -> dict[str, float]:
        return {c.metric: c.constraint for c in self.checks}

    @property
    def worst_ratio(self) -> float | None:
        """Largest observed/target over the targets (smaller = more headroom)."""
        if not self.checks:
            return None
        return max(c.constraint for c in self.checks) + 1.0


def request_metrics(record: RequestRecord) -> RequestMetrics | None:
    """The metrics of one record, or None if it failed."""
    chunks = record.timings.chunks
    if not record.success or not chunks:
        return None
    start = record.timings.start
    ttft = chunks[0] - start
    e2el = chunks[-1] - start
    itls = tuple(b - a for a, b in itertools.pairwise(chunks))
    out = record.output_tokens if record.output_tokens is not None else len(chunks)
    tpot = (e2el - ttft) / (out - 1) if out > 1 else None
    return RequestMetrics(ttft, e2el, itls, tpot, out)


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile, also correct when values hold ``inf``.

    ``np.percentile`` yields NaN when it interpolates against ``inf`` with weight 0.
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    if math.isfinite(ordered[-1]):
        return float(np.percentile(ordered, q))
    pos = q / 100.0 * (len(ordered) - 1)
    lo, frac = math.floor(pos), pos - math.floor(pos)
    if frac == 0.0:
        return float(ordered[lo])
    a, b = ordered[lo], ordered[lo + 1]
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return float(a + (b - a) * frac)


def allowed_violations(n: int, q: float) -> int:
    """How many of ``n`` values may exceed a target while the q-th percentile can still hold.

    With linear interpolation the percentile sits between sorted values ⌊q(n−1)⌋ and the
    next; once ``n − ⌊q(n−1)⌋`` values exceed the target the lower of the two does, so
    the percentile does too, whatever the remaining values are.
    """
    if n <= 0:
        return 0
    return n - math.floor(q / 100.0 * (n - 1)) - 1


def violated_metrics(record: RequestRecord, slo: SLO) -> list[SLOMetric]:
    """The per-request metrics (TTFT, TPOT, E2EL) of ``record`` that break ``slo``.

    A failed request breaks them all. ITL is pooled over gaps, not per request, so it is
    left out (early abort stays conservative).
    """
    targets = {m: t for m, t in slo.targets.items() if m != "itl"}
    metrics = request_metrics(record)
    if metrics is None:
        return list(targets)
    return [m for m, t in targets.items() if metrics.value(m) * _MS > t]


def summarize(values_s: Sequence[float], percentiles: Iterable[float]) -> MetricSummary:
    """mean / median / std / percentiles in ms of values in seconds (empty reads as 0)."""
    ms = [v * _MS for v in values_s]
    if not ms:
        return MetricSummary(0.0, 0.0, 0.0, {p: 0.0 for p in percentiles})
    return MetricSummary(
        mean=float(np.mean(ms)),
        median=float(np.median(ms)),
        std=float(np.std(ms)),
        percentiles={p: float(np.percentile(ms, p)) for p in percentiles},
    )


def gate_values(
    metric: SLOMetric, per_request: Sequence[RequestMetrics | None]
) -> list[float]:
    """Values (s) the gate's percentile is taken over; a failed request counts as inf."""
    out: list[float] = []
    for m in per_request:
        if m is None:
            out.append(math.inf)
        elif metric == "itl":
            out.extend(m.itls)
        elif metric == "tpot":
            if m.tpot is not None:
                out.append(m.tpot)
        else:
            out.append(m.value(metric))
    return out


def percentile_key(q: float) -> str:
    """How a stored percentile is named: ``p99``, ``p99.9``."""
    return f"p{q:g}"


def gate_percentiles(per_request: Sequence[RequestMetrics | None],
                     percentiles: Iterable[float]) -> dict[str, dict[str, float | None]]:
    """Per metric, the ``percentiles`` (ms) over exactly the values the gate reads (a
    failed request infinitely slow: None), so a stored run can be gated under another SLO
    of these percentiles without its records: the same numbers :func:`score` compares."""
    out: dict[str, dict[str, float | None]] = {}
    qs = sorted(set(percentiles))
    for metric in SLO_METRICS:
        values = gate_values(metric, per_request)
        row: dict[str, float | None] = {}
        for q in qs:
            observed = _percentile_ms(values, q)
            row[percentile_key(q)] = None if math.isinf(observed) else observed
        out[metric] = row
    return out


def _percentile_ms(values_s: list[float], q: float) -> float:
    """The ``q``-th percentile of gate values (seconds) in ms; 0 for no values."""
    return percentile(values_s, q) * _MS if values_s else 0.0


def score(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo: SLO | None = None,
    percentiles: Iterable[float] = DEFAULT_PERCENTILES,
    *,
    aborted: str | None = None,
) -> Score:
    """Score measured ``records`` (warm-up excluded by the caller) over ``duration_s``.

    ``aborted`` (the early-abort reason) fails the gate and zeroes the objective.
    """
    slo = slo or SLO()
    pcts = sorted({*DEFAULT_PERCENTILES, *percentiles, slo.percentile})
    per_request = [request_metrics(r) for r in records]
    ok = [(r, m) for r, m in zip(records, per_request, strict=True) if m is not None]
    completed = len(ok)
    duration = duration_s if duration_s > 0 else math.nan
    total_in = sum(r.prompt_len for r, _ in ok)
    total_out = sum(m.output_tokens for _, m in ok)
    targets = slo.targets
    good = [m for _, m in ok if all(m.value(k) * _MS <= t for k, t in targets.items())]
    good_tokens = sum(m.output_tokens for m in good)
    summaries = {
        "ttft": summarize([m.ttft for _, m in ok], pcts),
        "tpot": summarize([m.tpot for _, m in ok if m.tpot is not None], pcts),
        "itl": summarize([g for _, m in ok for g in m.itls], pcts),
        "e2el": summarize([m.e2el for _, m in ok], pcts),
    }
    observed = {k: _percentile_ms(gate_values(k, per_request), slo.percentile)
                for k in targets}
    gate_of_run = slo_gate(slo, observed, requests=len(records),
                           failed=len(records) - completed)
    checks = list(gate_of_run.checks)
    if aborted is not None:
        gate, reason = False, f"early abort: {aborted}"
    elif gate_of_run.outcome == "none_completed":
        gate, reason = False, "no request completed successfully"
    elif gate_of_run.outcome == "targets_broken":
        gate, reason = False, gate_of_run.broken_reason
    else:
        gate, reason = True, f"all targets met ({slo})" if targets else "no SLO targets"

    def rate(x: float) -> float:
        value = x / duration
        return 0.0 if math.isnan(value) else float(value)

    request_goodput = rate(len(good))
    return Score(
        num_requests=len(records),
        completed=completed,
        failed=len(records) - completed,
        duration_s=duration_s,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=rate(completed),
        output_throughput=rate(total_out),
        total_token_throughput=rate(total_in + total_out),
        good_requests=len(good),
        request_goodput=request_goodput,
        token_goodput=rate(good_tokens),
        summaries=summaries,
        gate=gate,
        gate_reason=reason,
        checks=checks,
        objective=request_goodput if gate else 0.0,
        per_request=per_request,
    )


