"""The load generator, scorer and diagnosis: ``vllm bench serve``'s measurements, SLO-aware.

Layers (guidellm's split): datasets + arrivals say what to send and when; the client
sends one streaming request and stamps raw times; the runner orchestrates warm-up, the
measured run, ``/metrics`` scraping and early abort; scoring and diagnosis are pure
functions of what was recorded; the result module writes vLLM's JSON field names.
"""

from __future__ import annotations

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
