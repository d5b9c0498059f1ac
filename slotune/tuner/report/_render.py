"""Lay a :class:`SweepReport` out as self-contained HTML (inline SVG charts) or Markdown.

Both carry the same sections in the same order: winner and confidence, the command
line, next step, ties, curves (charts in HTML, tables in Markdown), Pareto front, the
frontier of every probe (capacity sweeps: :func:`frontier_charts`, the capacity per GPU
under other TTFT/TPOT limits), experiment cards, failures, utilisation (where the trials'
time went), every trial.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Sequence
from html import escape
from typing import Any

from slotune.tuner.db.records import CardRecord
from slotune.tuner.planning.answer import capacity_text
from slotune.tuner.planning.frontier import Frontier, FrontierPoint
from slotune.tuner.report._analysis import (
    LATENCY_METRICS,
    UTILISATION_PARTS,
    SweepReport,
    TrialPoint,
    Utilisation,
)
from slotune.tuner.report._svg import Chart, RefLine, Series, render_chart
from slotune.tuner.sweep.progress import TwinProgress
from slotune.workers.contracts import BOOT_PHASES

__all__ = ["charts", "frontier_charts", "render_html", "render_markdown"]

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:1200px;
color:#1f2937;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem}h2{border-bottom:1px solid #e5e7eb;padding-bottom:.2rem;margin-top:2rem}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
pre{background:#f3f4f6;padding:.75rem;border-radius:6px;white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9em}
th,td{border:1px solid #e5e7eb;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f9fafb}.num{text-align:right;font-variant-numeric:tabular-nums}
.charts{display:flex;flex-wrap:wrap;gap:1rem}.note{background:#fffbeb;border-left:4px solid #d97706;
padding:.5rem .75rem}.ok{color:#059669}.bad{color:#dc2626}.muted{color:#6b7280}
.card{border:1px solid #e5e7eb;border-radius:6px;padding:.5rem .75rem;margin:.5rem 0}
"""

_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


def charts(report: SweepReport) -> list[Chart]:
    """Every chart of the report: per knob goodput and p99 latencies, then Pareto fronts."""
    out = []
    for knob in report.knobs:
        points = report.knob_points(knob, "request_goodput")
        best = [(v, t.goodput) for v, t in report.best_per_value(knob) if t.goodput is not None]
        out.append(Chart(
            f"goodput-vs-{knob}", f"goodput vs {knob}", knob, "request goodput (req/s)",
            [Series("trials", points), Series("best per value", [(v, g) for v, g in best if
                                                                 g is not None],
                                              line=True, markers=False, color="#111827")]))
        for metric in LATENCY_METRICS:
            name = _LABELS[metric]
            out.append(Chart(
                f"p99-{metric}-vs-{knob}", f"p99 {name} vs {knob}", knob, f"p99 {name} (ms)",
                [Series("trials", report.knob_points(knob, f"p99_{metric}_ms"))],
                _refs(report, metric)))
    for metric in LATENCY_METRICS:
        name = _LABELS[metric]
        points, front = report.pareto(metric)
        out.append(Chart(
            f"pareto-{metric}", f"Pareto front: p99 {name} vs throughput",
            "request throughput (req/s)", f"p99 {name} (ms)",
            [Series("trials", points), Series("Pareto front", front, line=True,
                                              color="#111827")],
            _refs(report, metric), x_scale="linear"))
    return out


