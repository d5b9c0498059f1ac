"""The frontier: interactivity against throughput per GPU, over every configuration and rate.

A capacity trial probes one configuration at several rates; each probe is one point of
the trade-off a serving team chooses on: how fast each user's tokens arrive against how
many tokens one GPU serves (``vllm bench sweep plot_pareto``'s axes, AIConfigurator's
``pareto.csv``). For a (workload, model, GPU) this module gathers every stored probe of
every configuration (search runs and confirmation repeats) as a :class:`FrontierPoint`:

* **interactivity** — output tokens/s per user = 1000 ÷ TPOT (ms) at the SLO's
  percentile (p99 by default): the rate a user's tokens arrive at for all but the slowest
  1% of requests, so the SLO's TPOT target is a horizontal line on the chart;
* **throughput per GPU** — the replica's output tokens/s ÷ its GPUs (TP × PP), and, where
  the GPU is priced, output tokens per US dollar;
* whether the probe meets the SLO (:func:`slotune.tuner.planning.rescore.probe_verdict`, the one
  place that gates a stored probe), whether it is on the Pareto frontier (no other point has both
  more interactivity and more throughput per GPU: :func:`pareto_front`), and which one is the
  **winner** — the best-config view's trial for this SLO at the highest rate at which it met it
  (else, with no view row for this SLO, the passing point with the most requests/s per GPU).

It also gives the **capacity per GPU as a function of the SLO's limits**
(:class:`CapacityGrid`): for each (TTFT limit, TPOT limit) of a grid around the SLO, the
best configuration's rescored capacity per GPU (:mod:`slotune.tuner.planning.rescore`), with its
confidence — what relaxing or tightening either target buys.

The API (``GET /api/v1/workloads/NAME/frontier``, JSON or CSV), ``slotune frontier``,
the report and the dashboard all read :func:`build_frontier`; CSV is :func:`to_csv`.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from slotune.tuner.db.records import TrialRecord
from slotune.tuner.db.snapshot import SweepSnapshot, WorkloadSnapshot
from slotune.tuner.planning.planner import AmbiguousSlo, NothingMeasured, PlanError
from slotune.tuner.planning.rescore import (
    Verdict,
    combine,
    error_budget,
    probe_verdict,
    trial_capacity,
)
from slotune.workers.contracts import SLO, TrialResult, replica_gpus
from slotune.workers.loadgen.score.scoring import percentile_key

__all__ = ["CSV_FIELDS", "AmbiguousGroup", "CapacityGrid", "Frontier", "FrontierPoint",
           "build_frontier", "frontier_of", "pareto_front", "to_csv"]

TPOT_LIMITS_MS: tuple[float, ...] = (10, 15, 20, 30, 40, 50, 75, 100, 150)
TTFT_LIMITS_MS: tuple[float, ...] = (100, 200, 300, 500, 1000, 2000, 5000)
"""The grid of limits the capacity grid is read at (the SLO's own are added)."""


class AmbiguousGroup(PlanError):
    """The workload was measured on several (model, GPU) and the caller named none; its
    ``field`` (``model`` or ``gpu``) says what to name."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class FrontierPoint(BaseModel):
    """One probe of one configuration: a point of the trade-off."""

    model_config = ConfigDict(frozen=True)

    trial_id: int
    sweep_id: int
    role: str
    """``search`` or ``repeat`` (a confirmation re-run)."""
    config: dict[str, Any]
    gpus: int
    """GPUs of one replica (TP × PP)."""
    request_rate: float
    """The rate the probe offered (req/s, one replica)."""
    request_throughput: float | None
    output_tokens_per_s: float
    """Output tokens/s the replica served during the probe."""
    output_tps_per_gpu: float
    tokens_per_dollar: float | None
    """Output tokens per USD at the GPU's price (None: unpriced)."""
    tpot_ms: float | None
    """TPOT at the SLO's percentile (None: infinite — failed requests)."""
    ttft_ms: float | None
    interactivity_tps: float | None
    """Output tokens/s per user: 1000 ÷ ``tpot_ms``."""
    meets_slo: Verdict
    on_frontier: bool = False
    winner: bool = False


class CapacityGrid(BaseModel):
    """The best capacity per GPU (req/s) under each (TTFT limit, TPOT limit) at the SLO's
    percentile: ``per_gpu[i][j]`` is for ``ttft_ms[i]`` and ``tpot_ms[j]`` (None: no
    configuration's probes carry any rate under it, or they cannot tell)."""

    model_config = ConfigDict(frozen=True)

    percentile: float
    tpot_ms: list[float]
    ttft_ms: list[float]
    per_gpu: list[list[float | None]]
    confidence: list[list[str | None]]
    """``high``/``medium``/``low`` per cell (:class:`slotune.tuner.planning.rescore.Confidence`)."""


class Frontier(BaseModel):
    """Every probed point of a (workload, model, GPU), its Pareto frontier and winner."""

    model_config = ConfigDict(frozen=True)

    workload: str
    model: str
    gpu: str
    slo: str
    """Canonical SLO JSON (as in ``best_config_per_workload``)."""
    slo_text: str
    percentile: float
    tpot_target_ms: float | None
    ttft_target_ms: float | None
    min_interactivity_tps: float | None
    """The SLO's TPOT target as interactivity (1000 ÷ target): the chart's SLO line."""
    price_per_gpu_hour: float | None
    points: list[FrontierPoint]
    winner: FrontierPoint | None
    capacity: CapacityGrid
    notes: list[str] = []


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats (more ``x`` AND less ``y``: throughput and
    latency), sorted by x. A point equal to another one is kept once."""
    front = []
    for x, y in sorted(set(points)):
        dominated = any(ox >= x and oy <= y and (ox, oy) != (x, y) for ox, oy in points)
        if not dominated:
            front.append((x, y))
    return front


def build_frontier(snapshot: WorkloadSnapshot, *, model: str | None = None,
                   gpu: str | None = None, slo: str | None = None,
                   gpu_prices: Mapping[str, float] | None = None) -> Frontier:
    """The frontier of the snapshot's workload (``slo``: a canonical SLO key; default the
    one its sweeps used). Raises :class:`NothingMeasured` (no capacity probes),
    :class:`AmbiguousGroup` or :class:`AmbiguousSlo` (several measured and none named)."""
    workload = snapshot.name
    measured = [s for s in snapshot.sweeps if s.sweep.mode == "capacity"
                and (model is None or s.sweep.model == model)
                and (gpu is None or s.sweep.gpu == gpu)]
    sweeps = [s.sweep for s in measured]
    groups = sorted({(s.model, s.gpu) for s in sweeps})
    if not groups:
        raise NothingMeasured(f"no capacity sweep of workload {workload!r}"
                              + (f" on {model or ''} {gpu or ''}".rstrip() if model or gpu
                                 else "") + ": the frontier is drawn from capacity probes")
    if len(groups) > 1:
        field = "model" if len({m for m, _ in groups}) > 1 else "gpu"
        raise AmbiguousGroup(f"workload {workload!r} was measured on {len(groups)} (model, "
                             f"GPU): {', '.join(f'{m} on {g}' for m, g in groups)}; name one "
                             f"with {field}", field)
    chosen_model, chosen_gpu = groups[0]
    slos = sorted({s.slo_key for s in sweeps})
    if slo is None and len(slos) > 1:
        raise AmbiguousSlo(f"workload {workload!r} was measured under {len(slos)} SLOs "
                           f"({'; '.join(slos)}); name one with slo")
    key = slo or slos[0]
    trials = [(s, t) for s in measured for t in s.ok_trials()
              if t.role != "baseline" and t.result]
    best = [r.trial_id for r in snapshot.best
            if (r.model, r.gpu, r.slo) == (chosen_model, chosen_gpu, key)]
    price = dict(gpu_prices or {}).get(chosen_gpu)
    # The SLO asked for is one a sweep measured (already parsed) or one to rescore under.
    asked = next((s.slo for s in measured if s.sweep.slo_key == key), None)
    return frontier_of(trials, workload=workload, model=chosen_model, gpu=chosen_gpu,
                       slo=asked or SLO.model_validate_json(key), slo_key=key, price=price,
                       winner_trial=best[0] if best else None)


def frontier_of(trials: Sequence[tuple[SweepSnapshot, TrialRecord]], *, workload: str,
                model: str, gpu: str, slo: SLO, slo_key: str, price: float | None,
                winner_trial: int | None) -> Frontier:
    """The frontier of these stored trials (all of one model and GPU) under ``slo``."""
    pct = percentile_key(slo.percentile)
    points: list[FrontierPoint] = []
    rescored: dict[str, list[Any]] = {}
    notes: list[str] = []
    without = 0
    for measured, trial in trials:
        sweep, own = measured.sweep, measured.slo
        result = TrialResult.model_validate(trial.result)
        gpus = replica_gpus(trial.config)
        budget = error_budget(trial.spec)
        rescored.setdefault(json.dumps(trial.config, sort_keys=True, default=str),
                            []).append((result, own, budget, gpus, (trial.id, trial.finished_at)))
        for probe in result.capacity_probes:
            if probe.output_throughput is None:
                without += 1
                continue
            row = probe.percentiles_ms
            tpot = row.get("tpot", {}).get(pct)
            ttft = row.get("ttft", {}).get(pct)
            per_gpu = probe.output_throughput / gpus
            points.append(FrontierPoint(
                trial_id=trial.id, sweep_id=sweep.id, role=trial.role, config=trial.config,
                gpus=gpus, request_rate=probe.request_rate,
                request_throughput=probe.request_throughput,
                output_tokens_per_s=probe.output_throughput, output_tps_per_gpu=per_gpu,
                tokens_per_dollar=None if not price else per_gpu * 3600 / price,
                tpot_ms=tpot, ttft_ms=ttft,
                interactivity_tps=1000 / tpot if tpot else None,
                meets_slo=probe_verdict(probe, slo, own_slo=own,
                                        max_error_rate=budget).verdict))
    if without:
        notes.append(f"{without} probe(s) stored before probes kept their measurements are "
                     "not on the chart")
    points = _mark(points, winner_trial)
    winner = next((p for p in points if p.winner), None)
    targets = slo.targets
    return Frontier(
        workload=workload, model=model, gpu=gpu, slo=slo_key, slo_text=str(slo),
        percentile=slo.percentile, tpot_target_ms=targets.get("tpot"),
        ttft_target_ms=targets.get("ttft"),
        min_interactivity_tps=1000 / targets["tpot"] if "tpot" in targets else None,
        price_per_gpu_hour=price, points=points, winner=winner,
        capacity=_grid(rescored, slo), notes=notes)


CSV_FIELDS: tuple[str, ...] = (
    "trial_id", "sweep_id", "role", "gpus", "request_rate", "request_throughput",
    "output_tokens_per_s", "output_tps_per_gpu", "tokens_per_dollar", "tpot_ms", "ttft_ms",
    "interactivity_tps", "meets_slo", "on_frontier", "winner", "config")
"""The CSV's columns: a point's fields, ``config`` as JSON last."""


def to_csv(frontier: Frontier) -> str:
    """One row per point (a header first): what a spreadsheet or pandas reads."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for p in frontier.points:
        values = p.model_dump(mode="json")
        writer.writerow([json.dumps(values[f], sort_keys=True) if f == "config"
                         else "" if values[f] is None else values[f] for f in CSV_FIELDS])
    return out.getvalue()


