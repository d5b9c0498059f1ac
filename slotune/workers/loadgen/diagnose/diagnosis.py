"""Diagnosis: which wall binds, from the scraped metrics and the scored run (DESIGN §6).

The seed's decision tree, with one change of order: the KV check comes first. A KV pool
that is full and preempting also leaves requests waiting (they cannot be admitted), and
the seed's tree, asking "is the queue deep?" first, would call that a capacity problem
to solve with replicas when a knob (gpu_memory_utilization, max_model_len, fp8 KV)
moves it. So:

1. **kv** — KV usage near 1 and preemptions (or admission blocked with the pool full);
2. **queue** — waiting deep and growing (or queueing dominates TTFT): past the knee,
   add replicas / route, tuning won't help;
3. **prefill** — TTFT near/over target with prefill the larger part of it;
4. **decode** — TPOT/ITL near/over target;
5. **limit** — nothing above: at the hardware limit for this workload.

"Near" is :data:`PRESSURE` of the target. Every verdict carries its evidence numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from slotune.workers.contracts import SLO
from slotune.workers.loadgen.score.scoring import Score
from slotune.workers.loadgen.scrape import ScrapeSummary

__all__ = ["KNOBS", "PRESSURE", "Diagnosis", "Wall", "diagnose"]

Wall = Literal["kv", "queue", "prefill", "decode", "limit"]

PRESSURE = 0.8
KV_FULL = 0.9
WAITING_DEEP = 2.0
PREFILL_SHARE = 0.5
QUEUE_SHARE = 0.5

KNOBS: dict[Wall, list[str]] = {
    "kv": [
        "--gpu-memory-utilization ↑ (bigger KV pool, if VRAM allows)",
        "--max-model-len ↓ (caps one request's KV)",
        "--kv-cache-dtype fp8 (halves KV bytes)",
    ],
    "queue": [
        "add replicas / route traffic (capacity, not tuning)",
        "lower the request rate to the knee (capacity mode finds it)",
    ],
    "prefill": [
        "--max-num-batched-tokens (smaller chunks → lower TTFT; larger → more prefill throughput)",
        "--enable-prefix-caching (reuse shared prefixes)",
    ],
    "decode": [
        "--max-num-seqs (batch width: throughput vs TPOT)",
        "--quantization (fewer weight bytes per token)",
        "--speculative-config (fewer forward passes when memory-bound)",
    ],
    "limit": ["none: at the hardware limit for this workload — stop tuning"],
}

_LABELS: dict[Wall, str] = {
    "kv": "KV-bound",
    "queue": "queue-bound",
    "prefill": "prefill-bound",
    "decode": "decode-bound",
    "limit": "at the limit",
}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The binding wall, why, the numbers that show it, and the knobs that move it."""

    wall: Wall
    reason: str
    evidence: dict[str, float | None]
    knobs: list[str] = field(default_factory=list)
    symptoms: list[dict[str, object]] = field(default_factory=list)
    """The playbook's other symptoms seen in the run
    (:mod:`slotune.workers.loadgen.diagnose.symptoms`)."""

    @property
    def label(self) -> str:
        return _LABELS[self.wall]

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "label": self.label}


def _series(summary: ScrapeSummary, name: str) -> list[float]:
    return [v for _, v in summary.gauges.get(name, [])]