def frontier_charts(frontier: Frontier) -> list[Chart]:
    """Interactivity against output tokens/s per GPU (and per dollar where priced): the
    probes that meet the SLO and those that do not, the Pareto frontier, the SLO's TPOT
    target as a line, the winner marked. The dashboard draws the same from the API."""
    pct = f"p{frontier.percentile:g}"
    y_label = f"output tokens/s per user (1000 ÷ {pct} TPOT)"
    refs = [] if frontier.min_interactivity_tps is None else [RefLine(
        frontier.min_interactivity_tps,
        f"SLO {pct} TPOT ≤ {frontier.tpot_target_ms:g} ms = "
        f"{frontier.min_interactivity_tps:.3g} tok/s per user")]
    axes = [("frontier", "per GPU", "output tokens/s per GPU",
             lambda p: p.output_tps_per_gpu)]
    if frontier.price_per_gpu_hour:
        axes.append(("frontier-dollar", "per dollar", f"output tokens per US$ "
                     f"(${frontier.price_per_gpu_hour:g}/GPU-h)",
                     lambda p: p.tokens_per_dollar or 0.0))
    out = []
    for chart_id, per, x_label, x_of in axes:
        def pts(keep: Any, x_of: Any = x_of) -> list[tuple[float, float]]:
            return [(x_of(p), p.interactivity_tps) for p in frontier.points
                    if p.interactivity_tps is not None and keep(p)]
        series = [
            Series("meets the SLO", pts(lambda p: p.meets_slo == "pass"), color="#059669"),
            Series("breaks it", pts(lambda p: p.meets_slo == "fail"), color="#9ca3af"),
            Series("cannot tell", pts(lambda p: p.meets_slo == "unknown"), color="#d97706"),
            Series("Pareto frontier", pts(lambda p: p.on_frontier), line=True,
                   markers=False, color="#111827"),
            Series("winner", pts(lambda p: p.winner), color="#f59e0b", radius=7,
                   stroke="#111827", label="winner"),
        ]
        out.append(Chart(chart_id, f"Frontier {per}: {frontier.model} on {frontier.gpu}, "
                         "every configuration and probed rate", x_label, y_label,
                         [s for s in series if s.points or s.name == "winner"], refs,
                         x_scale="linear", width=760, height=380))
    return out


def _frontier_grid(frontier: Frontier) -> tuple[list[str], list[list[str]]]:
    grid = frontier.capacity
    headers = [f"p{grid.percentile:g} TTFT limit ↓ / TPOT limit →",
               *(f"{t:g} ms" for t in grid.tpot_ms)]
    rows = [[f"{ttft:g} ms", *("—" if v is None else f"{v:.3g} ({c})"
                               for v, c in zip(grid.per_gpu[i], grid.confidence[i],
                                               strict=True))]
            for i, ttft in enumerate(grid.ttft_ms)]
    return headers, rows


def _frontier_rows(frontier: Frontier) -> tuple[list[str], list[list[str]]]:
    headers = ["trial", "req/s offered", "output tok/s per GPU", "tok/s per user",
               f"p{frontier.percentile:g} TPOT ms", f"p{frontier.percentile:g} TTFT ms",
               "SLO", "configuration"]
    shown: list[FrontierPoint] = sorted((p for p in frontier.points
                                         if p.on_frontier or p.winner),
                                        key=lambda p: p.output_tps_per_gpu)
    return headers, [[f"{p.trial_id}" + (" (winner)" if p.winner else ""),
                      _num(p.request_rate), _num(p.output_tps_per_gpu),
                      _num(p.interactivity_tps), _num(p.tpot_ms), _num(p.ttft_ms),
                      p.meets_slo, _compact(p.config)] for p in shown]


def _refs(report: SweepReport, metric: str) -> list[RefLine]:
    target = report.slo_targets.get(metric)
    if target is None:
        return []
    return [RefLine(target, f"SLO p{report.slo_percentile:g} {_LABELS[metric]} ≤ {target:g} ms")]


# --- HTML ---------------------------------------------------------------------------------