# --- helpers -------------------------------------------------------------------------------

class _Memo:
    """A bounded, thread-safe memo of a pure function's answers (oldest entries go first)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        answer = compute()  # outside the lock: two threads may both compute, alike
        with self._lock:
            self._answers[key] = answer
            while len(self._answers) > self._size:
                self._answers.popitem(last=False)
        return answer


_RESCORED = _Memo(1 << 16)
"""A stored trial's capacity under one grid cell's limits, by (trial id, when it finished,
its sweep's SLO, its error budget, the limits). Nearly all of the frontier's cost is this
grid, and a finished trial's result is written once (only an unfinished trial can
finish), so after a write only the new trial's cells are computed again."""


def _mark(points: list[FrontierPoint], winner_trial: int | None) -> list[FrontierPoint]:
    """Set ``on_frontier`` and ``winner`` (see the module docstring)."""
    # More interactivity is less TPOT: the latency-vs-throughput front is the same set.
    front = set(pareto_front([(p.output_tps_per_gpu, p.tpot_ms) for p in points
                              if p.tpot_ms is not None]))
    passing = [p for p in points if p.meets_slo == "pass"]
    chosen = [p for p in passing if p.trial_id == winner_trial] or passing
    win = max(chosen, key=lambda p: (p.request_rate / p.gpus, p.interactivity_tps or 0.0),
              default=None)
    return [p.model_copy(update={
        "on_frontier": p.tpot_ms is not None and (p.output_tps_per_gpu, p.tpot_ms) in front,
        "winner": p is win}) for p in points]