def _growth(summary: ScrapeSummary, name: str) -> float | None:
    """Mean of the last third minus mean of the first third of a gauge while load was sent.

    After the last request leaves the queue only drains, so those points are left out.
    """
    points = summary.gauges.get(name, [])
    if not points:
        return None
    end = summary.load_end_s
    values = [v for t, v in points if end is None or t <= end] or [v for _, v in points]
    if len(values) < 3:
        return 0.0
    third = max(1, len(values) // 3)
    return float(np.mean(values[-third:]) - np.mean(values[:third]))


def _ms(summary: ScrapeSummary, name: str) -> float | None:
    hist = summary.histograms.get(name)
    mean = hist.mean if hist is not None else None
    return None if mean is None else mean * 1000.0


def _ratio(score: Score, metric: str) -> float | None:
    for check in score.checks:
        if check.metric == metric:
            return check.constraint + 1.0
    return None


def diagnose(summary: ScrapeSummary, score: Score, slo: SLO | None = None) -> Diagnosis | None:
    """The binding wall, or None when there were no metrics to read."""
    if not summary.available:
        return None
    waiting = _series(summary, "vllm:num_requests_waiting")
    running = _series(summary, "vllm:num_requests_running")
    kv = _series(summary, "vllm:kv_cache_usage_perc")
    preemptions = summary.counters.get("vllm:num_preemptions_total", 0.0)
    queue_ms = _ms(summary, "vllm:request_queue_time_seconds")
    prefill_ms = _ms(summary, "vllm:request_prefill_time_seconds")
    decode_ms = _ms(summary, "vllm:request_decode_time_seconds")
    ttft_ms = _ms(summary, "vllm:time_to_first_token_seconds")
    if ttft_ms is None and queue_ms is not None and prefill_ms is not None:
        ttft_ms = queue_ms + prefill_ms
    def share(part: float | None) -> float | None:
        return part / ttft_ms if part is not None and ttft_ms else None

    queries = summary.counters.get("vllm:prefix_cache_queries_total", 0.0)
    hits = summary.counters.get("vllm:prefix_cache_hits_total", 0.0)
    evidence: dict[str, float | None] = {
        "waiting_mean": float(np.mean(waiting)) if waiting else None,
        "waiting_max": max(waiting) if waiting else None,
        "waiting_growth": _growth(summary, "vllm:num_requests_waiting"),
        "running_mean": float(np.mean(running)) if running else None,
        "running_max": max(running) if running else None,
        "kv_usage_mean": float(np.mean(kv)) if kv else None,
        "kv_usage_max": max(kv) if kv else None,
        "preemptions": preemptions,
        "queue_time_mean_ms": queue_ms,
        "prefill_time_mean_ms": prefill_ms,
        "decode_time_mean_ms": decode_ms,
        "engine_ttft_mean_ms": ttft_ms,
        "queue_share_of_ttft": share(queue_ms),
        "prefill_share_of_ttft": share(prefill_ms),
        "prefix_cache_hit_rate": hits / queries if queries > 0 else None,
        "ttft_vs_target": _ratio(score, "ttft"),
        "tpot_vs_target": _ratio(score, "tpot"),
        "itl_vs_target": _ratio(score, "itl"),
    }
    wall, reason = _decide(evidence)
    return Diagnosis(wall, reason, evidence, list(KNOBS[wall]))


def _decide(e: dict[str, float | None]) -> tuple[Wall, str]:
    def val(key: str) -> float:
        v = e.get(key)
        return 0.0 if v is None else v

    kv_max, preempt, waiting = val("kv_usage_max"), val("preemptions"), val("waiting_mean")
    if kv_max >= KV_FULL and (preempt > 0 or (waiting >= 1 and val("kv_usage_mean") >= KV_FULL)):
        return "kv", (
            f"KV cache usage reached {kv_max:.0%} with {preempt:g} preemptions and "
            f"{waiting:.1f} requests waiting on average: the KV pool caps concurrency"
        )
    queue_share = val("queue_share_of_ttft")
    if waiting >= WAITING_DEEP and (val("waiting_growth") > 0 or queue_share >= QUEUE_SHARE):
        return "queue", (
            f"{waiting:.1f} requests waiting on average (max {val('waiting_max'):g}, "
            f"growth {val('waiting_growth'):+.1f}), queueing {queue_share:.0%} of TTFT: "
            "past the knee — a capacity problem"
        )
    ttft_ratio, prefill_share = val("ttft_vs_target"), val("prefill_share_of_ttft")
    if ttft_ratio >= PRESSURE and prefill_share >= PREFILL_SHARE:
        return "prefill", (
            f"TTFT at {ttft_ratio:.0%} of target with prefill {prefill_share:.0%} of it"
        )
    decode_ratio = max(val("tpot_vs_target"), val("itl_vs_target"))
    if decode_ratio >= PRESSURE:
        return "decode", f"TPOT/ITL at {decode_ratio:.0%} of target"
    return "limit", (
        "no wall stands out (queue shallow, KV not full, latencies under "
        f"{PRESSURE:.0%} of target or untargeted)"
    )
