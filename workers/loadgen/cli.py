"""``slotune bench``: benchmark any OpenAI-compatible server with ``vllm bench serve``'s flags.

A workload (``--workload NAME|FILE``, default: vLLM's defaults — random 1024 in / 128 out,
1000 prompts, all at once) is the base; ``vllm bench serve``'s dataset and traffic flags
override its fields. Prints a live progress bar, a summary table, the SLO gate's verdict
and the diagnosis; ``--save-result`` writes vLLM's result JSON plus ours.

Exit codes: 0 done (whatever the gate says), 1 the server could not be reached or every
request failed, 2 a usage mistake (message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from workers.contracts import SLO, SLO_METRICS, Workload
from workers.loadgen.client import Endpoint, RequestRecord
from workers.loadgen.datasets import DatasetError, dataset_kinds
from workers.loadgen.diagnosis import Diagnosis, diagnose
from workers.loadgen.result import build_result, percentile_key, write_result
from workers.loadgen.runner import BenchmarkRun, ServerUnreachable, run_benchmark_sync
from workers.loadgen.scoring import Score, score
from workers.loadgen.workload_files import WorkloadError, builtin_workloads, load_workload

__all__ = ["build_parser", "main"]

PROG = "slotune bench"


class UsageError(ValueError):
    """A mistake in the command line; reported on stderr with exit code 2."""


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'inf'") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (or 'inf'), got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Benchmark an OpenAI-compatible server against an SLO "
        "(vllm bench serve's flags, vLLM's result JSON).",
    )
    p.add_argument("--base-url", help="server URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--host", default="127.0.0.1", help="used when --base-url is not given")
    p.add_argument("--port", type=int, default=8000, help="used when --base-url is not given")
    p.add_argument("--model", required=True, help="model name to put in each request")
    p.add_argument(
        "--workload",
        help=f"built-in name ({', '.join(builtin_workloads())}) or a workload YAML file",
    )
    p.add_argument("--slo", help="SLO targets in ms, e.g. ttft:300,tpot:50 (p:95 sets percentile)")
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="vLLM's form: ttft:300 tpot:50")
    p.add_argument("--slo-percentile", type=float, default=None, help="SLO percentile (99)")
    p.add_argument("--early-abort", action="store_true",
                   help="stop measuring once the SLO gate can no longer hold (scores 0)")
    d = p.add_argument_group("dataset (override the workload's)")
    d.add_argument("--dataset-name", choices=dataset_kinds())
    d.add_argument("--dataset-path", help="JSONL trace for --dataset-name trace")
    d.add_argument("--random-input-len", type=int)
    d.add_argument("--random-output-len", type=int)
    d.add_argument("--random-range-ratio", type=float)
    d.add_argument("--random-prefix-len", type=int)
    d.add_argument("--prefix-repetition-num-prefixes", type=int)
    d.add_argument("--prefix-repetition-prefix-len", type=int)
    d.add_argument("--prefix-repetition-suffix-len", type=int)
    d.add_argument("--prefix-repetition-output-len", type=int)
    t = p.add_argument_group("traffic (override the workload's)")
    t.add_argument("--request-rate", type=_rate, help="req/s or inf")
    t.add_argument("--burstiness", type=float, help="gamma shape; 1 = Poisson")
    t.add_argument("--max-concurrency", type=int)
    t.add_argument("--num-prompts", type=int)
    t.add_argument("--num-warmups", type=int, help="warm-up requests, not counted")
    t.add_argument("--seed", type=int)
    t.add_argument("--request-timeout", type=float, help="per-request deadline, s")
    t.add_argument("--time-scale", type=float, default=1.0,
                   help="the engine runs K× faster than real time: compress arrivals by K, "
                   "stretch measured times by K (default 1)")
    e = p.add_argument_group("endpoint")
    e.add_argument("--endpoint", help="/v1/completions or /v1/chat/completions")
    e.add_argument("--backend", choices=["vllm", "openai", "openai-chat"],
                   help="openai-chat means /v1/chat/completions")
    r = p.add_argument_group("result")
    r.add_argument("--percentile-metrics", default="ttft,tpot,itl,e2el")
    r.add_argument("--metric-percentiles", default="99")
    r.add_argument("--save-result", action="store_true")
    r.add_argument("--result-dir", default=".")
    r.add_argument("--result-filename")
    r.add_argument("--no-scrape", action="store_true", help="do not scrape /metrics")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _endpoint(args: argparse.Namespace, workload: Workload) -> Endpoint:
    if args.endpoint:
        if args.endpoint.rstrip("/").endswith("chat/completions"):
            return "chat"
        if args.endpoint.rstrip("/").endswith("completions"):
            return "completions"
        raise UsageError(
            f"--endpoint {args.endpoint!r}: expected /v1/completions or /v1/chat/completions"
        )
    if args.backend == "openai-chat":
        return "chat"
    if args.backend in {"vllm", "openai"}:
        return "completions"
    return workload.endpoint


def _dataset(args: argparse.Namespace, current: dict[str, Any]) -> dict[str, Any]:
    kind = args.dataset_name or current.get("kind", "random")
    data = dict(current) if kind == current.get("kind") else {"kind": kind}
    flags = {
        "random": {"input_len": args.random_input_len, "output_len": args.random_output_len,
                   "range_ratio": args.random_range_ratio, "prefix_len": args.random_prefix_len},
        "prefix_repetition": {
            "num_prefixes": args.prefix_repetition_num_prefixes,
            "prefix_len": args.prefix_repetition_prefix_len,
            "suffix_len": args.prefix_repetition_suffix_len,
            "output_len": args.prefix_repetition_output_len,
        },
        "trace": {"path": args.dataset_path},
    }
    for kind_name, fields in flags.items():
        given = {k: v for k, v in fields.items() if v is not None}
        if given and kind_name != kind:
            names = ", ".join(sorted(given))
            raise UsageError(f"flags for the {kind_name} dataset ({names}) given, "
                             f"but the dataset is {kind!r} (use --dataset-name {kind_name})")
        data.update(given)
    return data


def _workload(args: argparse.Namespace) -> tuple[Workload, Path | None]:
    base_dir: Path | None = None
    if args.workload:
        workload, base_dir = load_workload(args.workload)
    else:
        workload = Workload(name="bench")
    data = workload.model_dump()
    data["dataset"] = _dataset(args, data["dataset"])
    arrivals = data["arrivals"]
    for key, value in (("request_rate", args.request_rate), ("burstiness", args.burstiness),
                       ("max_concurrency", args.max_concurrency)):
        if value is not None:
            arrivals[key] = value
    for key, value in (("num_prompts", args.num_prompts), ("warmup_requests", args.num_warmups),
                       ("seed", args.seed), ("request_timeout_s", args.request_timeout)):
        if value is not None:
            data[key] = value
    try:
        return Workload.model_validate(data), base_dir
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise UsageError(f"invalid workload after applying flags: {problems}") from None


def _slo(args: argparse.Namespace) -> SLO:
    items: list[str] = []
    if args.slo:
        items.append(args.slo)
    if args.goodput:
        items.extend(args.goodput)
    percentile = 99.0 if args.slo_percentile is None else args.slo_percentile
    try:
        return SLO.parse(items, percentile=percentile)
    except ValidationError as exc:
        msg = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"--slo/--goodput: {msg}") from None
    except ValueError as exc:
        raise UsageError(f"--slo/--goodput: {exc}") from None


def _list_arg(text: str, name: str, valid: Sequence[str] | None = None) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"{name}: empty list")
    if valid is not None:
        bad = [x for x in items if x not in valid]
        if bad:
            raise UsageError(f"{name}: unknown {', '.join(bad)}; valid: {', '.join(valid)}")
    return items


def _percentiles(text: str) -> list[float]:
    out = []
    for item in _list_arg(text, "--metric-percentiles"):
        try:
            value = float(item)
        except ValueError:
            raise UsageError(f"--metric-percentiles: {item!r} is not a number") from None
        if not 0 < value <= 100:
            raise UsageError(f"--metric-percentiles: {item} is not in (0, 100]")
        out.append(value)
    return out


def _result_path(args: argparse.Namespace, workload: Workload, endpoint: Endpoint) -> Path:
    name: str
    if args.result_filename:
        name = str(args.result_filename)
    else:
        rate = workload.arrivals.request_rate
        rate_s = "inf" if math.isinf(rate) else f"{rate:g}"
        conc = workload.arrivals.max_concurrency
        backend = "openai-chat" if endpoint == "chat" else "vllm"
        model = args.model.split("/")[-1]
        name = f"{backend}-{rate_s}qps{f'-concurrency{conc}' if conc else ''}-{model}.json"
    return Path(args.result_dir) / name


def _print_summary(
    console: Console, run: BenchmarkRun, sc: Score, slo: SLO, metrics: list[str],
    pcts: list[float], diagnosis: Diagnosis | None,
) -> None:
    table = Table(title="Serving benchmark result", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("Successful requests", str(sc.completed))
    table.add_row("Failed requests", str(sc.failed))
    table.add_row("Benchmark duration (s)", f"{sc.duration_s:.2f}")
    table.add_row("Total input tokens", str(sc.total_input_tokens))
    table.add_row("Total generated tokens", str(sc.total_output_tokens))
    table.add_row("Request throughput (req/s)", f"{sc.request_throughput:.2f}")
    table.add_row("Request goodput (req/s)", f"{sc.request_goodput:.2f}")
    table.add_row("Output token throughput (tok/s)", f"{sc.output_throughput:.2f}")
    table.add_row("Total token throughput (tok/s)", f"{sc.total_token_throughput:.2f}")
    for metric in metrics:
        s = sc.summaries[metric]
        table.add_row(f"Mean {metric.upper()} (ms)", f"{s.mean:.2f}")
        table.add_row(f"Median {metric.upper()} (ms)", f"{s.median:.2f}")
        for p in pcts:
            table.add_row(f"P{percentile_key(p)} {metric.upper()} (ms)", f"{s.percentiles[p]:.2f}")
    table.add_row("Send lag p99 (ms)", f"{run.send_lag.p99_ms:.2f}")
    console.print(table)
    verdict = "[green]PASS[/green]" if sc.gate else "[red]FAIL[/red]"
    console.print(f"SLO gate ({slo}): {verdict} — {sc.gate_reason}")
    console.print(f"Objective: {sc.objective:.3f} req/s")
    if diagnosis is not None:
        console.print(f"Diagnosis: [bold]{diagnosis.label}[/bold] — {diagnosis.reason}")
        for knob in diagnosis.knobs:
            console.print(f"  knob: {knob}")
    elif not run.scrape.available:
        console.print(f"Diagnosis: none ({run.scrape.error or 'no /metrics'})")
    for warning in run.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _run(args: argparse.Namespace) -> int:
    if not (args.time_scale > 0 and math.isfinite(args.time_scale)):
        raise UsageError(f"--time-scale must be a positive number, got {args.time_scale}")
    workload, base_dir = _workload(args)
    slo = _slo(args)
    endpoint = _endpoint(args, workload)
    metrics = _list_arg(args.percentile_metrics, "--percentile-metrics", SLO_METRICS)
    pcts = _percentiles(args.metric_percentiles)
    base_url = args.base_url or f"http://{args.host}:{args.port}"
    if not base_url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url {base_url!r}: expected http://HOST:PORT")
    err = Console(stderr=True)
    out = Console()
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
        console=err, disable=args.quiet, transient=False,
    )
    task = progress.add_task(f"{workload.name} → {base_url}", total=workload.num_prompts,
                             failed=0)
    failures = 0

    def tick(done: int, total: int, record: RequestRecord) -> None:
        nonlocal failures
        failures += 0 if record.success else 1
        progress.update(task, completed=done, total=total, failed=failures)

    with progress:
        run = run_benchmark_sync(
            base_url, args.model, workload, slo, endpoint=endpoint,
            time_scale=args.time_scale, early_abort=args.early_abort,
            scrape_metrics=not args.no_scrape, base_dir=base_dir, progress=tick,
        )
    aborted = run.early_abort.reason if run.early_abort else None
    sc = score(run.records, run.duration_s, slo, pcts, aborted=aborted)
    diagnosis = diagnose(run.scrape, sc, slo)
    _print_summary(out, run, sc, slo, metrics, sorted(set(pcts)), diagnosis)
    if args.save_result or args.result_filename:
        doc = build_result(run=run, score=sc, workload=workload, slo=slo, model=args.model,
                           endpoint=endpoint, base_url=base_url, diagnosis=diagnosis,
                           percentile_metrics=metrics)
        path = _result_path(args, workload, endpoint)
        write_result(doc, path)
        out.print(f"Result written to {path}")
    if sc.completed == 0 and run.early_abort is None:
        first = next((r.error for r in run.records if r.error), "no request was sent")
        err.print(f"{PROG}: every request failed; first error: {first}")
        return 1
    return 0


def main(argv: list[str]) -> int:
    """Entry point of ``slotune bench``; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage + the error (or --help)
        return int(exc.code) if isinstance(exc.code, int) else 2
    try:
        return _run(args)
    except (UsageError, WorkloadError, DatasetError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except ServerUnreachable as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the result directory is not writable
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
