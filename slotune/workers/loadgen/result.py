"""The result document: ``vllm bench serve --save-result``'s JSON, then slotune's own under one key.

Every field vLLM 0.32 writes is here, with its meaning, its units (``*_ms`` in ms,
per-request times in seconds, ``duration`` in seconds) and its presence rules:

* ``request_goodput`` is null unless goodput was asked for (an SLO: ``--goodput``/``--slo``);
* the per-request arrays ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
  ``start_times``, ``generated_texts`` and ``errors`` only with ``detailed``
  (``--save-detailed``); ``latencies`` and ``queue_times`` always, as vLLM keeps them;
* ``--metadata`` keys at the top level, right after ``num_prompts``; the ramp-up fields
  and ``rps_change_events`` only under a ramp-up;
* statistics only for the selected ``--percentile-metrics``; ``client_queue_time`` and
  ``e2el_including_client_queue`` (when selected) only under ``--max-concurrency``, the
  latter only at a finite rate.

One difference in meaning: ``start_times`` are seconds since the measured run began
(vLLM writes raw ``perf_counter`` readings, which mean nothing outside its process); their
differences are the same. Everything is in engine time (the time scale already applied).
slotune's own fields (SLO gate, diagnosis, send lag, client-bound flag, …) are under the
single key ``"slotune"``, which no vLLM field and no ``--metadata`` key may take.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from slotune.workers.contracts import SLO, Workload
from slotune.workers.loadgen.diagnose.diagnosis import Diagnosis
from slotune.workers.loadgen.generate.arrivals import request_rates
from slotune.workers.loadgen.generate.sessions import session_summary
from slotune.workers.loadgen.score.scoring import (
    DEFAULT_PERCENTILES,
    MetricSummary,
    Score,
    summarize,
)
from slotune.workers.loadgen.scrape import PREFIX_CACHE_HITS

if TYPE_CHECKING:  # annotations only: writing a result needs no HTTP client loaded
    from slotune.workers.loadgen.client import Endpoint, RequestRecord
    from slotune.workers.loadgen.runner import BenchmarkRun

__all__ = [
    "OURS",
    "QUEUE_METRICS",
    "ResultInfo",
    "build_result",
    "percentile_key",
    "reserved_key",
    "slotune_fields",
    "write_result",
]

OURS = "slotune"
"""The one top-level key slotune's own fields live under."""
QUEUE_METRICS = ("client_queue_time", "e2el_including_client_queue")
"""vLLM's two client-side queueing metrics (``--percentile-metrics`` names)."""
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts",
            "errors")
"""The per-request arrays written only with ``--save-detailed`` (vLLM's list)."""
_FIXED_KEYS = frozenset({
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps",
    "ramp_up_end_rps", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
    "total_token_throughput", "latencies", "queue_times", "max_output_tokens_per_s",
    "max_concurrent_requests", "rtfx", "rps_change_events", OURS, *DETAILED,
})
_STAT_KEY = re.compile(r"^(mean|median|std|p\d+(\.\d+)?)_[a-z0-9_]+_ms$")


def percentile_key(p: float) -> str:
    """vLLM's spelling of a percentile in a field name: 99 → "99", 99.9 → "99.9"."""
    return str(int(p)) if float(p).is_integer() else str(p)


def reserved_key(key: str) -> bool:
    """Whether a result field has this name (a ``--metadata`` key must not take it)."""
    return key in _FIXED_KEYS or bool(_STAT_KEY.match(key))


@dataclass(frozen=True, slots=True)
class ResultInfo:
    """How the run was asked for: the fields of the document that are not measurements.

    The defaults are a trial's: every per-request array, goodput always (a trial has an
    SLO), all four latency metrics at p50/p90/p95/p99.
    """

    backend: str = "openai"
    label: str | None = None
    model_id: str | None = None
    tokenizer_id: str | None = None
    metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    percentile_metrics: Sequence[str] = ("ttft", "tpot", "itl", "e2el")
    percentiles: Sequence[float] = DEFAULT_PERCENTILES
    detailed: bool = True
    goodput: bool = True


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _stat_fields(metric: str, summary: MetricSummary, percentiles: Sequence[float]
                 ) -> dict[str, float]:
    """vLLM's field names for one metric's statistics (``mean_ttft_ms``, ``p99_ttft_ms``, …)."""
    out = {f"mean_{metric}_ms": summary.mean, f"median_{metric}_ms": summary.median,
           f"std_{metric}_ms": summary.std}
    for p in percentiles:
        out[f"p{percentile_key(p)}_{metric}_ms"] = summary.percentiles[p]
    return out