def render_html(report: SweepReport) -> str:
    s = report.sweep
    e = escape
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>slotune report — sweep {s.id} {e(s.name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Sweep {s.id}: {e(s.name)}</h1>",
        *([f"<p class='answer'><strong>{e(report.answer)}</strong></p>"]
          if report.answer else []),
        _html_table(["workload", "model", "GPU", "SLO", "strategy", "mode", "status",
                     "stop reason"],
                    [[s.workload, s.model, s.gpu, _slo_text(report), s.strategy, s.mode,
                      s.status, s.stop_reason or "—"]]),
        "<h2 id='winner'>Winner</h2>",
    ]
    w = report.winner
    if w is None:
        parts.append("<p class='bad'>No configuration met the SLO.</p>")
    else:
        conf = report.confidence
        parts.append(_html_table(
            ["trial", "objective", "goodput (req/s)", "capacity (req/s)", "headroom",
             "gate", "confidence"],
            [[f"trial {w.number}", _num(w.objective), _num(w.goodput),
              capacity_text(w.capacity, w.capacity_low, w.capacity_high), _num(w.headroom),
              "passed" if w.gate_passed else "failed", conf.summary() if conf else "—"]]))
        if report.equivalent:
            parts.append(f"<p class='note'>{e(_equivalent_note(report))}</p>")
        parts.append(_html_kv(_winner_metrics(report, w)))
        sessions = _session_rows(w)
        if sessions is not None:
            parts.append("<h3>Conversations, turn by turn</h3>")
            parts.append(f"<p>{e(sessions[0])}</p>")
            parts.append(_html_table(*sessions[1:]))
        parts.append("<h3>Command line</h3>")
        parts.append(f"<pre class='command'>{e(report.command or '')}</pre>")
        parts.append("<h3>Configuration</h3>")
        parts.append(_html_kv({k: _val(v) for k, v in w.config.items()}))
    parts.append("<h2 id='binding'>Binding constraint and next step</h2>")
    parts.append(_html_binding(report))
    if report.tie_note:
        parts.append(f"<p class='note ties'>{e(report.tie_note)}</p>")
    parts.append("<h2 id='quality'>Quality checks</h2>")
    parts += [f"<p class='{cls}'>{e(text)}</p>" for cls, text in _quality_notes(report)]
    if report.quality_checked:
        parts.append(_html_table(*_quality_rows(report)))
    parts.append("<h2 id='curves'>Curves</h2><div class='charts'>")
    parts += [render_chart(c) for c in charts(report)]
    parts.append("</div>")
    if report.frontier is not None:
        f = report.frontier
        parts.append("<h2 id='frontier'>Frontier</h2>")
        parts.append(f"<p>Every probe of every configuration of {e(f.workload)} on "
                     f"{e(f.gpu)} ({len(f.points)} points, under {e(f.slo_text)}): how "
                     "fast a user's tokens arrive against how many one GPU serves. CSV: "
                     f"<code>{e(frontier_command(f.workload))}</code>.</p>")
        parts += [f"<p class='muted'>{e(n)}</p>" for n in f.notes]
        parts.append("<div class='charts'>")
        parts += [render_chart(c) for c in frontier_charts(f)]
        parts.append("</div><h3>Capacity per GPU (req/s) under other limits</h3>")
        parts.append("<p class='muted'>Read off the stored probes (planning.rescore): the "
                     "best configuration's capacity per GPU under each TTFT and TPOT limit, "
                     "with how sure it is.</p>")
        parts.append(_html_table(*_frontier_grid(f)))
    parts.append("<h2 id='cards'>Experiment cards</h2>")
    parts.append(_html_cards(report) if report.cards else
                 "<p class='muted'>No experiment cards (not a guided sweep).</p>")
    if report.twin is not None:
        parts.append("<h2 id='twin'>The twin</h2>")
        parts += [f"<p>{e(line)}</p>" for line in _twin_lines(report.twin)]
        parts.append("<h3>Predicted against measured, trial by trial</h3>")
        parts.append(_html_table(*_twin_calls(report.twin)))
        parts.append("<h3>Never booted: the twin's ranking</h3>")
        parts.append(_html_table(*_twin_ranking(report.twin)))
    parts.append("<h2 id='failures'>Failures</h2>")
    parts.append(_html_failures(report))
    use = report.utilisation
    parts.append("<h2 id='utilisation'>Utilisation</h2>")
    parts += [f"<p>{e(line)}</p>" for line in _utilisation_lines(use)]
    parts.append(_html_table(*_utilisation_shares(use)))
    parts.append("<h3>Per trial</h3>")
    parts.append(_html_table(*_utilisation_trials(use)))
    parts.append("<h2 id='trials'>Trials</h2>")
    parts.append(_html_table(*_trial_rows(report)))
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_kv(items: dict[str, str]) -> str:
    if not items:
        return ""
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in items.items())
    return f"<table class='kv'><tbody>{body}</tbody></table>"


