"""The sweep report (HTML + Markdown) and its SVG chart module.

The report is read from a store holding a realistic finished sweep (virtual-time trials,
an infeasible config, an OOM, confirm re-runs, cards: :mod:`tests.support.sweep_data`);
the chart module is checked on small hand-made data, point by point; where the trials'
time went, on stored trials whose boots are split by phase and on an older row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

import pytest

from slotune.tuner.db import migrate
from slotune.tuner.db.records import SweepRecord, TrialRecord
from slotune.tuner.db.store import Store
from slotune.tuner.report import (
    Chart,
    RefLine,
    Series,
    analyse,
    build_report,
    load_report_snapshot,
    nice_ticks,
    pareto_front,
    render_chart,
    render_report,
    write_report,
)
from slotune.tuner.report._render import render_html, render_markdown
from slotune.tuner.report._svg import (
    HEIGHT,
    MARGIN_BOTTOM,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    MARGIN_TOP,
    WIDTH,
)
from slotune.tuner.spaces import load_space
from slotune.workers.contracts import PhaseTimings, TrialResult
from tests.support.sweep_data import RATE, SweepData, populate_finished_sweep

# --- the SVG chart module -------------------------------------------------------------------

PLOT_L, PLOT_R = MARGIN_LEFT + 24, WIDTH - MARGIN_RIGHT - 24  # x inset of end points
PLOT_T, PLOT_B = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM


def _circles(svg: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m))
            for m in re.findall(r"<circle ([^>]*)>", svg)]


def test_points_land_where_the_data_says_on_a_linear_axis() -> None:
    svg = render_chart(Chart("t", "goodput vs x", "the x", "the y (req/s)",
                             [Series("s", [(0, 0.0), (5, 5.0), (10, 10.0)])],
                             x_scale="linear"))
    pts = _circles(svg)
    assert [p["data-x"] for p in pts] == ["0", "5", "10"]
    xs = [float(p["cx"]) for p in pts]
    ys = [float(p["cy"]) for p in pts]
    assert xs[0] == pytest.approx(PLOT_L, abs=0.1) and xs[2] == pytest.approx(PLOT_R, abs=0.1)
    assert xs[1] == pytest.approx((PLOT_L + PLOT_R) / 2, abs=0.1)
    # y ticks run 0..10: 0 at the bottom of the plot area, 10 at its top
    assert ys[0] == pytest.approx(PLOT_B, abs=0.1) and ys[2] == pytest.approx(PLOT_T, abs=0.1)
    assert ys[1] == pytest.approx((PLOT_T + PLOT_B) / 2, abs=0.1)
    assert 'data-chart="t"' in svg and ">the x</text>" in svg and ">the y (req/s)</text>" in svg
    assert ">goodput vs x</text>" in svg


def test_reference_line_sits_at_its_value_and_is_labelled() -> None:
    svg = render_chart(Chart("ttft", "p99 TTFT", "k", "ms", [Series("s", [(1, 100.0)])],
                             [RefLine(300.0, "SLO ≤ 300 ms")]))
    line = re.search(r'<line class="ref" data-y="300" [^>]*y1="([\d.]+)"', svg)
    assert line is not None
    ticks = nice_ticks(0, 300)
    assert ticks[-1] == 300  # the SLO is the top of the axis here
    assert float(line.group(1)) == pytest.approx(PLOT_T, abs=0.1)
    assert "SLO ≤ 300 ms" in svg


def test_knob_ladders_get_a_log_axis_and_categories_keep_their_order() -> None:
    svg = render_chart(Chart("k", "t", "x", "y", [Series("s", [(512, 1.0), (2048, 2.0),
                                                               (8192, 3.0)])]))
    xs = [float(p["cx"]) for p in _circles(svg)]
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.2)  # equal ratios, equal gaps
    assert [t for t in re.findall(r'class="xtick"[^>]*>([^<]*)<', svg)] == ["512", "2048", "8192"]
    cat = render_chart(Chart("c", "t", "x", "y", [Series("s", [("fp8", 1.0), (None, 2.0)])]))
    labels = re.findall(r'class="xtick"[^>]*>([^<]*)<', cat)
    assert labels == ["none", "fp8"]
    pts = {p["data-x"]: float(p["cx"]) for p in _circles(cat)}
    assert pts["none"] == pytest.approx(PLOT_L, abs=0.1)
    assert pts["fp8"] == pytest.approx(PLOT_R, abs=0.1)


def test_nice_ticks_and_an_empty_chart() -> None:
    assert nice_ticks(0, 4.3) == [0, 1, 2, 3, 4, 5]
    assert nice_ticks(0, 47) == [0, 10, 20, 30, 40, 50]
    svg = render_chart(Chart("e", "t", "x", "y", [Series("s", [])]))
    assert "no data" in svg and "<circle" not in svg


def test_pareto_front_keeps_only_undominated_points() -> None:
    points = [(1.0, 100.0), (2.0, 150.0), (2.0, 120.0), (3.0, 300.0), (1.5, 200.0)]
    assert pareto_front(points) == [(1.0, 100.0), (2.0, 120.0), (3.0, 300.0)]


# --- the report from a store ---------------------------------------------------------------

@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, SweepData]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('report') / 'slotune.db'}"
    migrate.upgrade(url)
    with Store(url) as store:
        yield store, populate_finished_sweep(store)


def _winner_flags(data: SweepData) -> list[str]:
    p = data.winner_params
    return [f"--max-num-seqs={p['max_num_seqs']}",
            f"--max-num-batched-tokens={p['max_num_batched_tokens']}",
            "--enable-prefix-caching", "--max-model-len=4096"]


def test_html_report_says_what_the_morning_reader_needs(finished: tuple[Store, SweepData]) -> None:
    store, data = finished
    html = render_report(store, data.sweep_id, "html")
    command = re.search(r"<pre class='command'>([^<]*)</pre>", html)
    assert command is not None
    assert command.group(1).startswith("vllm serve Qwen/Qwen2.5-7B-Instruct ")
    for flag in _winner_flags(data):
        assert flag in command.group(1)
    # the winner named as the log names it: its trial number
    number = store.get_trial(data.winner_id).number
    assert f"trial {number}</td>" in html and "confirmed: 4 runs" in html
    # the SLO lines: on the latency charts, at the targets
    assert 'data-chart="p99-ttft-vs-max_num_seqs"' in html
    assert 'data-chart="goodput-vs-max_num_batched_tokens"' in html
    assert 'data-chart="pareto-tpot"' in html
    assert 'class="ref" data-y="300"' in html and 'class="ref" data-y="50"' in html
    # constant knobs draw no chart
    assert 'data-chart="goodput-vs-kv_cache_dtype"' not in html
    # cards, binding constraint, next step, ties, failures
    assert "max_num_batched_tokens moves the prefill wall" in html
    assert "rolled back to max_num_seqs=256" in html
    assert "<strong>at the limit</strong>" in html
    assert "stop tuning" in html
    assert "capacity mode is the answer" in html
    assert "CUDA out of memory" in html and "max_num_batched_tokens &gt;= max_num_seqs" in html
    # self-contained: no scripts, stylesheets or images fetched from anywhere
    assert not re.search(r"<(script|link|img)\b", html)
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html)


def test_markdown_report_has_the_same_sections_as_tables(
        finished: tuple[Store, SweepData]) -> None:
    store, data = finished
    md = render_report(store, data.sweep_id, "md")
    block = re.search(r"```sh\n(vllm serve [^\n]+)\n```", md)
    assert block is not None
    for flag in _winner_flags(data):
        assert flag in block.group(1)
    assert "| max_num_seqs | trials | best goodput (req/s) | trial | p99 TTFT ms (SLO ≤ 300) " \
           "| p99 TPOT ms (SLO ≤ 50) |" in md
    assert "### Pareto front" in md
    assert "### Step 1: max_num_batched_tokens — supported" in md
    assert "### Step 2: max_num_seqs — rejected" in md
    assert "**at the limit**" in md and "**Next step:**" in md
    assert f"at {RATE:g} req/s no longer separates configurations" in md
    assert re.search(r"\| oom \| 1 \| CUDA out of memory", md)
    assert "| max_num_batched_tokens >= max_num_seqs | 1 |" in md


def test_write_report_writes_both_files(finished: tuple[Store, SweepData], tmp_path: Path) -> None:
    store, data = finished
    html_path, md_path = write_report(store, data.sweep_id, tmp_path / "out")
    assert html_path.read_text().startswith("<!doctype html>")
    assert md_path.read_text().startswith(f"# Sweep {data.sweep_id}: lab-grid")
    with pytest.raises(ValueError, match="valid: html, md"):
        render_report(store, data.sweep_id, "pdf")  # type: ignore[arg-type]


# --- next steps from hand-made records -----------------------------------------------------

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _sweep(mode: str = "goodput") -> SweepRecord:
    return SweepRecord(
        id=7, name="hand", workload="w", workload_id=1, space={"knobs": {"max_num_seqs": {}}},
        slo={"percentile": 99.0, "ttft": 300.0, "tpot": 50.0}, slo_key="k", model="m/x",
        gpu="h100-sxm", strategy="guided", mode=mode, status="done", budget={}, progress={},
        owner=None, claimed_by=None, heartbeat_at=None, optuna_study_name=None,
        stop_reason=None, created_at=NOW, started_at=None, finished_at=None)


def _trial(i: int, seqs: int, objective: float, wall: str, *, capacity: float | None = None,
           goodput: float | None = None, confirmed: bool = False) -> TrialRecord:
    diagnosis: dict[str, Any] = {"wall": wall, "label": f"{wall}-label", "reason": f"{wall} why",
                                 "evidence": {"waiting_mean": 9.0}, "knobs": [f"{wall}-knob"]}
    result = {"status": "ok", "objective": objective, "gate_passed": objective > 0,
              "headroom": 0.9, "diagnosis": diagnosis,
              "metrics": {"request_goodput": goodput if goodput is not None else objective,
                          "request_throughput": 10.0, "p99_ttft_ms": 250.0,
                          "p99_tpot_ms": 40.0}}
    return TrialRecord(
        id=i, sweep_id=7, number=i, attempt=1, params={"max_num_seqs": seqs},
        config={"max_num_seqs": seqs}, spec=None, status="ok", failure_class=None,
        objective=objective, capacity=capacity, result=result, diagnosis=diagnosis,
        timings=None, confirmed=confirmed, worker=None, node=None, created_at=NOW,
        started_at=None, finished_at=None, heartbeat_at=None)


def test_queue_bound_winner_says_how_many_replicas_for_the_target_rate() -> None:
    trials = [_trial(1, 64, 5.0, "queue", capacity=5.0), _trial(2, 128, 6.5, "queue",
                                                                 capacity=6.5, confirmed=True)]
    report = analyse(_sweep("capacity"), trials, [],
                     workload_spec={"arrivals": {"request_rate": 20}})
    assert report.winner is not None and report.winner.id == 2
    step = report.next_step
    assert step.wall == "queue" and step.replicas == 4  # ceil(20 / 6.5)
    assert "4 replicas" in step.action and "20 req/s" in step.action
    assert report.tie_note is None  # capacity mode: the rate is what it measures


def test_a_knob_wall_lists_its_knobs_and_a_failed_search_says_so() -> None:
    report = analyse(_sweep(), [_trial(1, 64, 3.0, "decode"), _trial(2, 128, 1.0, "kv")], [])
    assert report.winner is not None and report.winner.id == 1
    assert report.next_step.knobs == ("decode-knob",)
    assert "- decode-knob" in render_markdown(report)
    empty = analyse(_sweep(), [_trial(1, 64, 0.0, "queue")], [])
    assert empty.winner is None and "no configuration met the SLO" in empty.next_step.action


def test_confirmation_repeats_kept_by_the_coordinator_count_for_the_winner() -> None:
    from slotune.tuner.report._analysis import TrialPoint, _confidence
    from slotune.tuner.sweep.progress import SweepProgress

    winner = TrialPoint(id=7, sweep_id=1, number=3, attempt=1, status="ok",
                        failure_class=None, params={"max_num_seqs": 64}, config={},
                        objective=4.0, capacity=None, confirmed=True, worker=None,
                        started_at=None, finished_at=None, diagnosis=None, headroom=0.8,
                        gate_passed=True)
    stored = {"confirmation": [
        {"trial_id": 7, "params": {"max_num_seqs": 64}, "runs": [3.8, 4.2]},
        {"trial_id": 8, "params": {"max_num_seqs": 128}, "runs": [0.0, 0.0]}]}
    confidence = _confidence(winner, [winner], SweepProgress.of(stored).confirmation)
    assert confidence.repeats == 3
    assert confidence.objectives == (4.0, 3.8, 4.2)
    assert confidence.mean == pytest.approx(4.0)
    assert "confirmed: 3 runs" in confidence.summary()


# --- utilisation: where the trials' time went -----------------------------------------------

def _boot(boot: float, weights: float, compile_s: float, ready: float) -> PhaseTimings:
    """A trial's timings as the pipeline stores them: 5 s each of graph capture and KV
    cache, 10 s warm-up, 80 s measured, 5 s teardown, 5 s unaccounted for."""
    return PhaseTimings(boot_s=boot, boot_weights_s=weights, boot_compile_s=compile_s,
                        boot_graph_capture_s=5.0, boot_kv_cache_s=5.0,
                        boot_server_ready_s=ready, warmup_s=10.0, measure_s=80.0,
                        teardown_s=5.0, total_s=boot + 100.0)


def test_utilisation_shows_each_boots_phases_and_the_sweeps_shares(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'slotune.db'}"
    migrate.upgrade(url)
    space = load_space("lab")
    workload = space.resolve_workload()
    with Store(url) as store:
        sweep = store.create_sweep(
            name="boots", workload=workload, slo=space.resolve_slo(),
            space=space.model_dump(mode="json"), model=space.model, gpu=space.gpu,
            strategy="grid", mode="goodput", budget={"max_trials": 2})
        # A cold compile, then its confirmation repeat from the compile cache.
        params = space.defaults()
        spec = space.to_trial_spec(params, "t0", workload=workload, mode="goodput")
        trial = store.start_trial(sweep.id, number=0, params=params, spec=spec)
        store.finish_trial(trial.id, TrialResult(run_id="t0", status="ok", objective=1.0,
                                                 timings=_boot(100.0, 10.0, 60.0, 20.0)))
        store.record_trial(sweep.id, role="repeat", number=0, repeat=1, repeat_of=trial.id,
                           params=params, spec=spec, result=TrialResult(
                               run_id="t0-r1", status="ok", objective=1.0,
                               timings=_boot(50.0, 10.0, 15.0, 15.0)))
        md = render_report(store, sweep.id, "md")
        html = render_report(store, sweep.id, "html")
        report = build_report(load_report_snapshot(store, sweep.id), sweep.id)
    # The trials the sweep searched are one configuration, measured once; its boots, two.
    assert [t.label for t in report.trials] == ["#0"]
    assert [t.label for t in report.boots] == ["#0", "#0 repeat 1"]
    # Each boot's compile seconds, beside its other phases: the repeat's are its own …
    assert "| boot | attempt | status | waiting its turn s | weights s | compile s | " \
           "graph capture s | KV cache s | server start-up s | boot s | warm-up + measure s | " \
           "teardown s | total s |" in md
    assert "| #0 | 1 | ok | — | 10 | 60 | 5 | 5 | 20 | 100 | 90 | 5 | 200 |" in md
    assert "| #0 repeat 1 | 1 | ok | — | 10 | 15 | 5 | 5 | 15 | 50 | 90 | 5 | 150 |" in md
    # … and the sweep's 350 s by part: compiling took 75 s of it.
    assert "| boot: compile | 75 | 21.4% |" in md
    assert "| warm-up + measure | 180 | 51.4% |" in md
    assert "| other | 10 | 2.9% |" in md
    assert "phases unknown" not in md
    assert "<h2 id='utilisation'>Utilisation</h2>" in html
    assert "<tr><td>boot: compile</td><td>75</td><td>21.4%</td></tr>" in html
    assert "<td>#0</td><td>1</td><td>ok</td><td>—</td><td>10</td><td>60</td>" in html


def test_a_trial_stored_before_the_boot_split_reads_as_phases_unknown() -> None:
    older = _trial(1, 64, 3.0, "decode").model_copy(update={"timings": {
        "boot_s": 30.0, "warmup_s": 2.0, "measure_s": 58.0, "teardown_s": None,
        "total_s": 90.0}})
    newer = _trial(2, 128, 2.0, "decode").model_copy(update={
        "timings": _boot(100.0, 10.0, 60.0, 20.0).model_dump(mode="json")})
    report = analyse(_sweep(), [older, newer], [])
    use = report.utilisation
    assert use.unsplit == 1
    assert use.seconds["boot_unsplit"] == 30.0 and use.seconds["boot_compile_s"] == 60.0
    md = render_markdown(report)
    assert "| #1 | 1 | ok | ? | ? | ? | ? | ? | ? | 30 | 60 | — | 90 |" in md
    assert "| boot: phases unknown | 30 | 10.3% |" in md  # of 290 s
    assert "1 trial(s) were stored before boots were split by phase" in md


HOSTILE = "chat<img src=x onerror=alert(1)>[click](javascript:alert(2))`$(rm -rf ~)`"


def test_names_in_the_markdown_report_are_text_and_its_command_lines_are_quoted() -> None:
    """Issue 38: a name carried raw HTML (and links) into the Markdown report, and the
    ``slotune frontier -w NAME`` line was not shell-quoted."""
    import shlex

    from slotune.tuner.planning.frontier import CapacityGrid, Frontier

    sweep = _sweep("capacity").model_copy(update={
        "name": "night\n<script>alert(3)</script>", "workload": HOSTILE})
    trial = _trial(1, 64, 3.0, "decode", capacity=3.0, confirmed=True)
    frontier = Frontier(
        workload=HOSTILE, model="m/x", gpu="h100-sxm", slo="{}", slo_text="p99 TTFT ≤ 300 ms",
        percentile=99.0, tpot_target_ms=None, ttft_target_ms=300.0, min_interactivity_tps=None,
        price_per_gpu_hour=None, points=[], winner=None,
        capacity=CapacityGrid(percentile=99.0, tpot_ms=[50.0], ttft_ms=[300.0],
                              per_gpu=[[None]], confidence=[[None]]))
    md = render_markdown(analyse(sweep, [trial], [], frontier=frontier))
    prose = re.sub(r"(`+) .*? \1", "", md)  # a code span shows its text as it is
    assert "<img" not in prose and "<script" not in prose  # no tag a renderer would obey
    assert "[click](javascript" not in prose  # no link
    assert "&lt;img src=x onerror=alert(1)>\\[click\\](javascript" in prose
    assert "# Sweep 7: night &lt;script>alert(3)&lt;/script>\n" in md  # one line, inert
    line = next(x for x in md.splitlines() if "slotune frontier -w" in x)
    command = re.search(r"(`+) (slotune frontier -w .*?) \1", line)
    assert command is not None, line
    assert shlex.split(command.group(2)) == ["slotune", "frontier", "-w", HOSTILE]
    html = render_html(analyse(sweep, [trial], [], frontier=frontier))
    assert "<img" not in html and "<script>alert" not in html
    assert f"<code>slotune frontier -w {escape(shlex.quote(HOSTILE))}</code>" in html
