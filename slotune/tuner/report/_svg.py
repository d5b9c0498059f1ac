"""Small SVG charts for the report: scatter/line series, reference lines, axes, no deps.

The report is one self-contained HTML file, so its charts are inline SVG written here
rather than images from matplotlib. One chart is a plot area with a linear y axis (from
zero unless data goes below it), an x axis that is numeric (linear, or log when the
values span a wide positive range, as knob ladders like 512…16384 do) or categorical
(booleans, strings, ``None``), any number of series, and horizontal reference lines (the
SLO target). Every point is a ``<circle>`` carrying its data as ``data-x``/``data-y`` and
a tooltip, so tests and readers can check where it landed. A series can stand out
(``radius``, ``stroke``, ``label``): the frontier chart's winner is one such point.

Why hand-drawn SVG and not a charting library (checked again for the frontier chart):
the report is a single HTML file mailed and archived after a night's sweep, and the
dashboard must work offline. A library would have to be vendored twice (as a Python
renderer for the report, as a served JS file for the dashboard — e.g. Vega-Lite with
vega and vega-embed is about 800 KB of JS, Plotly about 3.5 MB) to draw what these
charts need: scatter points, a joined front, dashed reference lines, a legend and a
marked point, on linear or log axes. That is the ~250 lines here (and their JS twin,
``slotune/tuner/dashboard/static/charts.js``), with every point carrying its data for tests. A
library earns its weight with zoom, brushing or many chart kinds; none is asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Literal

__all__ = ["Chart", "RefLine", "Series", "XValue", "nice_ticks", "render_chart"]

XValue = float | int | str | bool | None
"""A point's x: a number, or anything else (a category)."""

WIDTH = 560
HEIGHT = 300
MARGIN_LEFT = 64
MARGIN_RIGHT = 16
MARGIN_TOP = 30
MARGIN_BOTTOM = 48
PALETTE = ("#2563eb", "#d97706", "#059669", "#7c3aed", "#dc2626", "#0891b2")


@dataclass(frozen=True, slots=True)
class Series:
    """Points of one kind; ``line`` joins them in x order, ``markers`` draws each point."""

    name: str
    points: Sequence[tuple[XValue, float]]
    line: bool = False
    markers: bool = True
    color: str | None = None
    radius: float = 3.5
    stroke: str | None = None
    """An outline around each marker (a point that must stand out)."""
    label: str | None = None
    """Text written beside each marker (the winner)."""


@dataclass(frozen=True, slots=True)
class RefLine:
    """A horizontal line at ``y`` (an SLO target), labelled."""

    y: float
    label: str
    color: str = "#dc2626"


@dataclass(frozen=True, slots=True)
class Chart:
    """What to draw. ``chart_id`` becomes the root's ``data-chart`` attribute."""

    chart_id: str
    title: str
    x_label: str
    y_label: str
    series: Sequence[Series]
    ref_lines: Sequence[RefLine] = field(default_factory=tuple)
    x_scale: Literal["auto", "linear", "log", "category"] = "auto"
    width: int = WIDTH
    height: int = HEIGHT


