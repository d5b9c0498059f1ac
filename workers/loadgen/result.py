"""The result document: ``vllm bench serve --save-result`` field names, plus slotune's own.

vLLM's fields keep vLLM's units (``*_ms`` in ms, ``ttfts``/``itls`` in seconds,
``duration`` in seconds), so scripts written for vLLM's JSON read ours unchanged.
Everything is in engine time (the time scale already applied).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from workers.contracts import SLO, Workload
from workers.loadgen.client import Endpoint
from workers.loadgen.diagnosis import Diagnosis
from workers.loadgen.runner import BenchmarkRun
from workers.loadgen.scoring import Score

__all__ = ["build_result", "percentile_key", "write_result"]


def percentile_key(p: float) -> str:
    """vLLM's spelling of a percentile in a field name: 99 → "99", 99.9 → "99.9"."""
    return str(int(p)) if float(p).is_integer() else str(p)


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


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
    percentile_metrics: list[str] | None = None,
) -> dict[str, Any]:
    """The full result document for one run."""
    rate = workload.arrivals.request_rate
    doc: dict[str, Any] = {
        "date": run.started_at.strftime("%Y%m%d-%H%M%S"),
        "backend": "openai-chat" if endpoint == "chat" else "vllm",
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": workload.num_prompts,
        "request_rate": "inf" if math.isinf(rate) else rate,
        "burstiness": workload.arrivals.burstiness,
        "max_concurrency": workload.arrivals.max_concurrency,
        "duration": score.duration_s,
        "completed": score.completed,
        "failed": score.failed,
        "total_input_tokens": score.total_input_tokens,
        "total_output_tokens": score.total_output_tokens,
        "request_throughput": score.request_throughput,
        "request_goodput": score.request_goodput,
        "output_throughput": score.output_throughput,
        "total_token_throughput": score.total_token_throughput,
    }
    metrics = percentile_metrics or ["ttft", "tpot", "itl", "e2el"]
    for metric in metrics:
        summary = score.summaries[metric]
        doc[f"mean_{metric}_ms"] = summary.mean
        doc[f"median_{metric}_ms"] = summary.median
        doc[f"std_{metric}_ms"] = summary.std
        for p, value in summary.percentiles.items():
            doc[f"p{percentile_key(p)}_{metric}_ms"] = value
    ok = [m for m in score.per_request]
    doc["input_lens"] = [r.prompt_len for r in run.records]
    doc["output_lens"] = [0 if m is None else m.output_tokens for m in ok]
    doc["ttfts"] = [0.0 if m is None else m.ttft for m in ok]
    doc["itls"] = [[] if m is None else list(m.itls) for m in ok]
    doc["errors"] = [r.error or "" for r in run.records]
    lag = run.send_lag
    doc.update(
        {
            "endpoint": endpoint,
            "base_url": base_url,
            "workload": workload.model_dump(mode="json"),
            "slo": slo.model_dump(mode="json"),
            "warmup_requests": len(run.warmup_records),
            "warmup_failed": sum(1 for r in run.warmup_records if not r.success),
            "time_scale": run.time_scale,
            "good_requests": score.good_requests,
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
        }
    )
    return doc


def write_result(doc: dict[str, Any], path: Path) -> None:
    """Write ``doc`` as JSON (strict: no NaN/Infinity)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
