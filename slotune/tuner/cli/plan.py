"""``slotune plan`` (how many replicas of which configuration carry N req/s, at what
cost) and ``slotune frontier`` (every probed point of a workload, as CSV or JSON).

The command asks the API's own question (:class:`~slotune.tuner.api.schemas.CapacityIn`, so the
same bounds) and gets the API's own answer (:func:`slotune.tuner.api.routes.capacity.answer`:
the same planner, the same price table — ``SLOTUNE_GPU_PRICES`` with ``--gpu-price``
over it — and, with ``--json``, the same JSON as ``POST /api/v1/capacity``).

Exit codes: 0 a plan; 1 nothing measured yet for the question, or the database failed;
2 a mistake in the command (a bad value, an unknown workload, several SLOs measured and
none named, a database not migrated); 3 measured, but no configuration met the SLO.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from slotune.tuner.cli.output import make_console
from slotune.tuner.db.errors import StorageError, exit_code
from slotune.tuner.planning.planner import DEFAULT_HEADROOM
from slotune.tuner.settings import GPU_PRICE_MAX, get_settings, gpu_price_table

if TYPE_CHECKING:  # the API's modules load FastAPI: only when the command runs
    from slotune.tuner.api.schemas import CapacityOut

__all__ = ["frontier_command", "parse_gpu_prices", "plan_command"]


def plan_command(
    workload: Annotated[str, typer.Option("--workload", "-w", help="The workload to serve.",
                                          show_default=False)],
    target_rps: Annotated[float, typer.Option(
        "--target-rps", help="Requests per second to carry (> 0).", show_default=False)],
    headroom: Annotated[float, typer.Option(
        help="Fraction of each replica's capacity kept spare (bursts, failover), 0 … 0.95.")]
        = DEFAULT_HEADROOM,
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Only this GPU type.")] = None,
    slo: Annotated[str | None, typer.Option(
        help="The SLO, as 'ttft:300,tpot:50' (p:95 sets the percentile) or its canonical "
        "JSON; needed when the workload was measured under several.")] = None,
    gpu_price: Annotated[list[str] | None, typer.Option(
        "--gpu-price", metavar="NAME=PRICE", help="USD per GPU-hour of a GPU type, over "
        "SLOTUNE_GPU_PRICES (repeatable), e.g. --gpu-price h100-sxm=3.0.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print POST /api/v1/capacity's JSON answer instead.")] = False,
    database_url: Annotated[str | None, typer.Option(
        "--database-url", help="Database URL (default: DATABASE_URL, else the embedded "
        "SQLite file).", show_default=False)] = None,
) -> None:
    """The cheapest number of replicas of a measured configuration that carries a target
    rate within the SLO, with the best plan per (model, GPU) side by side."""
    from slotune.tuner.api.errors import InvalidInput
    from slotune.tuner.api.routes.capacity import answer
    from slotune.tuner.api.schemas import CapacityIn
    from slotune.tuner.db.snapshot import load_workload
    from slotune.tuner.db.store import Store
    from slotune.tuner.planning.planner import NothingMeasured, PlanError, SloNeverMet

    try:
        prices = parse_gpu_prices(gpu_price or [])
        question = CapacityIn(workload=workload, target_rps=target_rps, headroom=headroom,
                              model=model, gpu=gpu, slo=slo, gpu_prices=prices or None)
    except ValidationError as exc:
        raise _fail(_options_reason(exc), 2) from None
    except ValueError as exc:
        raise _fail(str(exc), 2) from None
    try:
        settings = get_settings()
    except ValidationError as exc:  # a bad SLOTUNE_GPU_PRICES, say: the message names it
        raise _fail("; ".join(e["msg"].removeprefix("Value error, ")
                              for e in exc.errors(include_url=False)), 2) from None
    url = database_url or settings.database.url
    try:
        with Store(url) as store:
            store.check_schema()
            out = answer(question, functools.partial(load_workload, store), settings)
    except InvalidInput as exc:
        raise _fail(f"--slo {slo!r}: {exc.msg}", 2) from None
    except StorageError as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    except PlanError as exc:  # AmbiguousSlo (2): name one with --slo
        code = 1 if isinstance(exc, NothingMeasured) else 3 if isinstance(exc, SloNeverMet) else 2
        raise _fail(str(exc).replace("with slo", "with --slo"), code) from None
    if as_json:
        print(json.dumps(out.model_dump(mode="json"), indent=2))
        return
    _show(out)


def frontier_command(
    workload: Annotated[str, typer.Option("--workload", "-w", help="The workload.",
                                          show_default=False)],
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Only this GPU type.")] = None,
    slo: Annotated[str | None, typer.Option(
        help="The SLO whose percentile, targets and winner the points are read under, as "
        "'ttft:300,tpot:50' (default: the one the sweeps used).")] = None,
    output_format: Annotated[str, typer.Option(
        "--format", help="csv (one row per probed point) or json (GET "
        "/api/v1/workloads/NAME/frontier's answer: points, winner, capacity grid).")] = "csv",
    database_url: Annotated[str | None, typer.Option(
        "--database-url", help="Database URL (default: DATABASE_URL, else the embedded "
        "SQLite file).", show_default=False)] = None,
) -> None:
    """Interactivity (output tokens/s per user) against output tokens/s per GPU for every
    configuration and probed rate of a workload, its Pareto frontier and winner.

    Exit codes: 0 written; 1 no capacity sweep of the workload, or the database failed;
    2 a mistake (an unknown workload, a bad value, several (model, GPU) or SLOs and none
    named)."""
    from slotune.tuner.api.errors import InvalidInput
    from slotune.tuner.api.params import canonical_slo
    from slotune.tuner.db.snapshot import load_workload
    from slotune.tuner.db.store import NotFound, Store
    from slotune.tuner.planning.frontier import build_frontier, to_csv
    from slotune.tuner.planning.planner import NothingMeasured, PlanError

    if output_format not in ("csv", "json"):
        raise _fail(f"--format {output_format!r}: valid: csv, json", 2)
    try:
        settings = get_settings()
        key = canonical_slo(slo, ("--slo",))
    except ValidationError as exc:
        raise _fail("; ".join(e["msg"].removeprefix("Value error, ")
                              for e in exc.errors(include_url=False)), 2) from None
    except InvalidInput as exc:
        raise _fail(f"--slo {slo!r}: {exc.msg}", 2) from None
    try:
        with Store(database_url or settings.database.url) as store:
            store.check_schema()
            answer = build_frontier(load_workload(store, workload), model=model, gpu=gpu,
                                    slo=key,
                                    gpu_prices=settings.planner.prices(None))
    except NotFound as exc:
        raise _fail(str(exc), 2) from None
    except StorageError as exc:
        raise _fail(str(exc), exit_code(exc)) from None
    except PlanError as exc:
        code = 1 if isinstance(exc, NothingMeasured) else 2
        message = str(exc)
        for name in ("slo", "model", "gpu"):
            message = message.replace(f"with {name}", f"with --{name}")
        raise _fail(message, code) from None
    if output_format == "json":
        print(json.dumps(answer.model_dump(mode="json"), indent=2))
    else:
        sys.stdout.write(to_csv(answer))


_PRICE_FORM = (f"NAME=PRICE, PRICE in USD per GPU-hour (a number from 0 to {GPU_PRICE_MAX:g}), "
               "e.g. --gpu-price h100-sxm=3.0")


def parse_gpu_prices(items: list[str]) -> dict[str, float]:
    """``NAME=PRICE`` items → a price table (a later item wins); ``ValueError`` naming the
    item and the form it takes."""
    prices: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        try:
            price = float(raw)
        except ValueError:
            price = math.nan
        if not sep or not name.strip() or math.isnan(price):
            raise ValueError(f"--gpu-price {item!r}: expected {_PRICE_FORM}")
        prices[name.strip()] = price
    return gpu_price_table(prices, "--gpu-price", _PRICE_FORM)


def _options_reason(exc: ValidationError) -> str:
    """pydantic's errors of the question, named by the options that carried them."""
    parts = []
    for e in exc.errors(include_url=False, include_input=False):
        loc = [str(p) for p in e["loc"]]
        option = "--" + (loc[0].replace("_", "-") if loc else "question")
        if option == "--gpu-prices":
            option = "--gpu-price" + (f" {loc[1]}" if len(loc) > 1 else "")
        parts.append(f"{option}: {e['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _fail(message: str, code: int) -> typer.Exit:
    print(f"slotune: error: {' '.join(message.split())}", file=sys.stderr)
    return typer.Exit(code)


def _show(out: CapacityOut) -> None:
    from slotune.tuner.cli.sweep import slo_text

    console = make_console()
    console.print(_sentence(out), highlight=False)
    console.print(f"  {out.vllm_command}", soft_wrap=True, highlight=False)
    table = Table(title=f"the cheapest plan per model and GPU (SLO {slo_text(out.slo)}, "
                        f"headroom {out.headroom:.0%})")
    for col in ("model", "GPU", "replicas", "GPUs", "req/s per replica", "basis", "$/GPU-h",
                "$/h", "configuration", "trials", ""):
        table.add_column(col)
    for o in out.options:
        marks = [m for m, on in (("confirmed", o.confirmed), ("[yellow]stale[/]", o.stale))
                 if on]
        table.add_row(o.model, o.gpu, f"{o.replicas} × {o.gpus_per_replica}", str(o.gpus),
                      _rate(o.per_replica_rps), _BASIS_WORDS[o.basis]
                      + (f" ({o.confidence.level} confidence)" if o.confidence else ""),
                      _money(o.price_per_gpu_hour), _money(o.cost_per_hour),
                      _flags(o.config), ", ".join(str(t) for t in o.trial_ids), " ".join(marks))
    console.print(table)
    if out.basis != "capacity":
        console.print(f"note: {out.basis_note}", highlight=False)
    for note in out.notes:
        console.print(f"note: {note}", highlight=False)
    if out.confidence is not None:
        c = out.confidence
        above = "never broke" if c.bracket[1] is None else f"broke at {_rate(c.bracket[1])}"
        console.print(
            f"confidence: {c.level} — passed at {_rate(c.bracket[0])} req/s, {above}; "
            f"{c.probes} probe(s) decided, {c.unknown_probes} could not be scored, "
            f"{c.measurements} measurement(s)"
            + ("" if c.spread is None else f", spread {c.spread:.0%}")
            + ("" if c.interpolated is None
               else f"; interpolated between the probes: {_rate(c.interpolated)} req/s "
                    "(an estimate, not sized on)")
            + ("" if c.undecided is None else f"; undecided: {c.undecided}"),
            highlight=False)
    for r in out.remeasure:
        console.print(f"re-measure under this SLO: {_flags(r.config)} on {r.gpu} (trials "
                      f"{', '.join(map(str, r.trial_ids))}): {r.why}", highlight=False)


def _sentence(out: CapacityOut) -> str:
    replicas = f"{out.replicas} × {out.gpu} replica{'s' if out.replicas != 1 else ''}"
    gpus = f"{out.gpus} GPU{'s' if out.gpus != 1 else ''}"
    cost = (f"no price for {out.gpu}" if out.cost_per_hour is None
            else f"{_money(out.cost_per_hour)}/h")
    basis = {"capacity": "measured capacity",
             "rescored_probes": "the stored probes (no sweep measured this SLO), capacity",
             "goodput_lower_bound": "a goodput lower bound of"}[out.basis]
    config = f"{out.model} with {_flags(out.config)}" if out.config else \
        f"{out.model} with the engine's defaults"
    return (f"{_rate(out.target_rps)} req/s of {out.workload} needs {replicas} ({gpus}, "
            f"{cost}) of {config}, from {basis} {_rate(out.per_replica_rps)} req/s per replica")


_BASIS_WORDS = {"capacity": "capacity", "goodput_lower_bound": "goodput (lower bound)",
                "rescored_probes": "rescored probes"}


def _flags(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "defaults"


def _rate(value: float) -> str:
    return f"{value:.4g}"


def _money(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"