def render_chart(chart: Chart) -> str:
    """The chart as one ``<svg>`` element (a string)."""
    xs = [x for s in chart.series for x, _ in s.points]
    ys = [y for s in chart.series for _, y in s.points if _finite(y)]
    ys += [r.y for r in chart.ref_lines]
    left, top = MARGIN_LEFT, MARGIN_TOP
    right, bottom = chart.width - MARGIN_RIGHT, chart.height - MARGIN_BOTTOM
    x_axis = _XAxis.build(xs, chart.x_scale, left, right)
    y_ticks = nice_ticks(min([0.0, *ys]), max([0.0, *ys]) or 1.0)
    y_lo, y_hi = y_ticks[0], y_ticks[-1]

    def ypos(y: float) -> float:
        return bottom - (y - y_lo) / (y_hi - y_lo) * (bottom - top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" '
        f'data-chart="{escape(chart.chart_id)}" viewBox="0 0 {chart.width} {chart.height}" '
        f'width="{chart.width}" height="{chart.height}" role="img" '
        f'aria-label="{escape(chart.title)}" font-family="sans-serif" font-size="11">',
        f'<text class="title" x="{left}" y="16" font-size="13" font-weight="bold">'
        f"{escape(chart.title)}</text>",
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
        'fill="#fafafa" stroke="#ccc"/>',
    ]
    for tick in y_ticks:
        y = ypos(tick)
        out.append(f'<line x1="{left}" x2="{right}" y1="{_f(y)}" y2="{_f(y)}" stroke="#e5e5e5"/>'
                   f'<text class="ytick" x="{left - 6}" y="{_f(y + 4)}" text-anchor="end">'
                   f"{escape(_tick_label(tick))}</text>")
    for value, label in x_axis.ticks():
        tx = x_axis.pos(value)
        out.append(f'<line x1="{_f(tx)}" x2="{_f(tx)}" y1="{bottom}" y2="{bottom + 4}" '
                   f'stroke="#888"/><text class="xtick" x="{_f(tx)}" y="{bottom + 16}" '
                   f'text-anchor="middle">{escape(label)}</text>')
    out.append(f'<text class="xlabel" x="{(left + right) / 2:g}" y="{chart.height - 8}" '
               f'text-anchor="middle">{escape(chart.x_label)}</text>')
    out.append(f'<text class="ylabel" transform="translate(14 {(top + bottom) / 2:g}) '
               f'rotate(-90)" text-anchor="middle">{escape(chart.y_label)}</text>')
    for ref in chart.ref_lines:
        y = ypos(ref.y)
        out.append(f'<line class="ref" data-y="{ref.y:g}" x1="{left}" x2="{right}" '
                   f'y1="{_f(y)}" y2="{_f(y)}" stroke="{ref.color}" stroke-dasharray="6 4"/>'
                   f'<text class="ref-label" x="{right - 4}" y="{_f(y - 4)}" '
                   f'text-anchor="end" fill="{ref.color}">{escape(ref.label)}</text>')
    legend_x = left + 8.0
    for i, series in enumerate(chart.series):
        color = series.color or PALETTE[i % len(PALETTE)]
        points = [(x, y) for x, y in series.points if _finite(y)]
        out.append(f'<g class="series" data-series="{escape(series.name)}">')
        if series.line and len(points) > 1:
            path = sorted(((x_axis.pos(x), ypos(y)) for x, y in points), key=lambda p: p[0])
            coords = " ".join(f"{_f(px)},{_f(py)}" for px, py in path)
            out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" '
                       'stroke-width="1.5"/>')
        if series.markers:
            for x, y in points:
                label = f"{series.name}: {_x_label(x)} → {y:.4g}"
                cx, cy = x_axis.pos(x), ypos(y)
                outline = (f'stroke="{series.stroke}" stroke-width="2" ' if series.stroke
                           else "")
                out.append(f'<circle class="pt" cx="{_f(cx)}" cy="{_f(cy)}" '
                           f'r="{series.radius:g}" fill="{color}" fill-opacity="0.75" '
                           f'{outline}data-x="{escape(_x_label(x))}" data-y="{y!r}">'
                           f"<title>{escape(label)}</title></circle>")
                if series.label:  # beside the point, on the side with room for it
                    left_side = cx > right - 8 * len(series.label) - series.radius
                    tx = cx - series.radius - 3 if left_side else cx + series.radius + 3
                    out.append(f'<text class="pt-label" x="{_f(tx)}" '
                               f'y="{_f(cy - series.radius - 2)}" font-weight="bold" '
                               f'text-anchor="{"end" if left_side else "start"}">'
                               f"{escape(series.label)}</text>")
        out.append("</g>")
        if len(chart.series) > 1:
            out.append(f'<rect x="{_f(legend_x)}" y="{top + 6}" width="10" height="10" '
                       f'fill="{color}"/><text class="legend" x="{_f(legend_x + 14)}" '
                       f'y="{top + 15}">{escape(series.name)}</text>')
            legend_x += 24 + 6.5 * len(series.name)
    if not xs:
        out.append(f'<text x="{(left + right) / 2:g}" y="{(top + bottom) / 2:g}" '
                   'text-anchor="middle" fill="#888">no data</text>')
    out.append("</svg>")
    return "".join(out)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    start = math.floor(lo / step + 1e-9) * step
    ticks = [start]
    while ticks[-1] < hi - 1e-9 * step:
        ticks.append(ticks[-1] + step)
    return [round(t, 12) for t in ticks]


