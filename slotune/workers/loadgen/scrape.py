"""Scrape a vLLM-style ``/metrics`` endpoint during the measured run, and summarise it.

Parsing uses ``prometheus_client.parser.text_string_to_metric_families``. Samples are
summed over label sets (``model_name``, ``engine``, …) except a histogram bucket's
``le``, so one engine or several look the same. Gauges are kept as time series;
counters and histograms as deltas between the first and the last scrape, so a warm-up
before the measurement does not count. A server without ``/metrics`` (404, or text
that does not parse) gives an unavailable summary, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "GAUGES",
    "HISTOGRAMS",
    "PREFIX_CACHE_HITS",
    "HistogramDelta",
    "MetricsScraper",
    "ScrapeSummary",
    "Snapshot",
    "parse_metrics",
    "summarise",
]

PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
"""Prompt tokens the engine served from its prefix cache (a counter)."""
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_GAUGE_ALIASES = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}  # vLLM < 0.10
COUNTERS = (
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    PREFIX_CACHE_HITS,
    "vllm:request_success_total",
)
HISTOGRAMS = (
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
)

Snapshot = dict[tuple[str, str], float]
"""(sample name, ``le`` or "") → value, summed over the other labels."""


_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?\s+\S+")
_WANTED = frozenset({*GAUGES, *_GAUGE_ALIASES, *COUNTERS,
                     *(f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_count", "_sum",
                                                                          "_bucket"))})


def _wanted_lines(text: str) -> str:
    """Only the samples the summary reads: vLLM's page has many more families, and
    parsing them all costs the client's event loop time it needs to stamp streams.
    Raises ``ValueError`` when the first sample line is no Prometheus sample."""
    kept = []
    checked = False
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            if not checked and not _SAMPLE.match(line):
                raise ValueError(f"not a sample line: {line[:80]!r}")
            checked = True
            end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
            if end > 0 and line[:end] in _WANTED:
                kept.append(line)
    return "\n".join(kept) + "\n"


def parse_metrics(text: str) -> Snapshot:
    """Parse Prometheus text exposition into a :data:`Snapshot`; raises ``ValueError``.

    Only the families in :data:`GAUGES`, :data:`COUNTERS` and :data:`HISTOGRAMS` are read.
    """
    out: Snapshot = {}
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for sample in family.samples:
            name = _GAUGE_ALIASES.get(sample.name, sample.name)
            le = sample.labels.get("le", "") if name.endswith("_bucket") else ""
            key = (name, le)
            out[key] = out.get(key, 0.0) + float(sample.value)
    return out


@dataclass(frozen=True, slots=True)
class HistogramDelta:
    """A histogram's change over the run: observations, their sum, their mean (s)."""

    count: float
    sum: float

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass(slots=True)
class ScrapeSummary:
    """What the scrapes saw: gauge series (engine seconds, value), counter/histogram deltas."""

    available: bool
    error: str | None = None
    scrapes: int = 0
    gauges: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, HistogramDelta] = field(default_factory=dict)
    load_end_s: float | None = None
    """When the last request was sent (engine s); after it the queue only drains."""

    def to_dict(self) -> dict[str, object]:
        return {
            "available": self.available,
            "error": self.error,
            "scrapes": self.scrapes,
            "load_end_s": self.load_end_s,
            "gauges": {k: [list(p) for p in v] for k, v in self.gauges.items()},
            "counters": self.counters,
            "histograms": {
                k: {"count": v.count, "sum": v.sum, "mean": v.mean}
                for k, v in self.histograms.items()
            },
        }


def summarise(
    snapshots: list[tuple[float, Snapshot]], *, time_scale: float = 1.0, error: str | None = None
) -> ScrapeSummary:
    """Summarise timestamped snapshots (wall seconds since the run's start)."""
    if not snapshots:
        return ScrapeSummary(available=False, error=error or "no scrape succeeded")
    summary = ScrapeSummary(available=True, error=error, scrapes=len(snapshots))
    for name in GAUGES:
        series = [(t * time_scale, s[(name, "")]) for t, s in snapshots if (name, "") in s]
        if series:
            summary.gauges[name] = series
    first, last = snapshots[0][1], snapshots[-1][1]
    for name in COUNTERS:
        if (name, "") in last:
            summary.counters[name] = last[(name, "")] - first.get((name, ""), 0.0)
    for name in HISTOGRAMS:
        count_key, sum_key = (f"{name}_count", ""), (f"{name}_sum", "")
        if count_key in last:
            summary.histograms[name] = HistogramDelta(
                count=last[count_key] - first.get(count_key, 0.0),
                # seconds as the engine reports them (the diagnosis only uses ratios)
                sum=(last.get(sum_key, 0.0) - first.get(sum_key, 0.0)),
            )
    return summary


class MetricsScraper:
    """A periodic task that GETs ``{base_url}/metrics`` every ``interval_s`` (wall seconds).

    ``start()`` takes the baseline scrape at once; ``stop()`` takes a final one. A 404 or
    an unparsable page stops the scraper and marks the summary unavailable.
    """

    def __init__(
        self, client: httpx.AsyncClient, base_url: str, *, t0: float, interval_s: float = 1.0
    ) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + "/metrics"
        self._t0 = t0
        self._interval = interval_s
        self.snapshots: list[tuple[float, Snapshot]] = []
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._dead = False

    async def scrape_once(self) -> None:
        if self._dead:
            return
        try:
            response = await self._client.get(self._url, timeout=5.0)
        except httpx.HTTPError as exc:
            self.error = f"GET /metrics failed: {type(exc).__name__}"
            return
        if response.status_code != 200:
            self.error = f"GET /metrics answered HTTP {response.status_code}"
            self._dead = response.status_code == 404
            return
        try:
            # Parsing a large page (vLLM's histograms) off the event loop: a blocked loop
            # reads the streams late, and their events would arrive "together".
            snapshot = await asyncio.to_thread(parse_metrics, response.text)
        except ValueError as exc:
            self.error = f"/metrics is not Prometheus text: {exc}"
            self._dead = True
            return
        self.snapshots.append((time.perf_counter() - self._t0, snapshot))

    async def _loop(self) -> None:
        while not self._dead:
            await asyncio.sleep(self._interval)
            await self.scrape_once()

    async def start(self) -> None:
        await self.scrape_once()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """End the periodic scraping and take the final snapshot of the run."""
        await self.cancel()
        await self.scrape_once()

    async def cancel(self) -> None:
        """End the periodic scraping, no final snapshot (the run is being abandoned)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def summary(self, time_scale: float = 1.0) -> ScrapeSummary:
        return summarise(self.snapshots, time_scale=time_scale, error=self.error)