def _html_binding(report: SweepReport) -> str:
    n = report.next_step
    w = report.winner
    diag = (w.diagnosis if w else None) or {}
    out = [f"<p class='binding'><strong>{escape(n.label)}</strong>"
           + (f" — {escape(str(diag['reason']))}" if diag.get("reason") else "") + "</p>"]
    evidence = {k: _val(v) for k, v in (diag.get("evidence") or {}).items() if v is not None}
    if evidence:
        out.append(_html_kv(evidence))
    out.append(f"<p class='next-step'><strong>Next step:</strong> {escape(n.action)}</p>")
    if n.knobs:
        out.append("<ul class='knobs'>" + "".join(f"<li>{escape(k)}</li>" for k in n.knobs)
                   + "</ul>")
    if report.symptoms:
        out.append("<h3>Symptoms beside the wall</h3><ul class='symptoms'>" + "".join(
            f"<li data-symptom='{escape(str(s['kind']))}'><strong>{escape(str(s['symptom']))}"
            f"</strong> ({_seen(report, s)}) — {escape(str(s['next_step']))}</li>"
            for s in report.symptoms) + "</ul>")
    return "\n".join(out)


def _seen(report: SweepReport, symptom: dict[str, Any]) -> str:
    if report.winner is not None:
        return "at the winner"
    return f"in {symptom['trials']} of {len(report.trials)} trials"


def _html_cards(report: SweepReport) -> str:
    out = []
    for c in report.cards:
        values = _card_values(c)
        out.append(f"<div class='card' data-step='{c.step}'><h3>Step {c.step}: "
                   f"{escape(c.variable)} — {escape(c.verdict or 'pending')}</h3>"
                   + _html_table(["field", "value"], _card_fields(c))
                   + (_html_table(list(_CARD_VALUE_HEADERS), values) if values else "")
                   + "</div>")
    return "\n".join(out)


_CARD_VALUE_HEADERS = ("value", "status", "objective", "p99 TTFT ms", "p99 TPOT ms",
                       "headroom", "failure")


def _card_fields(c: CardRecord) -> list[list[str]]:
    """The playbook's nine fields of a card, each as readable text."""
    result = c.result or {}
    rollback = c.rollback if isinstance(c.rollback, dict) else {}
    restore = (f"{rollback.get('to', '')} — configuration "
               f"{_compact(rollback.get('config') or {})}; check: {rollback.get('check', '—')}"
               if rollback else _compact(c.rollback) if c.rollback is not None else "—")
    return [["symptom", c.symptom], ["evidence", _compact(c.evidence) or "—"],
            ["hypothesis", c.hypothesis], ["variable", c.variable],
            ["controls", _compact(c.controls) if c.controls else "—"],
            ["values tried", ", ".join(_val(v) for v in c.values)],
            ["expected direction", c.expected_direction],
            ["stop condition", "; ".join(c.stop_condition or []) or "—"],
            ["conclusion", f"{c.verdict or 'pending'}: {result.get('summary', '')}".rstrip(": ")],
            ["rollback", restore]]


def _card_values(c: CardRecord) -> list[list[str]]:
    """One row per value tried, with its own result."""
    return [[_val(r.get("value")), str(r.get("status", "")), _num(r.get("objective")),
             _num(r.get("p99_ttft_ms")), _num(r.get("p99_tpot_ms")), _num(r.get("headroom")),
             str(r.get("failure") or "")]
            for r in (c.result or {}).get("results", [])]


def _html_failures(report: SweepReport) -> str:
    out = [_html_table(["status", "trials"], sorted(report.status_counts.items()))]
    if report.failure_counts:
        out.append("<h3>Failure classes</h3>")
        out.append(_html_table(["class", "trials", "example"], [
            [k, v, report.failure_examples.get(k, "")]
            for k, v in sorted(report.failure_counts.items())]))
    if report.infeasible_rules:
        out.append("<h3>Infeasible (never booted)</h3>")
        out.append(_html_table(["rule broken", "trials"], sorted(report.infeasible_rules.items())))
    if not report.failure_counts and not report.infeasible_rules:
        out.append("<p class='ok'>No failed or infeasible trials.</p>")
    return "\n".join(out)


# --- Markdown -------------------------------------------------------------------------------