def _grid(rescored: Mapping[str, list[Any]], slo: SLO) -> CapacityGrid:
    targets = slo.targets
    tpots = sorted({*TPOT_LIMITS_MS, *([targets["tpot"]] if "tpot" in targets else [])})
    ttfts = sorted({*TTFT_LIMITS_MS, *([targets["ttft"]] if "ttft" in targets else [])})
    per_gpu: list[list[float | None]] = []
    levels: list[list[str | None]] = []
    for ttft in ttfts:
        row: list[float | None] = []
        level_row: list[str | None] = []
        for tpot in tpots:
            limits = SLO(percentile=slo.percentile, ttft=ttft, tpot=tpot)
            best: tuple[float, str] | None = None
            for measurements in rescored.values():
                found = [_RESCORED.get((stored, own, budget, limits), functools.partial(
                    trial_capacity, result, limits, own_slo=own, max_error_rate=budget))
                    for result, own, budget, _, stored in measurements]
                rate, confidence = combine(found)
                if rate:
                    value = rate / measurements[0][3]
                    if best is None or value > best[0]:
                        best = (value, confidence.level)
            row.append(None if best is None else best[0])
            level_row.append(None if best is None else best[1])
        per_gpu.append(row)
        levels.append(level_row)
    return CapacityGrid(percentile=slo.percentile, tpot_ms=tpots, ttft_ms=ttfts,
                        per_gpu=per_gpu, confidence=levels)
