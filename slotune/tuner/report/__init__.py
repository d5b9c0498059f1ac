"""Sweep reports (DESIGN §1, §8): what the platform team reads in the morning.

``render_report(store, sweep_id, "html" | "md")`` gives one self-contained HTML page
(inline CSS and SVG charts, no external assets) or Markdown (tables instead of charts);
``write_report(store, sweep_id, directory)`` writes both. Each leads with the answer (a
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
from slotune.tuner.db.records import SweepRecord
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
    "nice_ticks",
    "pareto_front",
    "prepare_report_dir",
    "render_chart",
    "render_report",
    "write_report",
]

ReportFormat = Literal["html", "md"]


def build_report(store: Store, sweep_id: int) -> SweepReport:
    """Read the sweep, its trials, cards and its workload's best rows; analyse them.

    :class:`~slotune.tuner.db.store.NotFound` for an unknown sweep.
    """
    sweep = store.get_sweep(sweep_id)
    trials = store.list_trials(sweep_id, role="any").data
    cards = store.list_cards(sweep_id)
    try:
        spec = store.get_workload(sweep.workload).spec
        best = store.best_for_workload(sweep.workload)
    except NotFound:
        spec, best = {}, []
    answer = sweep_answer(store, sweep) if spec else None
    return analyse(sweep, trials, cards, workload_spec=spec, best_rows=best,
                   answer=answer,
                   frontier=_frontier(store, sweep) if spec else None)


def _frontier(store: Store, sweep: SweepRecord) -> Frontier | None:
    """The frontier under this sweep's SLO (None: a goodput sweep, no probes kept)."""
    if sweep.mode != "capacity":
        return None
    try:
        prices = get_settings().planner.prices(None)
    except ValueError:  # a bad SLOTUNE_GPU_PRICES: the report goes out unpriced
        prices = {}
    try:
        return build_frontier(store, workload=sweep.workload, model=sweep.model,
                              gpu=sweep.gpu, slo=sweep.slo_key, gpu_prices=prices)
    except (PlanError, NotFound):
        return None


def render_report(store: Store, sweep_id: int, fmt: ReportFormat = "html") -> str:
    """The report of sweep ``sweep_id`` as HTML or Markdown text."""
    report = build_report(store, sweep_id)
    if fmt == "html":
        return render_html(report)
    if fmt == "md":
        return render_markdown(report)
    raise ValueError(f"unknown report format {fmt!r}; valid: html, md")


def write_report(store: Store, sweep_id: int, directory: str | Path) -> tuple[Path, Path]:
    """Write ``sweep-<id>.html`` and ``sweep-<id>.md`` into ``directory`` (created).

    Where a report may go is :func:`prepare_report_dir`'s rule (no planted symlink, a
    writable directory; :class:`ReportPathError` otherwise). Nothing is written until
    both pages are rendered, and each page is written whole or not at all
    (:class:`ReportWriteError`). (The API never writes reports; it renders them.)
    """
    report = build_report(store, sweep_id)
    pages = {f"sweep-{sweep_id}.html": render_html(report),
             f"sweep-{sweep_id}.md": render_markdown(report)}
    folder = prepare_report_dir(directory)
    written = []
    for name, text in pages.items():
        path = folder / name
        write_no_follow(path, text)
        written.append(path)
    return written[0], written[1]
