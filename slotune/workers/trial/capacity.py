"""A trial's capacity mode: the highest rate one replica carries under the SLO, measured as
an interval on one booted engine.

**The search** (:func:`capacity_search`, a pure generator over probe verdicts) brackets
from a start rate by ``step`` until a rate that passes and one above it that does not,
then bisects geometrically until the interval is within ``relative_tolerance`` or
``max_probes`` are spent. Its answer is an interval: the highest rate shown to pass, the
lowest shown to fail or left undecided (:class:`CapacityInterval`). A probe that is not a
pass can never raise the low end, so a start — the workload's rate, the best so far, the
twin's prediction (:func:`warm_search`), one step below an earlier answer
(:func:`confirm_search`) — saves probes and cannot move the interval.

**A probe** (:func:`measure_probe`) runs the workload at one rate and is judged as a
statistical statement (:mod:`slotune.workers.loadgen.score.verdict`): steady state and every SLO
percentile's confidence bound within target. Undecided, it is extended with more
requests at the same rate (fresh ones, pooled with the first) up to its cap; still
undecided there, it stays so. A run the client could not drive (``client_bound``) is
measured again once, and otherwise left ``client_bound``: never scored. Each run stops
early once its SLO bound can only fail (the runner's early abort at the bound's
threshold).

**Common random numbers.** Every probe of every configuration of a workload sends the
same sample — the workload's seed: the same lengths, the same arrival pattern scaled to
the probe's rate — so verdicts at two rates, or of two configurations, differ by what the
engine did, not by the luck of the draw. Each probe has its own tokens (the sample
relabelled, :func:`slotune.workers.loadgen.generate.datasets.relabel`), so no probe is served from
an earlier probe's prefix cache. An extension draws a fresh sample (the seed plus
:data:`PROBE_SEED_STRIDE` per run). Text datasets read from a file (ShareGPT, custom, real
conversations) cannot be relabelled: their probe at a rate draws a sample keyed by that rate, the
same whatever the search's path.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slotune.workers.binomial import fail_threshold, min_requests_to_pass
from slotune.workers.contracts import (
    CapacityProbe,
    CapacitySearch,
    CustomDataset,
    MultiTurnDataset,
    ProbeVerdict,
    ShareGPTDataset,
    TailEvidence,
    TrialSpec,
    Workload,
)
from slotune.workers.loadgen.client import RequestRecord
from slotune.workers.loadgen.generate.sessions import session_summary, steady_arrivals_s
from slotune.workers.loadgen.runner import BenchmarkRun, SendLag
from slotune.workers.loadgen.score.gate import slo_gate
from slotune.workers.loadgen.score.scoring import (
    PROBE_PERCENTILES,
    Score,
    gate_percentiles,
    gate_values,
    score,
)
from slotune.workers.loadgen.score.verdict import (
    SteadyState,
    TailBound,
    judge,
    judging_span_s,
    pooled,
    steady_state,
    tail_bounds,
    worth_extending,
)
from slotune.workers.loadgen.scrape import PREFIX_CACHE_HITS, HistogramDelta, ScrapeSummary
from slotune.workers.trial.backend import Backend, Measured

__all__ = [
    "CLIENT_BOUND_RETRIES",
    "CONFIRM_SEED_STRIDE",
    "PROBE_SEED_STRIDE",
    "WARM_STEP",
    "CapacityInterval",
    "CapacityOutcome",
    "capacity_search",
    "confirm_search",
    "first_run_size",
    "fresh_sample",
    "measure_capacity",
    "measure_probe",
    "over_error_budget",
    "probe_cap",
    "probe_medians",
    "probe_workload",
    "warm_search",
]

PROBE_SEED_STRIDE = 7919
"""A probe's extension ``k`` samples with the workload's seed + ``k`` × this."""
_TOKEN_SEED_STRIDE = 104_729
CONFIRM_SEED_STRIDE = 1_000_003
"""Confirmation repeat ``r`` samples with the workload's seed + (r + 1) × this."""
WARM_STEP = 1.25
"""The bracket's step once the sweep predicts where the capacity is."""
CLIENT_BOUND_RETRIES = 1
"""A run the load generator could not drive is measured again this many times."""


# --- the search --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapacityInterval:
    """What a capacity search showed: ``low`` the highest rate that passed (None: none
    did), ``high`` the lowest above it that failed (or, with none failing, the highest
    left undecided; None: nothing above ``low`` — the search's ceiling passed)."""

    low: float | None
    high: float | None

    @property
    def width(self) -> float | None:
        """``high / low − 1`` (None when an end is missing)."""
        if self.low is None or self.high is None or self.low <= 0:
            return None
        return self.high / self.low - 1.0

    @property
    def centre(self) -> float | None:
        """The capacity the interval reports: its geometric midpoint (``low`` when it has
        no upper end; None when nothing passed)."""
        if self.low is None:
            return None
        return self.low if self.high is None else math.sqrt(self.low * self.high)