def _quality_notes(report: SweepReport) -> list[tuple[str, str]]:
    notes = []
    if report.allow_lossy:
        notes.append(("bad", "Lossy values were allowed without their quality check "
                             "(--allow-lossy): a lossy winner's answers were not compared "
                             "with the lossless model's."))
    if not report.quality_checked:
        notes.append(("muted", "No lossy configuration was measured: nothing to check."))
    return notes


def _quality_rows(report: SweepReport) -> tuple[list[str], list[list[str]]]:
    rows = []
    for t in report.quality_checked:
        q = t.quality or {}
        value = q.get("agreement") if q.get("agreement") is not None else q.get("score")
        verdict = ("not checked" if q.get("passed") is None else
                   "passed" if q.get("passed") else "failed")
        rows.append([f"#{t.number}", ", ".join(q.get("lossy") or ()), str(q.get("method")),
                     _num(value), _num(q.get("threshold")), verdict,
                     str(q.get("detail") or "")])
    return (["trial", "lossy values", "method", "agreement / score", "threshold", "verdict",
             "detail"], rows)


def frontier_command(workload: str) -> str:
    """The command that lists a workload's every probed point, quoted for a shell."""
    return shlex.join(["slotune", "frontier", "-w", workload])


def render_markdown(report: SweepReport) -> str:
    s = report.sweep
    lines = [f"# Sweep {s.id}: {_md(s.name)}", "",
             *([f"**{_md(report.answer)}**", ""] if report.answer else []),
             _md_table(["workload", "model", "GPU", "SLO", "strategy", "mode", "status",
                        "stop reason"],
                       [[s.workload, s.model, s.gpu, _slo_text(report), s.strategy, s.mode,
                         s.status, s.stop_reason or "—"]]),
             "", "## Winner", ""]
    w = report.winner
    if w is None:
        lines += ["No configuration met the SLO.", ""]
    else:
        conf = report.confidence
        lines += [_md_table(["trial", "objective", "goodput (req/s)", "capacity (req/s)",
                             "headroom", "gate", "confidence"],
                            [[f"trial {w.number}", _num(w.objective), _num(w.goodput),
                              capacity_text(w.capacity, w.capacity_low, w.capacity_high),
                              _num(w.headroom), "passed" if w.gate_passed else "failed",
                              conf.summary() if conf else "—"]]), ""]
        if report.equivalent:
            lines += [_equivalent_note(report), ""]
        lines += [_md_table(["metric", "value"], list(_winner_metrics(report, w).items())), ""]
        sessions = _session_rows(w)
        if sessions is not None:
            lines += ["### Conversations, turn by turn", "", _md(sessions[0]), "",
                      _md_table(*sessions[1:]), ""]
        lines += ["Command line:", "", _md_fence(report.command or "", "sh"), ""]
    lines += ["## Binding constraint and next step", ""]
    n = report.next_step
    diag = (w.diagnosis if w else None) or {}
    lines.append(f"**{_md(n.label)}**"
                 + (f" — {_md(diag['reason'])}" if diag.get("reason") else ""))
    lines.append("")
    evidence = [[k, _val(v)] for k, v in (diag.get("evidence") or {}).items() if v is not None]
    if evidence:
        lines += [_md_table(["evidence", "value"], evidence), ""]
    lines += [f"**Next step:** {_md(n.action)}", ""]
    lines += [f"- {_md(k)}" for k in n.knobs]
    if n.knobs:
        lines.append("")
    if report.symptoms:
        lines += ["**Symptoms beside the wall:**", ""]
        lines += [f"- **{_md(s['symptom'])}** ({_md(_seen(report, s))}) — "
                  f"{_md(s['next_step'])}" for s in report.symptoms]
        lines.append("")
    if report.tie_note:
        lines += [f"> **Ties:** {_md(report.tie_note)}", ""]
    lines += ["## Quality checks", ""]
    lines += [f"{'> **Warning:** ' if cls == 'bad' else ''}{_md(text)}" for cls, text
              in _quality_notes(report)]
    if report.quality_checked:
        lines += ["", _md_table(*_quality_rows(report))]
    lines += ["", "## Curves", ""]
    for knob in report.knobs:
        headers = [knob, "trials", "best goodput (req/s)", "trial"]
        for metric in LATENCY_METRICS:
            target = report.slo_targets.get(metric)
            slo = f" (SLO ≤ {target:g})" if target is not None else ""
            headers.append(f"p99 {_LABELS[metric]} ms{slo}")
        counts: dict[str, int] = {}
        for value, _ in report.knob_points(knob, "request_goodput"):
            counts[repr(value)] = counts.get(repr(value), 0) + 1
        rows = [[_val(v), counts.get(repr(v), 0), _num(t.goodput), f"#{t.number}",
                 *(_num(t.metric(f"p99_{m}_ms")) for m in LATENCY_METRICS)]
                for v, t in report.best_per_value(knob)]
        lines += [f"### {_md(knob)}", "", _md_table(headers, rows) if rows else "_no measured "
                  "trials_", ""]
    lines += ["### Pareto front (p99 latency vs throughput)", ""]
    for metric in LATENCY_METRICS:
        _, front = report.pareto(metric)
        target = report.slo_targets.get(metric)
        slo = f" (SLO ≤ {target:g})" if target is not None else ""
        lines += [_md_table(["request throughput (req/s)", f"p99 {_LABELS[metric]} ms{slo}"],
                            [[_num(x), _num(y)] for x, y in front]), ""]
    if report.frontier is not None:
        f = report.frontier
        lines += ["## Frontier", "",
                  f"Interactivity against output tokens/s per GPU, every probe of every "
                  f"configuration ({len(f.points)} points, under {_md(f.slo_text)}); the "
                  "Pareto frontier and the winner below (all points: "
                  f"{_md_code(frontier_command(f.workload))}).", "",
                  _md_table(*_frontier_rows(f)), "",
                  "### Capacity per GPU (req/s) under other limits", "",
                  _md_table(*_frontier_grid(f)), ""]
    lines += ["## Experiment cards", ""]
    if not report.cards:
        lines += ["_No experiment cards (not a guided sweep)._", ""]
    for c in report.cards:
        values = _card_values(c)
        lines += [f"### Step {c.step}: {_md(c.variable)} — {_md(c.verdict or 'pending')}", "",
                  _md_table(["field", "value"], _card_fields(c)), ""]
        if values:
            lines += [_md_table(list(_CARD_VALUE_HEADERS), values), ""]
    if report.twin is not None:
        lines += ["## The twin", "", *(f"{_md(line)}  " for line in _twin_lines(report.twin)),
                  "",
                  "### Predicted against measured, trial by trial", "",
                  _md_table(*_twin_calls(report.twin)), "",
                  "### Never booted: the twin's ranking", "",
                  _md_table(*_twin_ranking(report.twin)), ""]
    lines += ["## Failures", "", _md_table(["status", "trials"],
                                           sorted(report.status_counts.items())), ""]
    if report.failure_counts:
        lines += [_md_table(["failure class", "trials", "example"],
                            [[k, v, report.failure_examples.get(k, "")]
                             for k, v in sorted(report.failure_counts.items())]), ""]
    if report.infeasible_rules:
        lines += [_md_table(["infeasible: rule broken", "trials"],
                            sorted(report.infeasible_rules.items())), ""]
    use = report.utilisation
    lines += ["## Utilisation", "", *(f"{_md(line)}  " for line in _utilisation_lines(use)), "",
              _md_table(*_utilisation_shares(use)), "", "### Per trial", "",
              _md_table(*_utilisation_trials(use)), ""]
    lines += ["## Trials", "", _md_table(*_trial_rows(report)), ""]
    return "\n".join(lines)


