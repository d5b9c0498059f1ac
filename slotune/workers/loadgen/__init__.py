"""The load generator, scorer and diagnosis: ``vllm bench serve``'s measurements, SLO-aware.

Layers (guidellm's split): ``generate/`` says what to send and when (datasets, arrivals,
tokens, sessions, traces, workload files); the client sends one streaming request and
stamps raw times; the runner orchestrates warm-up, the measured run, ``/metrics``
scraping (``scrape.py``) and early abort; ``score/`` (SLO scoring, a probe's verdict) and
``diagnose/`` (why a run failed) are pure functions of what was recorded; the result
module writes vLLM's JSON field names.

The functions ``score`` and ``diagnose`` are not exported here: their names are the
subpackages'. Import them from ``score.scoring`` and ``diagnose.diagnosis``.

Names are imported on first use (PEP 562): most callers need one file format or one
scorer, not the HTTP client and its event-loop stack, and every ``slotune`` command paid
for those at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slotune.workers.loadgen.client import RequestRecord, RequestTimings
    from slotune.workers.loadgen.diagnose.diagnosis import Diagnosis
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
    from slotune.workers.loadgen.score.scoring import GateCheck, Score
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
    "load_workload": "slotune.workers.loadgen.generate.workload_files",
    "parse_metrics": "slotune.workers.loadgen.scrape",
    "run_benchmark": "slotune.workers.loadgen.runner",
    "run_benchmark_sync": "slotune.workers.loadgen.runner",
    "sample_requests": "slotune.workers.loadgen.generate.datasets",
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
    "load_workload",
    "parse_metrics",
    "run_benchmark",
    "run_benchmark_sync",
    "sample_requests",
    "write_result",
]