def capacity_search(search: CapacitySearch, start_rate: float
                    ) -> Generator[float, ProbeVerdict, CapacityInterval]:
    """The capacity search as a pure generator: yields the next rate to probe, is sent the
    probe's verdict, and returns the interval (module docstring).

    ``search.start_rate``, when set, wins over ``start_rate`` (the workload's rate).

    *Bracket*: from the start, step down by ``step`` until a rate passes and up until one
    fails (a rate left undecided is neither: the search steps on past it). *Refine*:
    bisect (geometrically) the widest gap between a pass and the next rate that was not
    one, and between the last undecided rate and the fail above it, until each is within
    ``relative_tolerance`` or ``max_probes`` are spent. The interval is the highest rate
    that passed and the lowest that failed; rates left undecided lie inside it (no
    affordable sample could tell them). With no failure above the last pass, its upper
    end is the highest undecided rate; when ``max_rate`` itself passes, it has none."""
    rate = search.min_rate
    if search.start_rate is not None:
        start_rate = search.start_rate
    if math.isfinite(start_rate):
        rate = min(max(start_rate, search.min_rate), search.max_rate)
    low: float | None = None
    high: float | None = None
    undecided: list[float] = []
    probes = 0
    while probes < search.max_probes:  # the bracket
        verdict = yield rate
        probes += 1
        if verdict == "pass":
            low = rate if low is None else max(low, rate)
        elif verdict in ("fail", "overload") or not search.resolve_undecided:
            high = rate if high is None else min(high, rate)
        else:
            undecided.append(rate)
        if low is not None and (high is not None or low >= search.max_rate):
            break
        if low is None:
            if rate <= search.min_rate:
                break
            lowest = min([rate, *undecided, *(() if high is None else (high,))])
            rate = max(lowest / search.step, search.min_rate)
        else:
            if rate >= search.max_rate:
                break
            rate = min(max([low, *undecided]) * search.step, search.max_rate)
    if not search.resolve_undecided:  # a ranking: an undecided rate ends the interval
        undecided_above = [u for u in undecided if low is not None and u > low]
        high = min([*undecided_above, *(() if high is None else (high,))], default=None)
        undecided = []
    while low is not None and high is not None and probes < search.max_probes:  # refine
        inside = sorted(u for u in undecided if low < u < high)
        gaps = [(inside[0], low), (high, inside[-1])] if inside else [(high, low)]
        top, bottom = max(gaps, key=lambda gap: gap[0] / gap[1])
        if top / bottom - 1 <= search.relative_tolerance:
            break
        mid = math.sqrt(top * bottom)
        verdict = yield mid
        probes += 1
        if verdict == "pass":
            low = mid
        elif verdict in ("fail", "overload") or not search.resolve_undecided:
            high = mid
        else:
            undecided.append(mid)
    if low is not None and high is None and low < search.max_rate:
        above = [u for u in undecided if u > low]
        high = min(above) if above else None
    return CapacityInterval(low, high)


def warm_search(search: CapacitySearch, predicted: float) -> CapacitySearch:
    """``search`` started where the sweep predicts this replica's capacity (the best
    configuration so far scaled to its GPUs, or the twin's prediction), in smaller steps:
    most configurations carry a rate near it, and far-off probes tell nothing."""
    return search.model_copy(update={"start_rate": predicted,
                                     "step": min(search.step, WARM_STEP)})


def fresh_sample(workload: Workload, repeat: int) -> Workload:
    """The workload with a sample of its own for confirmation repeat ``repeat`` (from 0):
    an answer measured on the sample that chose its configuration would be tuned to it."""
    return workload.model_copy(update={"seed": workload.seed + CONFIRM_SEED_STRIDE
                                       * (repeat + 1)})


def confirm_search(search: CapacitySearch, found: float) -> CapacitySearch:
    """A confirmation's search of a configuration whose ranking put its capacity's lower
    end at ``found``: its own bracket, in steps of the ranking's resolution, from one step
    below it (its first probe most likely passes, and it climbs through ``found`` on its
    own verdicts) — never from the search's value itself."""
    resolution = 1.0 + max(search.relative_tolerance, search.ranking.relative_tolerance)
    step = min(search.step, max(resolution, 1.0 + search.relative_tolerance))
    return search.model_copy(update={"start_rate": found / step, "step": step})