def _twin_lines(twin: TwinProgress) -> list[str]:
    factors = ", ".join(f"{k} ×{v:.3g}" for k, v in twin.factors.items())
    lines = [f"Screened {twin.screened} of {twin.candidates} candidate configurations "
             f"({twin.screen_cpu_s:g} CPU s) and booted {twin.booted}; error band "
             f"±{twin.band:.0%}.",
             f"Calibration on {twin.gpu}: {factors} the shipped roofline"
             + (f" (fit residual {twin.fit.residual:.3f} over {twin.fit.probes} probes of "
                f"{len(twin.fit.trials)} trials; fitted: {', '.join(twin.fit.fitted) or 'none'})"
                if twin.fit else " (not fitted yet)")
             + (f", engine {twin.engine_version}" if twin.engine_version else "") + ".",
             f"Started from {twin.warm_start or 'the shipped calibration'}."]
    if twin.memory_misses:
        lines.append(f"{twin.memory_misses} configuration(s) the twin expected to fit could "
                     "not start (out of memory): its memory model is off for them.")
    lines += twin.notes
    return lines


def _twin_calls(twin: TwinProgress) -> tuple[list[str], list[list[str]]]:
    rows = [[f"#{c.number}", _compact(c.params),
             c.predicted_failure or _num(c.predicted), f"±{c.band:.0%}",
             c.measured_failure or (_num(c.measured) if c.measured is not None else "running"),
             "—" if c.error is None else f"{c.error:.0%}"] for c in twin.calls]
    return ["trial", "configuration", "predicted", "band", "measured", "error"], rows


