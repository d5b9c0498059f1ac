"""Sweep reports (DESIGN §1, §8): what the platform team reads in the morning.

``render_report(store, sweep_id, "html" | "md")`` gives one self-contained HTML page
(inline CSS and SVG charts, no external assets) or Markdown (tables instead of charts);
``write_report(store, sweep_id, directory)`` writes both. Both read the sweep's workload
once (:func:`slotune.tuner.db.snapshot.load_workload`); :func:`build_report` and :func:`render`
are functions of that snapshot (the API caches it). Each leads with the answer (a
capacity sweep: what one replica carries and the replicas the workload's rate needs),
then says: the winner, how sure
we are of it, its ``vllm serve`` command line, the binding constraint at the winner and
what to do next, what the quality gate checked, the curves, the experiment cards, the
failures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from slotune.tuner.db.errors import NotFound
from slotune.tuner.db.snapshot import (
    SweepSnapshot,
    WorkloadSnapshot,
    load_workload,
    workload_of_sweep,
)
from slotune.tuner.db.store import Store
from slotune.tuner.planning.answer import sweep_answer
from slotune.tuner.planning.frontier import Frontier, build_frontier
from slotune.tuner.planning.planner import PlanError
from slotune.tuner.report._analysis import (
    Confidence,
    NextStep,
    SweepReport,
    TrialPoint,
    analyse,
    pareto_front,
)
from slotune.tuner.report._paths import (
    ReportPathError,
    ReportWriteError,
    prepare_report_dir,
    write_no_follow,
)
from slotune.tuner.report._render import charts, render_html, render_markdown
from slotune.tuner.report._svg import Chart, RefLine, Series, nice_ticks, render_chart
from slotune.tuner.settings import get_settings

__all__ = [
    "Chart",
    "Confidence",
    "NextStep",
    "RefLine",
    "ReportFormat",
    "ReportPathError",
    "ReportWriteError",
    "Series",
    "SweepReport",
    "TrialPoint",
    "analyse",
    "build_report",
    "charts",
    "load_report_snapshot",
    "nice_ticks",
    "pareto_front",
    "prepare_report_dir",
    "render",
    "render_chart",
    "render_report",
    "write_report",
]

ReportFormat = Literal["html", "md"]


def load_report_snapshot(store: Store, sweep_id: int) -> WorkloadSnapshot:
    """What a report of sweep ``sweep_id`` reads: its workload's snapshot (:class:`NotFound`
    for an unknown sweep)."""
    return load_workload(store, workload_of_sweep(store, sweep_id))


def build_report(snapshot: WorkloadSnapshot, sweep_id: int) -> SweepReport:
    """Analyse sweep ``sweep_id`` of the snapshot: its trials, cards and its workload's
    best rows, the answer and the frontier.

    :class:`~slotune.tuner.db.errors.NotFound` for a sweep the snapshot does not hold.
    """
    measured = snapshot.sweep(sweep_id)
    if measured is None:
        raise NotFound(f"no sweep {sweep_id}")
    sweep, spec = measured.sweep, snapshot.workload.spec
    answer = sweep_answer(snapshot, sweep) if spec else None
    return analyse(sweep, list(measured.trials), list(measured.cards), workload_spec=spec,
                   best_rows=list(snapshot.best), answer=answer,
                   frontier=_frontier(snapshot, measured) if spec else None)


def _frontier(snapshot: WorkloadSnapshot, measured: SweepSnapshot) -> Frontier | None:
    """The frontier under this sweep's SLO (None: a goodput sweep, no probes kept)."""
    sweep = measured.sweep
    if sweep.mode != "capacity":
        return None
    try:
        prices = get_settings().planner.prices(None)
    except ValueError:  # a bad SLOTUNE_GPU_PRICES: the report goes out unpriced
        prices = {}
    try:
        return build_frontier(snapshot, model=sweep.model, gpu=sweep.gpu, slo=sweep.slo_key,
                              gpu_prices=prices)
    except PlanError:
        return None


def render(report: SweepReport, fmt: ReportFormat = "html") -> str:
    """A built report as HTML or Markdown text."""
    if fmt == "html":
        return render_html(report)
    if fmt == "md":
        return render_markdown(report)
    raise ValueError(f"unknown report format {fmt!r}; valid: html, md")


def render_report(store: Store, sweep_id: int, fmt: ReportFormat = "html") -> str:
    """The report of sweep ``sweep_id`` as HTML or Markdown text."""
    return render(build_report(load_report_snapshot(store, sweep_id), sweep_id), fmt)


def write_report(store: Store, sweep_id: int, directory: str | Path) -> tuple[Path, Path]:
    """Write ``sweep-<id>.html`` and ``sweep-<id>.md`` into ``directory`` (created).

    Where a report may go is :func:`prepare_report_dir`'s rule (no planted symlink, a
    writable directory; :class:`ReportPathError` otherwise). Nothing is written until
    both pages are rendered, and each page is written whole or not at all
    (:class:`ReportWriteError`). (The API never writes reports; it renders them.)
    """
    report = build_report(load_report_snapshot(store, sweep_id), sweep_id)
    pages = {f"sweep-{sweep_id}.html": render_html(report),
             f"sweep-{sweep_id}.md": render_markdown(report)}
    folder = prepare_report_dir(directory)
    written = []
    for name, text in pages.items():
        path = folder / name
        write_no_follow(path, text)
        written.append(path)
    return written[0], written[1]