def _latency(record: RequestRecord) -> float:
    """vLLM's ``latency``: last chunk carrying choices − start (0.0 for a failed request)."""
    t = record.timings
    return t.chunks[-1] - t.start if record.success and t.chunks else 0.0


def _queue_time(record: RequestRecord) -> float:
    """vLLM's ``client_queue_time``: from the schedule's release to the send."""
    return max(0.0, record.timings.start - record.timings.target)


def _peaks(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """vLLM's peak output tokens in one second and peak concurrent requests (1 s buckets)."""
    ok = [r for r in records if r.success and r.timings.chunks]
    if not ok:
        return 0.0, 0
    first = min(r.timings.start for r in ok)
    last = max(r.timings.start + _latency(r) for r in ok)
    buckets = int(np.ceil(last - first)) + 1
    tokens = np.zeros(buckets)
    active = np.zeros(buckets)
    for r in ok:
        for t in r.timings.chunks:
            second = int(t - first)
            if 0 <= second < buckets:
                tokens[second] += 1
        begin, end = int(r.timings.start - first), int(r.timings.start + _latency(r) - first)
        active[begin:end + 1] += 1
    return float(tokens.max()), int(active.max())


def _rps_events(run: BenchmarkRun, workload: Workload) -> list[dict[str, Any]]:
    """vLLM's ``rps_change_events``: when the ramp-up's rate first reached each whole rps."""
    ramp = workload.arrivals.ramp_up
    if ramp is None:
        return []
    rates = request_rates(workload.num_prompts, workload.arrivals)
    events = [{"rps": ramp.start_rps, "timestamp": run.started_at.isoformat()}]
    last = ramp.start_rps
    for record in run.records:
        if record.index >= len(rates):
            break
        current = int(rates[record.index])
        if current > last:
            stamp = (run.started_at + timedelta(seconds=record.timings.start)).isoformat()
            events.extend({"rps": r, "timestamp": stamp} for r in range(last + 1, current + 1))
            last = current
    return events


def build_result(
    *,
    run: BenchmarkRun,
    score: Score,
    workload: Workload,
    slo: SLO,
    model: str,
    endpoint: Endpoint,
    base_url: str,
    diagnosis: Diagnosis | None,
    info: ResultInfo | None = None,
) -> dict[str, Any]:
    """The full result document for one run: vLLM's fields, then ``"slotune"``."""
    info = info or ResultInfo()
    arrivals = workload.arrivals
    records = run.records
    doc: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),  # vLLM's: when the run ended
        "endpoint_type": info.backend,
        "backend": info.backend,
        "label": info.label,
        "model_id": info.model_id or model,
        "tokenizer_id": info.tokenizer_id or info.model_id or model,
        "num_prompts": workload.num_prompts,
        **info.metadata,
        "request_rate": "inf" if math.isinf(arrivals.request_rate) else arrivals.request_rate,
        "burstiness": arrivals.burstiness,
        "max_concurrency": arrivals.max_concurrency,
    }
    if arrivals.ramp_up is not None:
        doc.update(ramp_up_strategy=arrivals.ramp_up.strategy,
                   ramp_up_start_rps=arrivals.ramp_up.start_rps,
                   ramp_up_end_rps=arrivals.ramp_up.end_rps)
    per_request = score.per_request
    peak_tokens, peak_active = _peaks(records)
    doc.update({
        "duration": score.duration_s,
        "completed": score.completed,
        "failed": score.failed,
        "total_input_tokens": score.total_input_tokens,
        "total_output_tokens": score.total_output_tokens,
        "request_throughput": score.request_throughput,
        "request_goodput": score.request_goodput if info.goodput else None,
        "output_throughput": score.output_throughput,
        "total_token_throughput": score.total_token_throughput,
        "input_lens": [r.prompt_len for r in records],
        "output_lens": [0 if m is None else m.output_tokens for m in per_request],
        "ttfts": [0.0 if m is None else m.ttft for m in per_request],
        "itls": [[] if m is None else list(m.itls) for m in per_request],
        "latencies": [_latency(r) for r in records],
        "start_times": [r.timings.start for r in records],
        "queue_times": [_queue_time(r) for r in records],
        "generated_texts": [r.text or "" for r in records],
        "errors": [r.error or "" for r in records],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_active,
        "rtfx": 0.0,
    })
    events = _rps_events(run, workload)
    if events:
        doc["rps_change_events"] = events
    for metric in info.percentile_metrics:
        if metric in QUEUE_METRICS:
            continue
        doc.update(_stat_fields(metric, score.summaries[metric], info.percentiles))
    if arrivals.max_concurrency is not None:
        ok = [r for r in records if r.success]
        queued = {"client_queue_time": [_queue_time(r) for r in ok]}
        if not math.isinf(arrivals.request_rate):
            queued["e2el_including_client_queue"] = [_latency(r) + _queue_time(r) for r in ok]
        for metric, values in queued.items():
            if metric in info.percentile_metrics:
                doc.update(_stat_fields(metric, summarize(values, info.percentiles),
                                        info.percentiles))
    if not info.detailed:
        for key in DETAILED:
            del doc[key]
    doc[OURS] = _ours(run, score, workload, slo, endpoint, base_url, diagnosis)
    return doc