def _twin_ranking(twin: TwinProgress) -> tuple[list[str], list[list[str]]]:
    rows = [[str(i), _compact(r.params), r.predicted_failure or _num(r.predicted)]
            for i, r in enumerate(twin.ranking, 1)]
    return ["rank", "configuration", "predicted"], rows


def _equivalent_note(report: SweepReport) -> str:
    """The winner's equivalent set in one sentence."""
    assert report.winner is not None
    others = "; ".join(
        f"trial {e.number} {capacity_text(e.capacity, e.capacity_low, e.capacity_high)} req/s"
        + ("" if e.confirmed else " (search reading)") for e in report.equivalent)
    return (f"Equivalent to trial {report.winner.number} (their capacity intervals per GPU "
            f"overlap, the measurements cannot tell them apart): {others}. The winner is "
            "picked among them by a stated rule: lossless before lossy, fewer GPUs a "
            "replica, then the higher capacity per GPU.")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(_md(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


_MD_INERT = str.maketrans({"&": "&amp;", "<": "&lt;", "\\": "\\\\", "`": "\\`", "[": "\\[",
                           "]": "\\]", "|": "\\|", "\n": " ", "\r": " "})


def _md(value: Any) -> str:
    """Text (a name, a message: anything a user or an engine wrote) as Markdown that
    renders as that text: no HTML tag or entity (``<``, ``&``), no link or image (``[``,
    ``]``), no code span (a backtick), no table cell break (``|``), all on one line."""
    return str(value).translate(_MD_INERT)


def _md_code(text: str) -> str:
    """``text`` as an inline code span that no backtick inside it can end."""
    fence = "`" * (_longest_backtick_run(text) + 1)
    return f"{fence} {' '.join(text.splitlines())} {fence}"


def _md_fence(text: str, info: str) -> str:
    """``text`` as a fenced code block that no line inside it can close."""
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


# --- shared ---------------------------------------------------------------------------------

_PARTS = {"boot_turn_wait_s": "boot: waiting its turn",
          "boot_weights_s": "boot: weights", "boot_compile_s": "boot: compile",
          "boot_graph_capture_s": "boot: graph capture", "boot_kv_cache_s": "boot: KV cache",
          "boot_server_ready_s": "boot: server start-up", "boot_unsplit": "boot: phases unknown",
          "measure": "warm-up + measure", "teardown": "teardown", "other": "other"}
"""How the report names each of ``UTILISATION_PARTS``."""


def _utilisation_lines(use: Utilisation) -> list[str]:
    lines = [f"{use.total_s:.0f} s of trial time over {len(use.trials)} boots (trials, "
             "confirmation repeats and the quality baseline): each boot split by what the "
             "engine's start-up log said (weights, compile, graph capture, KV cache, and the "
             "server around them until /health answered)."]
    if use.unsplit:
        lines.append(f"{use.unsplit} trial(s) were stored before boots were split by phase: "
                     "their boot counts as 'boot: phases unknown' (shown '?').")
    return lines


def _utilisation_shares(use: Utilisation) -> tuple[list[str], list[list[str]]]:
    rows = []
    for part in UTILISATION_PARTS:
        if part == "boot_unsplit" and not use.seconds[part]:
            continue
        share = use.share(part)
        rows.append([_PARTS[part], _num(use.seconds[part]),
                     "—" if share is None else f"{100 * share:.1f}%"])
    return ["part", "seconds", "share of trial time"], rows


def _utilisation_trials(use: Utilisation) -> tuple[list[str], list[list[Any]]]:
    headers = ["boot", "attempt", "status", *(f"{_PARTS[p].removeprefix('boot: ')} s"
                                              for p in BOOT_PHASES),
               "boot s", "warm-up + measure s", "teardown s", "total s"]
    rows = []
    for t in use.trials:
        split = [_num(t.boot_phases.get(p)) if t.boot_phases else "?" for p in BOOT_PHASES]
        rows.append([t.label, t.attempt, t.status, *split, _num(t.boot_s), _num(t.measure_s),
                     _num(t.teardown_s), _num(t.total_s)])
    return headers, rows

def _trial_rows(report: SweepReport) -> tuple[list[str], list[list[Any]]]:
    headers = ["#", "attempt", "status", *report.knobs, "objective", "goodput",
               "p99 TTFT ms", "p99 TPOT ms", "headroom", "confirmed", "failure / rule"]
    rows = []
    for t in report.trials:
        rows.append([t.number, t.attempt, t.status, *(_val(t.params.get(k)) for k in report.knobs),
                     _num(t.objective), _num(t.goodput), _num(t.metric("p99_ttft_ms")),
                     _num(t.metric("p99_tpot_ms")), _num(t.headroom),
                     "yes" if t.confirmed else "", _failure(t)])
    return headers, rows


def _failure(t: TrialPoint) -> str:
    if t.status == "infeasible":
        return t.violated_rule or t.failure_message or ""
    if t.failure_class or t.failure_message:
        return ": ".join(x for x in (t.failure_class, t.failure_message) if x)
    return ""


def _winner_metrics(report: SweepReport, w: TrialPoint) -> dict[str, str]:
    out = {}
    for name in ("request_throughput", "request_goodput", "output_throughput"):
        if w.metric(name) is not None:
            out[name] = _num(w.metric(name))
    for metric in ("ttft", "tpot", "itl", "e2el"):
        value = w.metric(f"p99_{metric}_ms")
        if value is None:
            continue
        target = report.slo_targets.get(metric)
        slo = f" (SLO ≤ {target:g} ms, {100 * value / target:.0f}% of it)" if target else ""
        out[f"p99_{metric}_ms"] = _num(value) + slo
    return out


def _session_rows(w: TrialPoint) -> tuple[str, list[str], list[list[str]]] | None:
    """A conversation workload's winner, per turn: TTFT as the context grows, and how
    much of the re-sent context the server's cache served (its own counter)."""
    sessions = (w.metrics.get("slotune") or {}).get("sessions")
    if not sessions:
        return None
    rate = sessions.get("in_session_hit_rate")
    hits = "not scraped" if rate is None else (
        f"{rate:.0%} of the {sessions['context_tokens']:.0f} context tokens the sessions "
        f"re-sent hit the prefix cache in session; {sessions['other_hit_tokens']:.0f} "
        "other hit tokens (shared prompts, earlier runs)")
    summary = (f"{sessions['completed_sessions']} of {sessions['sessions']} sessions "
               f"completed, mean {_num(sessions['mean_session_latency_s'])} s each; {hits}.")
    rows = [[str(t["turn"]), str(t["requests"]), _num(t["mean_prompt_tokens"]),
             _num(t["mean_context_tokens"]), _num(t["mean_ttft_ms"]), _num(t["p99_ttft_ms"])]
            for t in sessions["per_turn"]]
    return summary, ["turn", "requests", "mean prompt tokens", "mean context tokens",
                     "mean TTFT ms", "p99 TTFT ms"], rows


def _slo_text(report: SweepReport) -> str:
    targets = ", ".join(f"{_LABELS.get(k, k)} ≤ {v:g} ms" for k, v in report.slo_targets.items())
    return f"p{report.slo_percentile:g} {targets}" if targets else "no SLO targets"


def _num(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"


def _val(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict | list):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    return str(v)


def _compact(v: Any) -> str:
    """A card field: text as is, a dict as ``key: value; …``, anything else as JSON."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_compact(x) if isinstance(x, dict) else _val(x)}"
                         for k, x in v.items() if x is not None)
    return _val(v)
