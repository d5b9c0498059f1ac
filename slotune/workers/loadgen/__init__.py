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
    from slotune.workers.loadgen.client import RequestRecord, RequestTimings
    from slotune.workers.loadgen.diagnose.diagnosis import Diagnosis, diagnose
    from slotune.workers.loadgen.generate.arrivals import arrival_offsets
    from slotune.workers.loadgen.generate.datasets import DatasetError, RequestSpec, sample_requests
    from slotune.workers.loadgen.generate.workload_files import (
        WorkloadError,
        builtin_workloads,
        load_workload,
    )
    from slotune.workers.loadgen.result import build_result, write_result
    from slotune.workers.loadgen.runner import (
        BenchmarkRun,
        EarlyAbort,
        ServerUnreachable,
        run_benchmark,
        run_benchmark_sync,
    )
    from slotune.workers.loadgen.score.scoring import GateCheck, Score, score
    from slotune.workers.loadgen.scrape import ScrapeSummary, parse_metrics

_HOME = {
    "BenchmarkRun": "slotune.workers.loadgen.runner",
    "DatasetError": "slotune.workers.loadgen.generate.datasets",
    "Diagnosis": "slotune.workers.loadgen.diagnose.diagnosis",
    "EarlyAbort": "slotune.workers.loadgen.runner",
    "GateCheck": "slotune.workers.loadgen.score.scoring",
    "RequestRecord": "slotune.workers.loadgen.client",
    "RequestSpec": "slotune.workers.loadgen.generate.datasets",
    "RequestTimings": "slotune.workers.loadgen.client",
    "Score": "slotune.workers.loadgen.score.scoring",
    "ScrapeSummary": "slotune.workers.loadgen.scrape",
    "ServerUnreachable": "slotune.workers.loadgen.runner",
    "WorkloadError": "slotune.workers.loadgen.generate.workload_files",
    "arrival_offsets": "slotune.workers.loadgen.generate.arrivals",
    "build_result": "slotune.workers.loadgen.result",
    "builtin_workloads": "slotune.workers.loadgen.generate.workload_files",
    "diagnose": "slotune.workers.loadgen.diagnose.diagnosis",
    "load_workload": "slotune.workers.loadgen.generate.workload_files",
    "parse_metrics": "slotune.workers.loadgen.scrape",
    "run_benchmark": "slotune.workers.loadgen.runner",
    "run_benchmark_sync": "slotune.workers.loadgen.runner",
    "sample_requests": "slotune.workers.loadgen.generate.datasets",
    "score": "slotune.workers.loadgen.score.scoring",
    "write_result": "slotune.workers.loadgen.result",
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