def _ours(run: BenchmarkRun, score: Score, workload: Workload, slo: SLO, endpoint: Endpoint,
          base_url: str, diagnosis: Diagnosis | None) -> dict[str, Any]:
    lag = run.send_lag
    return {
        "endpoint": endpoint,
        "base_url": base_url,
        "workload": workload.model_dump(mode="json"),
        "slo": slo.model_dump(mode="json"),
        "warmup_requests": len(run.warmup_records),
        "warmup_failed": sum(1 for r in run.warmup_records if not r.success),
        "time_scale": run.time_scale,
        "good_requests": score.good_requests,
        "request_goodput": score.request_goodput,
        "token_goodput": score.token_goodput,
        "gate": score.gate,
        "gate_reason": score.gate_reason,
        "objective": score.objective,
        "constraints": score.constraints,
        "margins": {
            c.metric: {
                "target_ms": c.target_ms,
                "observed_ms": _finite(c.observed_ms),
                "margin_ms": _finite(c.margin_ms),
                "ratio": c.constraint + 1.0,
            }
            for c in score.checks
        },
        "worst_slo_ratio": score.worst_ratio,
        "send_lag_ms": {
            "mean": lag.mean_ms, "p50": lag.p50_ms, "p99": lag.p99_ms, "max": lag.max_ms,
            "tolerance": lag.tolerance_ms,
        },
        "client_bound": lag.client_bound,
        "warnings": list(run.warnings),
        "prompts_as": run.prompts_as,
        "early_abort": None if run.early_abort is None else {
            "reason": run.early_abort.reason,
            "metric": run.early_abort.metric,
            "violations": run.early_abort.violations,
            "allowed": run.early_abort.allowed,
            "after_requests": run.early_abort.after_requests,
        },
        "diagnosis": None if diagnosis is None else diagnosis.to_dict(),
        "metrics_scrape": run.scrape.to_dict(),
        "sessions": session_summary(
            run.records, run.scrape.counters.get(PREFIX_CACHE_HITS)
            if run.scrape.available else None),
    }


def slotune_fields(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """slotune's own fields of a result document (older documents kept them at the top)."""
    ours = doc.get(OURS)
    return ours if isinstance(ours, Mapping) else doc


def write_result(doc: dict[str, Any], path: Path, *, append: bool = False) -> None:
    """Write ``doc`` as JSON (strict: no NaN/Infinity); ``append`` adds it as one more line,
    as ``vllm bench serve --append-result`` does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, allow_nan=False)
    if append:
        with path.open("a+", encoding="utf-8") as out:
            if out.tell() != 0:
                out.write("\n")
            out.write(text)
        return
    path.write_text(text, encoding="utf-8")
