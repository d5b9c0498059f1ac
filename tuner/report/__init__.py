"""Sweep reports (DESIGN §1, §8): what the platform team reads in the morning.

``render_report(store, sweep_id, "html" | "md")`` gives one self-contained HTML page
(inline CSS and SVG charts, no external assets) or Markdown (tables instead of charts);
``write_report(store, sweep_id, directory)`` writes both. Each says: the winner, how sure
we are of it, its ``vllm serve`` command line, the binding constraint at the winner and
what to do next, the curves, the experiment cards, the failures.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Literal

from tuner.db.errors import NotFound
from tuner.report._analysis import (
    Confidence,
    NextStep,
    SweepReport,
    TrialPoint,
    analyse,
    pareto_front,
    vllm_command,
)
from tuner.report._render import charts, render_html, render_markdown
from tuner.report._svg import Chart, RefLine, Series, nice_ticks, render_chart
from tuner.store import Store

__all__ = [
    "Chart",
    "Confidence",
    "NextStep",
    "RefLine",
    "ReportFormat",
    "ReportPathError",
    "Series",
    "SweepReport",
    "TrialPoint",
    "analyse",
    "build_report",
    "charts",
    "nice_ticks",
    "pareto_front",
    "render_chart",
    "render_report",
    "vllm_command",
    "write_report",
]

ReportFormat = Literal["html", "md"]


def build_report(store: Store, sweep_id: int) -> SweepReport:
    """Read the sweep, its trials, cards and its workload's best rows; analyse them.

    :class:`~tuner.store.NotFound` for an unknown sweep.
    """
    sweep = store.get_sweep(sweep_id)
    trials = store.list_trials(sweep_id).data
    cards = store.list_cards(sweep_id)
    try:
        spec = store.get_workload(sweep.workload).spec
        best = store.best_for_workload(sweep.workload)
    except NotFound:
        spec, best = {}, []
    return analyse(sweep, trials, cards, workload_spec=spec, best_rows=best)


def render_report(store: Store, sweep_id: int, fmt: ReportFormat = "html") -> str:
    """The report of sweep ``sweep_id`` as HTML or Markdown text."""
    report = build_report(store, sweep_id)
    if fmt == "html":
        return render_html(report)
    if fmt == "md":
        return render_markdown(report)
    raise ValueError(f"unknown report format {fmt!r}; valid: html, md")


class ReportPathError(ValueError):
    """The report's directory or one of its files is a symlink (or not a directory)."""


def write_report(store: Store, sweep_id: int, directory: str | Path) -> tuple[Path, Path]:
    """Write ``sweep-<id>.html`` and ``sweep-<id>.md`` into ``directory`` (created).

    The rule for where a report goes: ``directory`` is created when missing; when it
    exists it must be a real directory, not a symlink, and the two report files are
    opened without following symlinks, so a link planted there cannot redirect the
    write elsewhere (:class:`ReportPathError`). Nothing is written until both are
    rendered. (The API never writes reports; it renders them into the response.)
    """
    report = build_report(store, sweep_id)
    pages = {f"sweep-{sweep_id}.html": render_html(report),
             f"sweep-{sweep_id}.md": render_markdown(report)}
    folder = Path(directory)
    if folder.is_symlink():
        raise ReportPathError(f"report directory {folder} is a symlink; give a real "
                              "directory (or a new path, created for you)")
    if folder.exists() and not folder.is_dir():
        raise ReportPathError(f"report directory {folder} exists and is not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages.items():
        path = folder / name
        _write_no_follow(path, text)
        written.append(path)
    return written[0], written[1]


def _write_no_follow(path: Path, text: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReportPathError(f"report file {path} is a symlink; remove it or choose "
                                  "another directory") from None
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