# --- x axis ---------------------------------------------------------------------------------

def _is_number(x: XValue) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and _finite(float(x))


@dataclass(frozen=True, slots=True)
class _XAxis:
    kind: Literal["linear", "log", "category"]
    left: float
    right: float
    lo: float = 0.0
    hi: float = 1.0
    categories: tuple[str, ...] = ()
    distinct: tuple[float, ...] = ()
    knob_ticks: bool = True
    """Tick every distinct value (a knob's ladder) rather than round numbers."""

    @classmethod
    def build(cls, xs: Sequence[XValue], scale: str, left: float, right: float) -> _XAxis:
        numeric = bool(xs) and all(_is_number(x) for x in xs)
        if scale == "category" or not numeric:
            cats = tuple(dict.fromkeys(_x_label(x) for x in sorted(xs, key=_category_order)))
            return cls("category", left, right, categories=cats)
        values = sorted({float(x) for x in xs if isinstance(x, int | float)})
        lo, hi = values[0], values[-1]
        log = scale == "log" or (scale == "auto" and lo > 0 and hi / lo >= 16)
        if log:
            return cls("log", left, right, math.log10(lo), math.log10(hi), (),
                        tuple(values), scale != "log")
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        return cls("linear", left, right, lo, hi, (), tuple(values), scale == "auto")

    def pos(self, x: XValue) -> float:
        inner_l, inner_r = self.left + 24, self.right - 24  # keep end points off the frame
        if self.kind == "category":
            n = len(self.categories)
            i = self.categories.index(_x_label(x)) if _x_label(x) in self.categories else 0
            if n == 1:
                return (inner_l + inner_r) / 2
            return inner_l + i * (inner_r - inner_l) / (n - 1)
        v = float(x) if isinstance(x, int | float) else 0.0
        if self.kind == "log":
            v = math.log10(v)
        if self.hi == self.lo:
            return (inner_l + inner_r) / 2
        return inner_l + (v - self.lo) / (self.hi - self.lo) * (inner_r - inner_l)

    def ticks(self) -> list[tuple[XValue, str]]:
        if self.kind == "category":
            return [(c, c) for c in self.categories]
        if self.knob_ticks and len(self.distinct) <= 8:
            return [(v, _tick_label(v)) for v in self.distinct]
        if self.kind == "log":
            lo, hi = math.floor(self.lo), math.ceil(self.hi)
            return [(10.0 ** p, _tick_label(10.0 ** p)) for p in range(lo, hi + 1)
                    if self.lo - 1e-9 <= p <= self.hi + 1e-9]
        return [(t, _tick_label(t)) for t in nice_ticks(self.lo, self.hi)
                if self.lo - 1e-9 <= t <= self.hi + 1e-9]


def _category_order(x: XValue) -> tuple[int, float, str]:
    if x is None:
        return (0, 0.0, "")
    if isinstance(x, bool):
        return (1, float(x), "")
    if isinstance(x, int | float):
        return (2, float(x), "")
    return (3, 0.0, str(x))


def _x_label(x: XValue) -> str:
    if x is None:
        return "none"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def _tick_label(v: float) -> str:
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.1e}"
    return f"{v:.6g}"


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _f(v: float) -> str:
    return f"{v:.1f}"
