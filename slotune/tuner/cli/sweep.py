"""``slotune sweep …``, ``slotune coordinator`` and ``slotune best``.

* ``sweep run`` — queue a sweep and run it in the foreground (embedded defaults: the
  seed's lab space, local Ray with 2 simulated GPUs, the SQLite file), then print the
  best-config table, the winner's ``vllm serve`` command line and the report's path.
* ``sweep submit`` queues one for ``slotune coordinator``; ``status``, ``resume``,
  ``cancel`` and ``report`` act on stored sweeps; ``best`` reads the
  ``best_config_per_workload`` view.

Exit codes: 0 done; 1 the database or a worker failed (one line on stderr); 2 a mistake
in the command (one line on stderr); 3 the sweep ended without any configuration that
meets the SLO.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import optuna
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from slotune.tuner.cli.output import make_console, spreadsheet_cell
from slotune.tuner.db.errors import Conflict, NotFound, StorageError, exit_code
from slotune.tuner.db.records import BestConfig, SweepRecord
from slotune.tuner.db.snapshot import load_workload
from slotune.tuner.planning.answer import capacity_text, sweep_answer
from slotune.tuner.settings import database_digest, default_data_dir, get_settings, redact_url
from slotune.tuner.strategies import DEFAULT_STRATEGY
from slotune.tuner.sweep.executors import ExecutorLost
from slotune.tuner.sweep.log import LOG_FORMATS, SweepLog
from slotune.tuner.sweep.progress import SweepProgress
from slotune.tuner.sweep.request import (
    REQUEST_ERRORS,
    SweepBudget,
    SweepRequest,
    queue_sweep,
    resolve,
)
from slotune.workers.contracts import SLO
from slotune.workers.engines import ENGINES
from slotune.workers.engines.vllm import vllm_command
from slotune.workers.trust import Trust

__all__ = ["best_command", "coordinator_command", "sweep_app"]

# Optuna announces every study it creates; the progress bar says what matters here.
optuna.logging.set_verbosity(optuna.logging.WARNING)

sweep_app = typer.Typer(help="Sweeps: search a space for the best configuration under an SLO.",
                        no_args_is_help=True)

DatabaseUrl = Annotated[str | None, typer.Option(
    "--database-url", help="Database URL (default: DATABASE_URL, else the embedded SQLite "
    "file).", show_default=False)]
Executor = Annotated[str, typer.Option(
    help="Where trials run: 'ray' (local Ray with simulated GPUs, or RAY_ADDRESS) or "
    "'virtual' (the simulated engine in virtual time, in this process: seconds).")]
ResumeExecutor = Annotated[str | None, typer.Option(
    "--executor", help="Where trials run: default, the executor the sweep recorded (else "
    "'ray'); naming another measures the remaining trials another way.",
    show_default=False)]
Gpus = Annotated[int | None, typer.Option(
    help="GPUs of the local Ray (simulated; ignored with RAY_ADDRESS), default 2; of the "
    "virtual executor, default: as many as the space's largest trial needs.", min=1, max=64,
    show_default=False)]
Strict = Annotated[bool, typer.Option(
    help="Refuse (exit 2) a space part of which can never be placed on the cluster, "
    "instead of warning and recording those trials infeasible.")]
LogFormatOption = Annotated[str | None, typer.Option(
    "--log-format", help="One line per trial start and end and per phase change: 'text' "
    "or 'json' (one JSON object per line, for log shippers). Default: 'text' when stdout "
    "is not a terminal (a file, a pipe, a service's journal), the progress bar on one.",
    show_default=False)]
AllowLossy = Annotated[bool, typer.Option(
    help="Let lossy knob values (weight quantisation, fp8 KV, …) score without the quality "
    "check they must otherwise pass first; the report says they were not checked.")]


def _fail(message: str, code: int) -> typer.Exit:
    print(f"slotune: error: {message}", file=sys.stderr)
    return typer.Exit(code)


def reason(exc: Exception) -> str:
    """One line that says what was wrong (pydantic's errors as ``field: message``)."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: "
            f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
    return " ".join(str(exc).split())


def _operator() -> Trust:
    """The CLI's trust: the user's own machine, so any path, and the operator's
    registered names too (:mod:`slotune.workers.trust`)."""
    return get_settings().trust.for_operator()


def _store(database_url: str | None, *, migrate: bool = False) -> tuple[Any, str]:
    from slotune.tuner.db import migrate as migrations
    from slotune.tuner.db.store import Store

    url = database_url or get_settings().database.url
    try:
        if migrate:
            migrations.upgrade(url)  # idempotent: the embedded default needs no setup step
        store = Store(url)
        store.check_schema()
    except StorageError as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    return store, url


def _executor(kind: str, gpus: int | None, space: Any = None) -> Any:
    """The executor; the virtual one, without ``--gpus``, sized to the space's largest
    trial (it has no real GPUs to protect)."""
    from slotune.tuner.sweep.executors import make_executor
    from slotune.tuner.sweep.placement import largest_replica

    if gpus is None:
        gpus = max(2, largest_replica(space)) if kind == "virtual" and space else 2
    try:
        return make_executor(kind, num_gpus=gpus, address=get_settings().ray.address)
    except ValueError as exc:
        raise _fail(str(exc), 2) from None


def _resume_executor(sweep: SweepRecord, kind: str | None, gpus: int | None
                     ) -> tuple[str, int | None, str]:
    """The executor a resume uses: the one the sweep recorded, unless the command names
    another; and what to say about it."""
    recorded = sweep.executor
    if recorded is None:
        return kind or "ray", gpus, "" if kind else " (the sweep recorded no executor)"
    if kind is None or kind == recorded.kind:
        return recorded.kind, gpus or recorded.gpus, ", as it ran before"
    return kind, gpus, (f"; it ran on {recorded.describe()} before, so its remaining "
                        "trials are measured another way")


def _check_placement(space: Any, placer: Any, *, strict: bool) -> list[str]:
    """Warn (stderr) about the layouts of ``space`` that can never be placed; with
    ``strict``, refuse them (exit 2). Returns the lines."""
    from slotune.tuner.sweep.placement import unplaceable_layouts

    lines = unplaceable_layouts(space, placer)
    if lines and strict:
        raise _fail(f"--strict: part of space {space.name!r} can never be placed: "
                    + "; ".join(lines), 2)
    for line in lines:
        print(f"slotune: warning: {line} — those trials are recorded infeasible, never "
              "booted (--strict refuses the sweep instead)", file=sys.stderr)
    return lines


def slo_text(stored: str) -> str:
    """The view stores the SLO as canonical JSON; show it as people write it."""
    try:
        return str(SLO.model_validate_json(stored))
    except ValueError:
        return stored


_BEST_FIELDS = ("workload", "model", "gpu", "slo", "objective", "capacity", "capacity_low",
                "capacity_high", "gpus", "capacity_per_gpu", "confirmed",
                "repeats", "engine", "engine_version", "stale", "trial_id", "sweep_id",
                "number", "measured_at")


def _tsv_cell(value: Any) -> str:
    """A stored value as a cell of ``best --output tsv``: numbers as they are (a negative
    one is a number, not a formula), text made inert (:func:`spreadsheet_cell`)."""
    if value is None:
        return ""
    if isinstance(value, int | float):
        return str(value)
    return spreadsheet_cell(value if isinstance(value, str) else json.dumps(value))


def _best_table(rows: list[BestConfig], title: str) -> Table:
    table = Table(title=title)
    for col in ("workload", "model", "GPU", "SLO", "objective", "capacity (req/s)",
                "GPUs", "per GPU", "confirmed", "engine", "measured", "trial"):
        table.add_column(col)
    for r in rows:
        confirmed = f"yes ({r.repeats} repeats)" if r.confirmed else "no"
        engine = " ".join(str(x) for x in (r.engine, r.engine_version) if x) or "—"
        table.add_row(r.workload, r.model, r.gpu, slo_text(r.slo), f"{r.objective:.3f}",
                      capacity_text(r.capacity, r.capacity_low, r.capacity_high), str(r.gpus),
                      "—" if r.capacity_per_gpu is None else f"{r.capacity_per_gpu:.2f}",
                      confirmed,
                      engine + (" [yellow](stale)[/]" if r.stale else ""),
                      r.measured_at.strftime("%Y-%m-%d %H:%M") if r.measured_at else "—",
                      trial_text(r))
    return table


def trial_text(row: BestConfig) -> str:
    """How a person names the row's trial, as the sweep's log does: its Optuna number in
    its sweep (the row id where the view predates it)."""
    if row.number is None or row.sweep_id is None:
        return f"id {row.trial_id}"
    return f"{row.number} (sweep {row.sweep_id})"


def _equivalents(console: Console, rows: list[BestConfig]) -> None:
    """One line per row whose sweep has configurations its interval cannot tell apart."""
    for r in rows:
        if r.equivalent:
            others = "; ".join(
                f"trial {e.number} {capacity_text(e.capacity, e.capacity_low, e.capacity_high)}"
                + ("" if e.confirmed else " (search reading)") for e in r.equivalent)
            console.print(f"{r.workload}: equivalent to trial {r.number} (intervals per GPU "
                          f"overlap; it won by lossless, fewer GPUs, capacity per GPU): "
                          f"{others}", soft_wrap=True, highlight=False)


def _sweep_log(log_format: str | None, *, always: bool = False) -> SweepLog | None:
    """The line log to write to stdout: asked for by name, or stdout is not a terminal
    (rich's bar draws only on one), or ``always`` (the coordinator has no bar). None: the
    bar. A format that does not exist is a usage mistake (exit 2)."""
    if log_format is not None and log_format not in LOG_FORMATS:
        raise _fail(f"--log-format {log_format!r}: valid: {', '.join(LOG_FORMATS)}", 2)
    if log_format is None and sys.stdout.isatty() and not always:
        return None
    return SweepLog(sys.stdout, "json" if log_format == "json" else "text")


def _run_with_progress(coordinator: Any, sweep: SweepRecord, console: Console, *,
                       takeover: bool = False) -> SweepRecord:
    if coordinator.sweep_log is not None:  # lines instead of a bar
        return coordinator.run_sweep(  # type: ignore[no-any-return]
            sweep.id, takeover=takeover)
    columns = (TextColumn("[bold]sweep {task.fields[sweep]}[/] {task.fields[phase]}"),
               BarColumn(), TaskProgressColumn(),
               TextColumn("ok {task.fields[ok]} · running {task.fields[running]} · failed "
                          "{task.fields[failed]} · infeasible {task.fields[infeasible]} · "
                          "best {task.fields[best]} · ETA {task.fields[eta]}"),
               TimeElapsedColumn())
    total = int(sweep.budget.get("max_trials", 1))
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("sweep", total=total, sweep=sweep.id, phase="starting", ok=0,
                            running=0, failed=0, infeasible=0, best="—", eta="—")

        def update(p: dict[str, Any]) -> None:
            best = p.get("best_objective")
            eta = p.get("eta_s")
            bar.update(task, completed=p["done"] + p["failed"] + p["infeasible"],
                       phase=p["phase"], ok=p["done"], running=p["running"],
                       failed=p["failed"], infeasible=p["infeasible"],
                       best="—" if best is None else f"{best:.3f}",
                       eta="—" if eta is None else f"{eta:.0f}s")

        return coordinator.run_sweep(  # type: ignore[no-any-return]
            sweep.id, on_progress=update, takeover=takeover)


def _finish(store: Any, sweep: SweepRecord, console: Console,
            report_dir: Path | None, sweep_log: SweepLog | None = None) -> int:
    if sweep_log is not None and sweep_log.fmt == "json":
        return _finish_json(store, sweep, report_dir, sweep_log)
    from slotune.tuner.report import ReportPathError, ReportWriteError

    rows = [r for r in store.best_config_per_workload()
            if (r.workload, r.model, r.gpu) == (sweep.workload, sweep.model, sweep.gpu)]
    console.print(f"sweep {sweep.id} {sweep.status}: {sweep.stop_reason or ''}")
    if rows:
        console.print(_best_table(rows, f"best configuration for {sweep.workload}"))
        _equivalents(console, rows)
    progress = SweepProgress.of(sweep.progress)
    if progress.best_trial_id is not None and progress.best_objective:
        trial = store.get_trial(progress.best_trial_id)
        console.print("winner of this sweep:")
        console.print(f"  {vllm_command(sweep.model, trial.config)}", soft_wrap=True,
                      highlight=False)
        answer = sweep_answer(load_workload(store, sweep.workload), sweep)
        if answer is not None:
            console.print(f"[bold]answer:[/] {answer.sentence}", soft_wrap=True,
                          highlight=False)
    elif progress.unconfirmed:
        console.print(f"[yellow]no winner: {progress.unconfirmed}; rerun the sweep "
                      "on a quieter machine, or with more confirmation repeats[/]")
    else:
        missing = [m for m in store.without_passing_config(sweep.workload)
                   if (m.model, m.gpu, m.slo) == (sweep.model, sweep.gpu, sweep.slo_key)]
        why = missing[0].reason if missing else "no configuration met the SLO"
        console.print(f"[yellow]{why}[/]", highlight=False)
    try:
        report = _write_report(store, sweep.id, report_dir)
    except (ReportPathError, ReportWriteError) as exc:  # the sweep is stored: write it later
        console.print(f"[yellow]report not written: {exc}; write it with `slotune sweep "
                      f"report {sweep.id} --output DIR`[/]")
        report = None
    if report:
        console.print(f"report: {report}")
    return 0 if progress.best_objective else 3


def _finish_json(store: Any, sweep: SweepRecord, report_dir: Path | None,
                 sweep_log: SweepLog) -> int:
    """The end of a sweep as one JSON line (``--log-format json``): what the table, the
    winner's command, the answer and the report's path say on a terminal."""
    from slotune.tuner.report import ReportPathError, ReportWriteError

    progress = SweepProgress.of(sweep.progress)
    fields: dict[str, Any] = {"sweep": sweep.id, "status": sweep.status,
                              "stop_reason": sweep.stop_reason,
                              "best_objective": progress.best_objective,
                              "best_trial_id": progress.best_trial_id}
    text = f"sweep {sweep.id} {sweep.status}: {sweep.stop_reason or ''}"
    if progress.best_trial_id is not None and progress.best_objective:
        trial = store.get_trial(progress.best_trial_id)
        fields["vllm_command"] = vllm_command(sweep.model, trial.config)
        answer = sweep_answer(load_workload(store, sweep.workload), sweep)
        fields["answer"] = answer.sentence if answer is not None else None
    else:
        fields["unconfirmed"] = progress.unconfirmed
    try:
        fields["report"] = str(_write_report(store, sweep.id, report_dir))
    except (ReportPathError, ReportWriteError) as exc:
        fields["report_error"] = str(exc)
    sweep_log.message("sweep_finished", text, **fields)
    return 0 if progress.best_objective else 3


def _write_report(store: Any, sweep_id: int, directory: Path | None) -> Path:
    """The report's HTML path; :class:`ReportPathError` where it cannot go."""
    from slotune.tuner.report import write_report

    # By default under the database's digest: two databases' sweep 1 are two reports.
    target = directory or (default_data_dir() / "reports" / f"db-{database_digest(store.url)}"
                           / f"sweep-{sweep_id}")
    html, _ = write_report(store, sweep_id, target)
    return Path(html)


def _check_report_dir(directory: Path | None, option: str = "--report-dir") -> None:
    """A given report directory that could never be written: a usage mistake, exit 2."""
    from slotune.tuner.report import ReportPathError, prepare_report_dir

    if directory is None:
        return
    try:
        prepare_report_dir(directory)
    except ReportPathError as exc:
        raise _fail(f"{option}: {exc}", 2) from None


@sweep_app.command("run")
def run(
    space: Annotated[str, typer.Option(help="Search space: shipped name or YAML file.")] = "lab",
    strategy: Annotated[str, typer.Option(help="grid, random, tpe, guided, guided+tpe.")] =
        DEFAULT_STRATEGY,
    trials: Annotated[int, typer.Option(help="Trial budget.", min=1)] = 10,
    parallel: Annotated[int | None, typer.Option(help="At most this many trials at once "
                                                 "(default: one per free GPU group).")] = None,
    workload: Annotated[str | None, typer.Option(help="Override the space's workload.")] = None,
    slo: Annotated[str | None, typer.Option(help="Override the space's SLO.")] = None,
    mode: Annotated[str | None, typer.Option(help="goodput or capacity.")] = None,
    allow_lossy: AllowLossy = False,
    max_gpu_hours: Annotated[float | None, typer.Option(help="GPU-hour budget.")] = None,
    deadline: Annotated[datetime | None, typer.Option(help="Stop launching trials after "
                                                      "this time (ISO 8601).")] = None,
    plateau: Annotated[int | None, typer.Option(help="Stop after this many trials without "
                                                "improvement.")] = None,
    confirm_top: Annotated[int, typer.Option(help="Re-run the best N configurations "
                                             "(0: off).")] = 2,
    confirm_repeats: Annotated[int, typer.Option(help="Repeats per confirmed config.")] = 2,
    seed: Annotated[int, typer.Option(help="Sampler seed.")] = 0,
    executor: Executor = "ray",
    gpus: Gpus = None,
    strict: Strict = False,
    database_url: DatabaseUrl = None,
    report_dir: Annotated[Path | None, typer.Option(help="Where to write the report.")] = None,
    log_format: LogFormatOption = None,
) -> None:
    """Run a sweep in the foreground and print the winner."""
    sweep_log = _sweep_log(log_format)
    try:
        request = SweepRequest(
            space=space, strategy=strategy, workload=workload, slo=slo, mode=mode,
            allow_lossy=allow_lossy, seed=seed,
            budget=SweepBudget(max_trials=trials, max_parallel=parallel,
                                          max_gpu_hours=max_gpu_hours, deadline=deadline,
                                          plateau_trials=plateau, confirm_top=confirm_top,
                                          confirm_repeats=confirm_repeats))
    except REQUEST_ERRORS as exc:
        raise _fail(reason(exc), 2) from None
    try:
        resolved_space = resolve(request, _operator())[0]  # refused before any database
    except REQUEST_ERRORS as exc:
        raise _fail(reason(exc), 2) from None
    if executor == "virtual" and not ENGINES[resolved_space.engine].simulated:
        raise _fail(f"--executor virtual runs the simulated engine only; space "
                    f"{resolved_space.name!r} runs {resolved_space.engine}: use --executor ray", 2)
    _check_report_dir(report_dir)  # a night's sweep must not end on an unwritable path
    store, url = _store(database_url, migrate=True)
    from slotune.tuner.sweep.coordinator import new_coordinator_id

    # The executor (Ray) starts before the sweep's row exists, and the row is written
    # already held by this process: a coordinator polling the same database can never
    # take a foreground sweep in the gap, and a bad executor leaves no row behind.
    runner = _executor(executor, gpus, resolved_space)
    try:
        _check_placement(resolved_space, runner, strict=strict)
        me = new_coordinator_id()
        try:
            sweep = queue_sweep(store, request, claimed_by=me, executor=runner.choice(),
                                trust=_operator())
        except REQUEST_ERRORS as exc:
            raise _fail(reason(exc), 2) from None
        console = make_console()
        _say(console, sweep_log, "sweep_started",
             f"sweep {sweep.id}: space {space}, strategy {strategy}, {trials} trials, "
             f"database {redact_url(url)}, executor {executor}", sweep=sweep.id, space=space,
             strategy=strategy, trials=trials, executor=executor)
        final = _run(store, url, sweep, runner, console, coordinator_id=me,
                     sweep_log=sweep_log)
    finally:
        runner.shutdown()
    raise typer.Exit(_finish(store, final, console, report_dir, sweep_log))


def _say(console: Console, sweep_log: SweepLog | None, event: str, text: str,
         **fields: Any) -> None:
    """A start-up line: in the log's format where there is a log, else on the console."""
    if sweep_log is not None:
        sweep_log.message(event, text, **fields)
    else:
        console.print(text)


def _run(store: Any, url: str, sweep: SweepRecord, runner: Any, console: Console, *,
         takeover: bool = False, coordinator_id: str | None = None,
         sweep_log: SweepLog | None = None) -> SweepRecord:
    from slotune.tuner.sweep.coordinator import Coordinator

    try:
        return _run_with_progress(Coordinator(store, runner, database_url=url,
                                              coordinator_id=coordinator_id,
                                              sweep_log=sweep_log), sweep, console,
                                  takeover=takeover)
    except Conflict as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    except ExecutorLost as exc:
        raise _fail(f"sweep {sweep.id} stopped: {exc}; its running trials are marked lost; "
                    f"resume it with `slotune sweep resume {sweep.id}`", 1) from None
    except KeyboardInterrupt:
        raise _fail(f"interrupted; resume with `slotune sweep resume {sweep.id}`", 1) from None


@sweep_app.command("submit")
def submit(
    space: Annotated[str, typer.Option(help="Search space: shipped name or YAML file.")] = "lab",
    strategy: Annotated[str, typer.Option(help="Search strategy.")] = DEFAULT_STRATEGY,
    trials: Annotated[int, typer.Option(min=1, help="Trial budget.")] = 20,
    workload: Annotated[str | None, typer.Option(help="Override the workload.")] = None,
    slo: Annotated[str | None, typer.Option(help="Override the SLO.")] = None,
    mode: Annotated[str | None, typer.Option(help="goodput or capacity.")] = None,
    allow_lossy: AllowLossy = False,
    owner: Annotated[str | None, typer.Option(help="Who asks.")] = None,
    strict: Strict = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Queue a sweep for `slotune coordinator`; prints its id.

    Part of the space that no node could ever hold is warned about (or, with --strict,
    refused) where the cluster is declared: SLOTUNE_MAX_NODE_GPUS.
    """
    from slotune.tuner.sweep.placement import declared_cluster

    try:
        request = SweepRequest(space=space, strategy=strategy, workload=workload, slo=slo,
                               mode=mode, allow_lossy=allow_lossy, owner=owner,
                               budget=SweepBudget(max_trials=trials))
        cluster = declared_cluster()
        if cluster is not None:
            _check_placement(resolve(request, _operator())[0], cluster, strict=strict)
    except REQUEST_ERRORS as exc:  # a bad request, or SLOTUNE_MAX_NODE_GPUS
        raise _fail(reason(exc), 2) from None
    store, _ = _store(database_url)
    try:
        sweep = queue_sweep(store, request, trust=_operator())
    except REQUEST_ERRORS as exc:
        raise _fail(reason(exc), 2) from None
    print(sweep.id)


@sweep_app.command("status")
def status(
    sweep_id: Annotated[int | None, typer.Argument(help="A sweep (default: the recent ones).")]
        = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Progress of one sweep, or a list of recent sweeps."""
    store, _ = _store(database_url)
    console = make_console()
    try:
        sweeps = [store.get_sweep(sweep_id)] if sweep_id is not None else \
            store.list_sweeps(limit=20).data
    except NotFound as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    table = Table(title="sweeps")
    for col in ("id", "name", "status", "trials", "ok", "running", "failed", "infeasible",
                "best", "ETA", "stop reason"):
        table.add_column(col)
    for s in sweeps:
        p = SweepProgress.of(s.progress)
        best = p.best_objective
        waiting = f"waiting for {p.waiting.for_} since {p.waiting.since}" if p.waiting else ""
        table.add_row(str(s.id), s.name, s.status,
                      f"{p.trials}/{s.budget.get('max_trials', '?')}",
                      str(p.done), str(p.running), str(p.failed), str(p.infeasible),
                      "—" if best is None else f"{best:.3f}",
                      "—" if p.eta_s is None else f"{p.eta_s:.0f}s",
                      s.stop_reason or waiting)
    console.print(table)


@sweep_app.command("resume")
def resume(
    sweep_id: Annotated[int, typer.Argument(help="The sweep to resume.")],
    executor: ResumeExecutor = None,
    gpus: Gpus = None,
    takeover: Annotated[bool, typer.Option(help="Take the sweep over now, even if its "
                                           "coordinator's heartbeat is recent (it died).")] =
        False,
    database_url: DatabaseUrl = None,
    report_dir: Annotated[Path | None, typer.Option(help="Where to write the report.")] = None,
    log_format: LogFormatOption = None,
) -> None:
    """Continue a sweep whose coordinator stopped or died (nothing lost, nothing repeated)."""
    sweep_log = _sweep_log(log_format)
    _check_report_dir(report_dir)
    store, url = _store(database_url)
    try:
        sweep = store.get_sweep(sweep_id)
        if sweep.status in ("failed", "cancelled"):
            sweep = store.requeue_sweep(sweep_id)
    except (NotFound, Conflict) as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    console = make_console()
    from slotune.tuner.sweep.request import stored_space

    kind, gpus, said = _resume_executor(sweep, executor, gpus)
    runner = _executor(kind, gpus, stored_space(sweep.space))
    _say(console, sweep_log, "sweep_resumed",
         f"sweep {sweep.id}: resumes on {runner.choice().describe()}{said}", sweep=sweep.id)
    try:
        final = _run(store, url, sweep, runner, console, takeover=takeover,
                     sweep_log=sweep_log)
    finally:
        runner.shutdown()
    raise typer.Exit(_finish(store, final, console, report_dir, sweep_log))


@sweep_app.command("cancel")
def cancel(
    sweep_id: Annotated[int, typer.Argument(help="The sweep to cancel.")],
    database_url: DatabaseUrl = None,
) -> None:
    """Cancel a sweep; its coordinator stops its trials at its next heartbeat."""
    store, _ = _store(database_url)
    try:
        sweep = store.cancel_sweep(sweep_id)
    except (NotFound, Conflict) as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    print(f"sweep {sweep.id}: {sweep.status}")


@sweep_app.command("report")
def report(
    sweep_id: Annotated[int, typer.Argument(help="The sweep.")],
    output: Annotated[Path | None, typer.Option(help="Directory for sweep-<id>.html and "
                                                "sweep-<id>.md.")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Write a sweep's report (HTML and Markdown) and print its path."""
    from slotune.tuner.report import ReportPathError, ReportWriteError

    _check_report_dir(output, "--output")
    store, _ = _store(database_url)
    try:
        store.get_sweep(sweep_id)
        path = _write_report(store, sweep_id, output)
    except NotFound as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    except ReportPathError as exc:
        raise _fail(f"--output: {exc}", 2) from None
    except ReportWriteError as exc:
        raise _fail(str(exc), 1) from None
    print(path)


def coordinator_command(
    executor: Executor = "ray",
    gpus: Gpus = None,
    once: Annotated[bool, typer.Option(help="Exit when no sweep is queued or running.")] =
        False,
    poll: Annotated[float, typer.Option(help="Seconds between looks for queued sweeps.")] = 2.0,
    database_wait: Annotated[float | None, typer.Option(
        help="At start, wait at most this many seconds for the database to answer, then "
        "exit 1 (default: wait as long as it takes, as mid-run).", min=0,
        show_default=False)] = None,
    database_url: DatabaseUrl = None,
    log_format: LogFormatOption = None,
) -> None:
    """Run queued sweeps (several at once, sharing the GPUs) until stopped; one line per
    trial start and end and per phase on stdout (``--log-format json``: JSON lines)."""
    from slotune.tuner.db.store import Store
    from slotune.tuner.sweep.coordinator import Coordinator

    url = database_url or get_settings().database.url
    try:
        store = Store(url)  # no connection yet: serving waits for the database
    except StorageError as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    sweep_log = _sweep_log(log_format, always=True)
    assert sweep_log is not None  # always: the coordinator has no bar
    runner = _executor(executor, gpus)
    coordinator = Coordinator(store, runner, database_url=url, sweep_log=sweep_log)
    sweep_log.message("coordinator_started",
                      f"{coordinator.coordinator_id}: serving sweeps from {redact_url(url)} "
                      f"on {runner.gpu_count()} GPUs", coordinator=coordinator.coordinator_id,
                      gpus=runner.gpu_count())
    try:
        coordinator.serve(poll_s=poll, once=once, start_wait_s=database_wait)
    except StorageError as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    except ExecutorLost as exc:
        raise _fail(f"{exc}; the sweeps this coordinator ran are back in the queue", 1) \
            from None
    except KeyboardInterrupt:
        pass
    finally:
        runner.shutdown()


def best_command(
    workload: Annotated[str | None, typer.Option(help="Only this workload.")] = None,
    output: Annotated[str, typer.Option(
        help="table (for people), tsv (one line per configuration, a header line first) "
        "or json (the API's shape), for scripts.")] = "table",
    database_url: DatabaseUrl = None,
) -> None:
    """The best configuration per workload that met its SLO (best_config_per_workload),
    and the measured workloads where none did."""
    if output not in ("table", "tsv", "json"):
        raise _fail(f"--output {output!r}: valid: table, tsv, json", 2)
    store, _ = _store(database_url)
    try:
        rows = store.best_for_workload(workload) if workload else \
            store.best_config_per_workload()
        missing = store.without_passing_config(workload)
    except NotFound as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    commands = [vllm_command(r.model, r.config) for r in rows]
    if output == "json":
        print(json.dumps({
            "data": [{**r.model_dump(mode="json"), "vllm_command": c}
                     for r, c in zip(rows, commands, strict=True)],
            "without_passing": [m.model_dump(mode="json")
                                for m in missing]}, indent=2))
        return
    if output == "tsv":
        print("\t".join((*_BEST_FIELDS, "vllm_command")))
        for r, command in zip(rows, commands, strict=True):
            values = r.model_dump(mode="json")
            print("\t".join([*(_tsv_cell(values[f]) for f in _BEST_FIELDS),
                             spreadsheet_cell(command)]))
        return
    console = make_console()
    console.print(_best_table(rows, "best configuration per workload"))
    _equivalents(console, rows)
    for r, command in zip(rows, commands, strict=True):
        console.print(f"{r.workload}: {command}", soft_wrap=True, highlight=False)
    for m in missing:
        console.print(f"[yellow]{m.workload} ({m.model} on {m.gpu}, SLO {slo_text(m.slo)}): "
                      f"{m.reason}[/]", highlight=False)