# --- probes ------------------------------------------------------------------------------


def first_run_size(spec: TrialSpec, rate: float) -> int:
    """Requests of a probe's first run at ``rate``: the space's (else the workload's)
    count, at least what a pass needs at the search's confidence, ``min_probe_s`` of
    arrivals, and for conversations their steady span."""
    search, workload = spec.capacity, spec.workload
    n = search.prompts_per_probe or workload.num_prompts
    n = max(n, min_requests_to_pass(spec.slo.percentile,
                                    search.sample_confidence or search.confidence))
    if search.min_probe_s is not None:
        n = max(n, math.ceil(rate * search.min_probe_s))
    if isinstance(workload.dataset, MultiTurnDataset):  # conversations: steady state
        targets = spec.slo.targets
        span = steady_arrivals_s(workload.dataset, targets.get("ttft", 1000.0) / 1000,
                                 targets.get("tpot", 100.0) / 1000, search.session_spans)
        n = max(n, math.ceil(rate * span))
    return n


def probe_cap(spec: TrialSpec, first: int) -> int:
    """The most requests a probe whose first run sent ``first`` may pool."""
    search = spec.capacity
    cap = (search.extensions + 1) * first
    if search.max_prompts_per_probe is not None:
        cap = min(cap, search.max_prompts_per_probe)
    return max(first, cap)


def _text_sample(workload: Workload) -> bool:
    """A dataset whose requests are a file's text, which relabelling cannot change."""
    dataset = workload.dataset
    return isinstance(dataset, ShareGPTDataset | CustomDataset) or (
        isinstance(dataset, MultiTurnDataset) and dataset.path is not None)


def _rate_key(rate: float) -> int:
    return zlib.crc32(struct.pack("<d", round(rate, 9))) & 0x7FFF


def probe_workload(spec: TrialSpec, rate: float, index: int, run: int = 0,
                   num_prompts: int | None = None, *, sent: int | None = None) -> Workload:
    """Capacity probe ``index``'s run ``run`` at ``rate`` (module docstring): the
    workload's sample (extension ``run`` a fresh one), its own tokens, ``num_prompts``
    requests (default: :func:`first_run_size`), and the workload's warm-up on the first
    run of the first probe only (the engine stays up between probes: what warm-up pays
    for — first-request compilation, allocator growth — is paid once per boot).
    ``sent``: how many runs the probe sent before (a re-measured run gets other tokens)."""
    workload = spec.workload
    seed = workload.seed + PROBE_SEED_STRIDE * run
    if _text_sample(workload):
        seed += PROBE_SEED_STRIDE * 64 * _rate_key(rate)
    data = workload.model_dump()
    data["arrivals"]["request_rate"] = float(rate)
    data["num_prompts"] = num_prompts if num_prompts is not None \
        else first_run_size(spec, rate)
    if index > 0 or run > 0:
        data["warmup_requests"] = 0
    data["seed"] = seed
    data["token_seed"] = workload.seed + _TOKEN_SEED_STRIDE * (
        1 + index * 64 + (run if sent is None else sent))
    return Workload.model_validate(data)


def over_error_budget(spec: TrialSpec, score: Score, records: Sequence[RequestRecord]
                      ) -> str | None:
    """Why a run failed too many requests to be scored, or None (the gate's budget)."""
    gate = slo_gate(spec.slo, {c.metric: c.observed_ms for c in score.checks},
                    requests=score.num_requests, failed=score.failed,
                    max_error_rate=spec.max_error_rate)
    if gate.outcome != "over_budget":
        return None
    errors = sorted({r.error for r in records if r.error})[:3]
    return (f"{score.failed} of {score.num_requests} requests failed (bound "
            f"{spec.max_error_rate:.0%}): {'; '.join(errors)}")


def probe_medians(score: Score) -> dict[str, float]:
    """The median TTFT and TPOT of a run, ms (those it measured)."""
    return {metric: summary.median for metric in ("ttft", "tpot")
            if (summary := score.summaries.get(metric)) is not None and summary.median > 0}


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """One probe: its record, its runs pooled as one measurement, and what it cost."""

    probe: CapacityProbe
    measured: Measured
    warmup_s: float
    measure_s: float


