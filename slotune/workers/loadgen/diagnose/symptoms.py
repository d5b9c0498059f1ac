"""Symptoms beside the wall: what the tuning playbook checks before blaming the engine.

The diagnosis (:mod:`slotune.workers.loadgen.diagnose.diagnosis`) names the one wall that binds.
These are the playbook's other symptoms; each changes what the next experiment should be, or says
tuning is not the answer:

* ``startup`` — start-up (weights, compile, graph capture) takes most of the trial: an
  ``--enforce-eager`` A/B tells compile from load, as a diagnostic only;
* ``client_bound`` — the load generator fell behind its schedule: the measurement is
  invalid, not a wall;
* ``tail_mixture`` — the p99 TTFT comes from one input-length bucket (the longest
  prompts): bucket by input length before blaming the engine;
* ``prefix_cache_low`` — the workload shares prefixes but few prompt tokens hit the cache
  (or caching is off): turn prefix caching on;
* ``errors`` — requests fail or time out: fix that first, no latency figure holds.

Each :class:`Symptom` carries its evidence numbers and the playbook's next step.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from slotune.workers.contracts import (
    SLO,
    KnobValue,
    PrefixRepetitionDataset,
    RandomDataset,
    Workload,
)
from slotune.workers.loadgen.diagnose.diagnosis import Diagnosis
from slotune.workers.loadgen.score.scoring import RequestMetrics, Score

if TYPE_CHECKING:  # annotations only: reading symptoms needs no HTTP client loaded
    from slotune.workers.loadgen.client import RequestRecord
    from slotune.workers.loadgen.runner import BenchmarkRun, SendLag

__all__ = ["STARTUP_SHARE", "Symptom", "symptoms", "with_symptoms"]

STARTUP_SHARE = 0.5
"""Start-up above this share of a trial's time is a symptom of its own."""
TAIL_FACTOR = 1.5
"""The longest-prompt bucket's median TTFT this many times the rest's: a mixture."""
_EDGES = (0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
"""Input-length buckets (tokens): powers of two."""
_MIN_TOP = 2
_MIN_REST = 5
PREFIX_HIT_LOW = 0.2
ERROR_RATE = 0.01


@dataclass(frozen=True, slots=True)
class Symptom:
    """One of the playbook's symptoms, seen in a run."""

    kind: str
    symptom: str
    evidence: dict[str, float | str | None]
    next_step: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def symptoms(*, records: Sequence[RequestRecord], per_request: Sequence[RequestMetrics | None],
             slo: SLO | None, workload: Workload, engine_flags: Mapping[str, KnobValue],
             send_lag: SendLag | None, prefix_hit_rate: float | None,
             boot_s: float | None, total_s: float | None) -> list[Symptom]:
    """Every symptom the run shows (``per_request`` aligned with ``records``)."""
    found = [
        _startup(boot_s, total_s),
        _client_bound(send_lag),
        _tail_mixture(records, per_request, slo),
        _prefix_cache(workload, engine_flags, prefix_hit_rate),
        _errors(records),
    ]
    return [s for s in found if s is not None]


def with_symptoms(diagnosis: Diagnosis | None, run: BenchmarkRun, score: Score, *,
                  slo: SLO | None, workload: Workload, engine_flags: Mapping[str, KnobValue],
                  boot_s: float | None, total_s: float | None) -> Diagnosis | None:
    """``diagnosis`` with the run's symptoms attached (both trial paths call this)."""
    if diagnosis is None:
        return None
    hit_rate = diagnosis.evidence.get("prefix_cache_hit_rate")
    found = symptoms(records=run.records, per_request=score.per_request, slo=slo,
                     workload=workload, engine_flags=engine_flags, send_lag=run.send_lag,
                     prefix_hit_rate=hit_rate, boot_s=boot_s, total_s=total_s)
    return replace(diagnosis, symptoms=[s.to_dict() for s in found])


def _startup(boot_s: float | None, total_s: float | None) -> Symptom | None:
    if not boot_s or not total_s or boot_s / total_s <= STARTUP_SHARE:
        return None
    share = boot_s / total_s
    return Symptom(
        "startup", f"start-up took {share:.0%} of the trial ({boot_s:.0f} s of {total_s:.0f} s)",
        {"boot_s": boot_s, "total_s": total_s, "startup_share": share},
        "tell compile from weight loading with an --enforce-eager A/B (a diagnostic only: "
        "eager mode usually costs decode speed); measure longer per boot (capacity mode) "
        "rather than tuning start-up")


def _client_bound(send_lag: SendLag | None) -> Symptom | None:
    if send_lag is None or not send_lag.client_bound:
        return None
    return Symptom(
        "client_bound", f"the load generator fell behind its schedule (send lag p99 "
                        f"{send_lag.p99_ms:.1f} ms, tolerance {send_lag.tolerance_ms:.1f} ms)",
        {"send_lag_p99_ms": send_lag.p99_ms, "tolerance_ms": send_lag.tolerance_ms},
        "measurement invalid, not a wall: give the client its own cores (or machine) and "
        "measure again before reading any latency")


def _tail_mixture(records: Sequence[RequestRecord], per_request: Sequence[RequestMetrics | None],
                  slo: SLO | None) -> Symptom | None:
    """The slowest requests all come from the longest input-length bucket (powers of two,
    as per-bucket latency tables are usually cut), which is far slower than the rest."""
    pairs = [(r.prompt_len, m.ttft * 1000.0) for r, m in zip(records, per_request, strict=True)
             if m is not None]
    if len(pairs) < _MIN_REST + _MIN_TOP:
        return None
    percentile = slo.percentile if slo is not None else 99.0
    ttfts = np.array([t for _, t in pairs])
    buckets = np.array([bisect.bisect_right(_EDGES, n) - 1 for n, _ in pairs])
    overall = float(np.percentile(ttfts, percentile))
    slowest = buckets[ttfts >= overall]
    top = int(buckets.max())
    if (slowest == top).mean() < 0.8:
        return None  # the tail is spread over lengths: not a mixture
    in_top = buckets == top
    if in_top.sum() < _MIN_TOP or (~in_top).sum() < _MIN_REST:
        return None
    top_p = float(np.percentile(ttfts[in_top], percentile))
    rest_p = float(np.percentile(ttfts[~in_top], percentile))
    # Medians, not tails, tell the buckets apart: a long prefill also delays the short
    # requests queued behind it, so the rest's own tail carries the long ones' mark.
    top_median = float(np.median(ttfts[in_top]))
    rest_median = float(np.median(ttfts[~in_top]))
    target = slo.ttft if slo is not None else None
    if (target is not None and overall < 0.8 * target) or top_median < TAIL_FACTOR * rest_median:
        return None
    low = _EDGES[top]
    span = f"{low:g}+" if top + 1 >= len(_EDGES) else f"{low:g}–{_EDGES[top + 1] - 1:g}"
    share = float(in_top.mean())
    return Symptom(
        "tail_mixture",
        f"p{percentile:g} TTFT {overall:.0f} ms comes from the longest prompts: the "
        f"{span}-token bucket ({share:.0%} of requests) has p{percentile:g} {top_p:.0f} ms "
        f"(median {top_median:.0f} ms), the rest p{percentile:g} {rest_p:.0f} ms (median "
        f"{rest_median:.0f} ms)",
        {"p_ttft_ms": overall, "bucket": span, "bucket_share": share,
         "bucket_p_ttft_ms": top_p, "rest_p_ttft_ms": rest_p,
         "bucket_median_ttft_ms": top_median, "rest_median_ttft_ms": rest_median,
         "ttft_target_ms": target},
        f"bucket by input length before blaming the engine: the {span}-token prompts set the "
        "tail — give them their own SLO or route, or cap the prefill chunk "
        "(--max-num-batched-tokens) so they stop delaying the short ones")


def _prefix_cache(workload: Workload, engine_flags: Mapping[str, KnobValue],
                  hit_rate: float | None) -> Symptom | None:
    dataset = workload.dataset
    shared = (isinstance(dataset, PrefixRepetitionDataset) and dataset.prefix_len > 0) or (
        isinstance(dataset, RandomDataset) and dataset.prefix_len > 0)
    if not shared:
        return None
    caching = engine_flags.get("enable_prefix_caching", True) is not False
    if caching and (hit_rate is None or hit_rate >= PREFIX_HIT_LOW):
        return None
    prefix = getattr(dataset, "prefix_len", 0)
    rate = "caching is off" if not caching else f"hit rate {hit_rate:.0%}"
    return Symptom(
        "prefix_cache_low",
        f"the workload shares {prefix}-token prefixes but the prefix cache does not serve "
        f"them ({rate})",
        {"prefix_len": float(prefix), "prefix_cache_hit_rate": hit_rate,
         "enable_prefix_caching": "true" if caching else "false"},
        "turn prefix caching on (--enable-prefix-caching) so shared prefixes are prefilled "
        "once" if not caching else
        "the cache evicts the shared prefixes: give it room (--gpu-memory-utilization ↑, "
        "fp8 KV) or route requests that share a prefix to the same replica")


def _errors(records: Sequence[RequestRecord]) -> Symptom | None:
    if not records:
        return None
    failed = [r for r in records if not r.success]
    rate = len(failed) / len(records)
    if rate <= ERROR_RATE:
        return None
    timeouts = sum("timeout" in (r.error or "").lower() for r in failed)
    return Symptom(
        "errors", f"{rate:.1%} of requests failed ({len(failed)} of {len(records)}, "
                  f"{timeouts} timeouts)",
        {"error_rate": rate, "failed": float(len(failed)), "timeouts": float(timeouts)},
        "fix the errors first (the engine's log says why): no latency or goodput figure "
        "holds while requests fail")
