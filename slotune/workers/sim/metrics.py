"""The engine's own statistics, kept as vLLM keeps them, and their Prometheus rendering.

The core updates plain counters and bucketed histograms (cheap enough for the
virtual-time driver); :class:`EngineStatsCollector` exposes them through
``prometheus_client`` under vLLM's metric names, labelled ``model_name`` and ``engine``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

# Bucket bounds as vLLM's metrics loggers declare them (seconds / tokens).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                           40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TOKEN_COUNT_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
                       50000, 100000)


@dataclass(slots=True)
class Histogram:
    """A cumulative-on-export histogram: per-bucket counts, sum and count."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((_fmt_bound(bound), float(running)))
        out.append(("+Inf", float(self.count)))
        return out


def _fmt_bound(bound: float) -> str:
    return repr(float(bound))


@dataclass(slots=True)
class EngineStats:
    """Counters and histograms of one engine, in engine time (seconds)."""

    num_preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    requests_finished: dict[str, int] = field(default_factory=dict)
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    inter_token_latency: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e_latency: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    prefill_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    decode_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    iteration_tokens: Histogram = field(
        default_factory=lambda: Histogram(ITERATION_TOKEN_BUCKETS))
    request_prompt_tokens: Histogram = field(
        default_factory=lambda: Histogram(TOKEN_COUNT_BUCKETS))
    request_generation_tokens: Histogram = field(
        default_factory=lambda: Histogram(TOKEN_COUNT_BUCKETS))


@dataclass(frozen=True, slots=True)
class Gauges:
    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage_perc: float


class EngineStatsCollector(Collector):
    """Exposes an engine's stats under vLLM's names; reads live values at scrape time."""

    def __init__(self, stats: Callable[[], EngineStats], gauges: Callable[[], Gauges],
                 model_name: str, engine: str = "0") -> None:
        self._stats = stats
        self._gauges = gauges
        self._labels = {"model_name": model_name, "engine": engine}

    def collect(self) -> Iterator[Metric]:
        keys, values = list(self._labels), list(self._labels.values())
        g, s = self._gauges(), self._stats()
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             g.num_requests_running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
             g.num_requests_waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             g.kv_cache_usage_perc),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=keys)
            gauge.add_metric(values, float(value))
            yield gauge
        for name, doc, total in (
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
             s.num_preemptions),
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens),
            ("vllm:generation_tokens", "Number of generation tokens processed.",
             s.generation_tokens),
            ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
             "queried tokens.", s.prefix_cache_queries),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
             "tokens.", s.prefix_cache_hits),
        ):
            counter = CounterMetricFamily(name, doc, labels=keys)
            counter.add_metric(values, float(total))
            yield counter
        finished = CounterMetricFamily("vllm:request_success", "Count of successfully "
                                       "processed requests.", labels=[*keys, "finished_reason"])
        for reason, n in sorted(s.requests_finished.items()):
            finished.add_metric([*values, reason], float(n))
        yield finished
        for name, doc, hist in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             s.ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
             s.inter_token_latency),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
             s.e2e_latency),
            ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for "
             "request.", s.queue_time),
            ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase "
             "for request.", s.prefill_time),
            ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for "
             "request.", s.decode_time),
            ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
             s.iteration_tokens),
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
             s.request_prompt_tokens),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.",
             s.request_generation_tokens),
        ):
            family = HistogramMetricFamily(name, doc, labels=keys)
            family.add_metric(values, hist.cumulative(), sum_value=hist.total)
            yield family