async def measure_probe(spec: TrialSpec, backend: Backend, rate: float, index: int
                        ) -> ProbeOutcome:
    """Probe ``index`` at ``rate`` (module docstring): runs until its verdict is decided or
    its cap is reached."""
    first = first_run_size(spec, rate)
    cap = probe_cap(spec, first)
    runs: list[Measured] = []
    sent = 0
    retries = 0
    longer: int | None = None
    lengthened = False
    warmup_s = measure_s = 0.0
    while True:
        pooled_n = sum(m.score.num_requests for m in runs)
        size = first if not runs else longer or min(first, cap - pooled_n)
        workload = probe_workload(spec, rate, index, len(runs), size, sent=sent)
        sent += 1
        measured = await backend.measure(workload, abort_allowed=_abort_allowance(
            spec, runs, pooled_n + size))
        warmup_s += measured.warmup_s
        measure_s += measured.measure_s
        if measured.run.send_lag.client_bound and retries < CLIENT_BOUND_RETRIES:
            retries += 1  # the client's fault, not the engine's: measure it again
            continue
        runs.append(measured)
        verdict, record, tails = _judged(spec, rate, runs)
        pooled_n = sum(m.score.num_requests for m in runs)
        longer = None
        if verdict == "undecided" and not lengthened and not record.steady_window_s \
                and measured.run.early_abort is None:
            # Too short for its latency to say whether the queue grows: one run long
            # enough to, whatever the extensions (a verdict needs steady state); once.
            lengthened = True
            longer = max(size + 1, math.ceil(rate * judging_span_s(measured.run.records)))
            cap = max(cap, pooled_n + longer)
            continue
        if verdict != "undecided" or pooled_n >= cap or not worth_extending(
                tails, cap, spec.slo.percentile, spec.capacity.confidence):
            return ProbeOutcome(record, merge_runs(spec, runs), warmup_s, measure_s)


def _abort_allowance(spec: TrialSpec, runs: Sequence[Measured], planned: int
                     ) -> dict[str, int]:
    """How many more breakers of each per-request target the next run may see before the
    probe's bound can only fail, once ``planned`` requests are pooled."""
    slo = spec.slo
    fail_at = fail_threshold(planned, slo.percentile, spec.capacity.confidence)
    out: dict[str, int] = {}
    for metric, target in slo.targets.items():
        if metric == "itl":
            continue  # pooled over gaps, not requests: the runner does not watch it
        seen = sum(1 for m in runs for v in gate_values(metric, m.score.per_request)
                   if v * 1000.0 > target)
        out[metric] = fail_at - 1 - seen
    return out


def _judged(spec: TrialSpec, rate: float, runs: Sequence[Measured]
            ) -> tuple[ProbeVerdict, CapacityProbe, dict[str, TailBound]]:
    """The verdict of a probe's runs so far, its record, and its tails' bounds."""
    search, slo = spec.capacity, spec.slo
    per_request = [m for run in runs for m in run.score.per_request]
    tails = tail_bounds({metric: gate_values(metric, per_request) for metric in slo.targets},
                        slo, search.confidence)
    steady = pooled(steady_state(m.run.records, m.run.scrape) for m in runs)
    merged = merge_runs(spec, runs)
    sc = merged.score
    errors = over_error_budget(spec, sc, merged.run.records)
    last = runs[-1].run
    verdict = judge(tails, steady, client_bound=last.send_lag.client_bound,
                    over_error_budget=errors is not None,
                    aborted=last.early_abort is not None)
    hits = merged.run.scrape.counters.get(PREFIX_CACHE_HITS)
    sessions = session_summary(merged.run.records, hits)
    record = CapacityProbe(
        request_rate=rate, gate_passed=verdict == "pass", verdict=verdict,
        confidence=search.confidence, runs=len(runs),
        tails={metric: TailEvidence(n=t.n, exceeding=t.exceeding, allowed=t.allowed,
                                    fail_at=t.fail_at, upper_ms=t.upper_ms,
                                    lower_ms=t.lower_ms)
               for metric, t in tails.items()},
        **_steady_fields(steady),
        request_goodput=sc.request_goodput,
        ratios={c.metric: c.constraint + 1.0 for c in sc.checks},
        prefix_cache_hit_tokens=hits,
        in_session_hit_tokens=None if sessions is None
        else sessions["in_session_hit_tokens"],
        medians_ms=probe_medians(sc),
        percentiles_ms=gate_percentiles(sc.per_request,
                                        (*PROBE_PERCENTILES, slo.percentile)),
        num_requests=sc.num_requests, failed_requests=sc.failed, duration_s=sc.duration_s,
        request_throughput=sc.request_throughput, output_throughput=sc.output_throughput,
        total_token_throughput=sc.total_token_throughput,
        send_lag_p99_ms=merged.run.send_lag.p99_ms,
        client_bound=last.send_lag.client_bound,
        early_abort=last.early_abort.reason if last.early_abort else None,
        early_abort_metric=last.early_abort.metric if last.early_abort else None)
    return verdict, record, tails


