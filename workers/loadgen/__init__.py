"""The load generator, scorer and diagnosis: ``vllm bench serve``'s measurements, SLO-aware.

Layers (guidellm's split): datasets + arrivals say what to send and when; the client
sends one streaming request and stamps raw times; the runner orchestrates warm-up, the
measured run, ``/metrics`` scraping and early abort; scoring and diagnosis are pure
functions of what was recorded; the result module writes vLLM's JSON field names.

Names are imported on first use (PEP 562): most callers need one file format or one
scorer, not the HTTP client and its event-loop stack, and every ``slotune`` command paid
for those at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.loadgen.arrivals import arrival_offsets
    from workers.loadgen.client import RequestRecord, RequestTimings
    from workers.loadgen.datasets import DatasetError, RequestSpec, sample_requests
    from workers.loadgen.diagnosis import Diagnosis, diagnose
    from workers.loadgen.result import build_result, write_result
    from workers.loadgen.runner import (
        BenchmarkRun,
        EarlyAbort,
        ServerUnreachable,
        run_benchmark,
        run_benchmark_sync,
    )
    from workers.loadgen.scoring import GateCheck, Score, score
    from workers.loadgen.scrape import ScrapeSummary, parse_metrics
    from workers.loadgen.workload_files import WorkloadError, builtin_workloads, load_workload

_HOME = {
    "BenchmarkRun": "workers.loadgen.runner",
    "DatasetError": "workers.loadgen.datasets",
    "Diagnosis": "workers.loadgen.diagnosis",
    "EarlyAbort": "workers.loadgen.runner",
    "GateCheck": "workers.loadgen.scoring",
    "RequestRecord": "workers.loadgen.client",
    "RequestSpec": "workers.loadgen.datasets",
    "RequestTimings": "workers.loadgen.client",
    "Score": "workers.loadgen.scoring",
    "ScrapeSummary": "workers.loadgen.scrape",
    "ServerUnreachable": "workers.loadgen.runner",
    "WorkloadError": "workers.loadgen.workload_files",
    "arrival_offsets": "workers.loadgen.arrivals",
    "build_result": "workers.loadgen.result",
    "builtin_workloads": "workers.loadgen.workload_files",
    "diagnose": "workers.loadgen.diagnosis",
    "load_workload": "workers.loadgen.workload_files",
    "parse_metrics": "workers.loadgen.scrape",
    "run_benchmark": "workers.loadgen.runner",
    "run_benchmark_sync": "workers.loadgen.runner",
    "sample_requests": "workers.loadgen.datasets",
    "score": "workers.loadgen.scoring",
    "write_result": "workers.loadgen.result",
}
"""Which module each exported name lives in."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once, then a plain attribute
    return value


__all__ = [
    "BenchmarkRun",
    "DatasetError",
    "Diagnosis",
    "EarlyAbort",
    "GateCheck",
    "RequestRecord",
    "RequestSpec",
    "RequestTimings",
    "Score",
    "ScrapeSummary",
    "ServerUnreachable",
    "WorkloadError",
    "arrival_offsets",
    "build_result",
    "builtin_workloads",
    "diagnose",
    "load_workload",
    "parse_metrics",
    "run_benchmark",
    "run_benchmark_sync",
    "sample_requests",
    "score",
    "write_result",
]