def _steady_fields(steady: SteadyState) -> dict[str, Any]:
    if not steady.judged:
        return {"steady_window_s": 0.0}
    return {"offered_rate": steady.offered_rate, "completed_rate": steady.completed_rate,
            "queue_growth": steady.queue_growth, "waiting_growth": steady.waiting_growth,
            "queue_growth_se": steady.growth_se, "steady_window_s": steady.window_s}


def merge_runs(spec: TrialSpec, runs: Sequence[Measured]) -> Measured:
    """A probe's runs as one measurement, one after the other: records re-indexed and
    moved in time behind the runs before them, durations, counters and histograms summed,
    gauges joined — what its result's metrics are computed from."""

    if len(runs) == 1:
        return runs[0]
    records: list[RequestRecord] = []
    gauges: dict[str, list[tuple[float, float]]] = {}
    counters: dict[str, float] = {}
    histograms: dict[str, HistogramDelta] = {}
    offset = 0.0
    scrapes = 0
    for measured in runs:
        run = measured.run
        base = len(records)
        records.extend(replace(r, index=base + r.index, timings=_shifted(r, offset).timings)
                       for r in run.records)
        for name, series in run.scrape.gauges.items():
            gauges.setdefault(name, []).extend((t + offset, v) for t, v in series)
        for name, value in run.scrape.counters.items():
            counters[name] = counters.get(name, 0.0) + value
        for name, hist in run.scrape.histograms.items():
            before = histograms.get(name, HistogramDelta(0.0, 0.0))
            histograms[name] = HistogramDelta(before.count + hist.count, before.sum + hist.sum)
        scrapes += run.scrape.scrapes
        offset += run.duration_s
    first, last = runs[0].run, runs[-1].run
    scrape = ScrapeSummary(available=all(m.run.scrape.available for m in runs),
                           scrapes=scrapes, gauges=gauges, counters=counters,
                           histograms=histograms,
                           load_end_s=max((r.timings.start for r in records), default=0.0))
    lag = SendLag.of([r.timings.send_lag * 1000.0 for r in records], last.send_lag.tolerance_ms)
    run = BenchmarkRun(
        started_at=first.started_at, duration_s=offset, records=records,
        warmup_records=first.warmup_records, send_lag=lag, scrape=scrape,
        time_scale=first.time_scale, early_abort=last.early_abort,
        warnings=[w for m in runs for w in m.run.warnings], prompts_as=first.prompts_as,
        model=first.model, listed_model=first.listed_model)
    aborted = last.early_abort.reason if last.early_abort else None
    merged = score(records, offset, spec.slo, aborted=aborted)
    return Measured(run, merged, sum(m.warmup_s for m in runs),
                    sum(m.measure_s for m in runs))


def _shifted(record: RequestRecord, offset: float) -> RequestRecord:
    if offset == 0.0:
        return record
    t = record.timings
    return replace(record, timings=replace(
        t, target=t.target + offset, ready=t.ready + offset, start=t.start + offset,
        chunks=tuple(c + offset for c in t.chunks),
        end=None if t.end is None else t.end + offset))


# --- the capacity mode of a trial --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapacityOutcome:
    """A capacity search on one booted engine: every probe, the interval, the pooled
    measurement of each rate probed, and what it cost."""

    probes: tuple[CapacityProbe, ...]
    interval: CapacityInterval
    measured: Mapping[float, Measured]
    warmup_s: float
    measure_s: float

    @property
    def requests(self) -> int | None:
        """Requests of the probes at the interval's two ends (what it rests on)."""
        ends = {self.interval.low, self.interval.high} - {None}
        counts = [p.num_requests or 0 for p in self.probes if p.request_rate in ends]
        return sum(counts) if counts else None


async def measure_capacity(spec: TrialSpec, backend: Backend) -> CapacityOutcome:
    """Search ``spec``'s capacity on ``backend``'s booted engine."""
    probes: list[CapacityProbe] = []
    measured: dict[float, Measured] = {}
    warmup_s = measure_s = 0.0
    search = capacity_search(spec.capacity, spec.workload.arrivals.request_rate)
    rate = next(search)
    while True:
        await backend.before_probe()
        outcome = await measure_probe(spec, backend, rate, len(probes))
        probes.append(outcome.probe)
        measured[rate] = outcome.measured
        warmup_s += outcome.warmup_s
        measure_s += outcome.measure_s
        assert outcome.probe.verdict is not None
        try:
            rate = search.send(outcome.probe.verdict)
        except StopIteration as done:
            return CapacityOutcome(tuple(probes), done.value, measured, warmup_s, measure_s)
