"""``slotune trial run``: one configuration by hand — the seed's one-variable experiment.

It boots exactly the configuration asked for (the space's defaults, with ``--set``
overrides), so the engine's own validation has the last word: a combination vLLM
refuses comes back ``invalid_config`` with vLLM's sentence, in about a second. A rule
of the space that the configuration breaks is shown as a note. ``--executor virtual``
runs the same spec on the simulated engine in virtual time instead — the same pipeline
(:mod:`slotune.workers.trial.pipeline`), so the same statuses, failures and result fields.

Exit codes: 0 the trial ran and its status is ok; 3 it ran and failed (the result says
why); 2 a mistake in the command (one line on stderr).
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Annotated, Any, Literal

import typer
import yaml
from pydantic import ValidationError
from rich.table import Table

from slotune.tuner.cli.output import make_console
from slotune.tuner.settings import get_settings
from slotune.tuner.spaces import SearchSpace, SpaceError, load_space
from slotune.workers.contracts import SLO, KnobValue, ObjectiveMode, TrialResult, TrialSpec
from slotune.workers.engines.sim import SimOptions
from slotune.workers.engines.vllm import vllm_command
from slotune.workers.loadgen import WorkloadError, load_workload

__all__ = ["trial_app"]

TrialExecutorKind = Literal["live", "virtual"]

trial_app = typer.Typer(help="One trial: boot, measure against the SLO, tear down.",
                        no_args_is_help=True)


class UsageError(ValueError):
    """A mistake in the command line."""


def parse_sets(items: list[str], space: SearchSpace) -> tuple[dict[str, KnobValue],
                                                              dict[str, KnobValue]]:
    """``knob=value`` items → (knob values, fixed-argument overrides); values are YAML."""
    knobs: dict[str, KnobValue] = {}
    fixed: dict[str, KnobValue] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise UsageError(f"--set {item!r}: expected knob=value, e.g. --set max_num_seqs=128")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, list):
            raise UsageError(f"--set {item!r}: a knob takes one value, not a list")
        if name in space.knobs:
            knobs[name] = value
        elif name in space.fixed:
            fixed[name] = value
        else:
            raise UsageError(
                f"--set {name}: not a knob or fixed argument of space {space.name!r}; "
                f"valid: {', '.join([*space.knobs, *space.fixed])}")
    return knobs, fixed


def build_spec(space: SearchSpace, sets: list[str], *, workload: str | None, slo: str | None,
               mode: ObjectiveMode | None, request_rate: float | None,
               num_prompts: int | None, time_scale: float | None,
               run_id: str | None, allow_lossy: bool = False
               ) -> tuple[TrialSpec, str | None]:
    knobs, fixed = parse_sets(sets, space)
    if allow_lossy:
        space = space.allowing_lossy()
    params = {**space.defaults(), **knobs}
    try:
        chosen = load_workload(workload, trust=get_settings().trust.for_operator())[0] if workload \
            else space.resolve_workload()
        chosen_slo = SLO.parse(slo) if slo else space.resolve_slo()
    except (WorkloadError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if request_rate is not None or num_prompts is not None:
        data = chosen.model_dump()
        if request_rate is not None:
            data["arrivals"]["request_rate"] = request_rate
        if num_prompts is not None:
            data["num_prompts"] = num_prompts
        try:
            chosen = type(chosen).model_validate(data)
        except ValidationError as exc:
            raise UsageError("; ".join(
                f"--{'num-prompts' if e['loc'][0] == 'num_prompts' else 'request-rate'}: "
                f"{e['msg']}" for e in exc.errors())) from None
    options = space.options
    if time_scale is not None:
        if not isinstance(options, SimOptions):
            raise UsageError(f"--time-scale: an option of the simulated engine; space "
                             f"{space.name!r} runs {space.engine} (drop it)")
        options = options.model_copy(update={"time_scale": time_scale})
    spec = space.to_trial_spec(params, run_id or f"manual-{uuid.uuid4().hex[:8]}",
                               workload=chosen, slo=chosen_slo, mode=mode, options=options)
    if fixed:  # a fixed argument set by hand may be the lossy one
        spec = spec.model_copy(update={"engine_args": {**spec.engine_args, **fixed},
                                       "quality": space.quality_gate({**params, **fixed})})
    return spec, space.check({**params, **fixed})


@trial_app.command("run")
def run(
    space: Annotated[str, typer.Option("--space", help="Search space: a YAML file or a "
                                       "shipped name (lab, h100, …).")],
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="knob=value (repeatable); unset knobs take the space's defaults.")] = None,
    workload: Annotated[str | None, typer.Option(help="Workload name or YAML file "
                                                 "(default: the space's).")] = None,
    slo: Annotated[str | None, typer.Option(help="e.g. ttft:300,tpot:50 "
                                            "(default: the space's).")] = None,
    mode: Annotated[ObjectiveMode | None, typer.Option(help="goodput or capacity.")] = None,
    request_rate: Annotated[float | None, typer.Option(help="Override the workload's "
                                                       "request rate (req/s).")] = None,
    num_prompts: Annotated[int | None, typer.Option(help="Override the number of "
                                                    "measured requests.")] = None,
    time_scale: Annotated[float | None, typer.Option(help="Simulated engine: run this many "
                                                     "times faster than real time.")] = None,
    run_id: Annotated[str | None, typer.Option(
        "--run-id", "--trial-id", help="Name the run (its engine process, workdir and logs "
        "carry it; --trial-id: the old spelling).")] = None,
    allow_lossy: Annotated[bool, typer.Option(
        help="Let lossy knob values score without their quality check.")] = False,
    executor: Annotated[TrialExecutorKind, typer.Option(
        help="live: boot the space's engine and measure it; virtual: the simulated engine "
             "in virtual time (milliseconds, no server), through the same pipeline.")
    ] = "live",
    as_json: Annotated[bool, typer.Option("--json", help="Print the TrialResult as "
                                          "JSON.")] = False,
) -> None:
    """Run one trial by hand and print its result."""
    try:
        loaded = load_space(space, trust=get_settings().trust.for_operator())
        spec, broken = build_spec(loaded, sets or [], workload=workload, slo=slo, mode=mode,
                                  request_rate=request_rate, num_prompts=num_prompts,
                                  time_scale=time_scale, run_id=run_id,
                                  allow_lossy=allow_lossy)
    except (SpaceError, UsageError) as exc:
        print(f"slotune trial run: error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    err = make_console(stderr=True)
    if broken:
        err.print(f"[yellow]note:[/] this configuration breaks the space's rule "
                  f"[bold]{broken}[/]; booting it anyway so the engine can say why")
    if not as_json:
        err.print(f"trial {spec.run_id}: {vllm_command(spec.model, spec.engine_flags)}")
        if executor == "virtual":
            err.print(f"virtual: the simulated engine on a modelled {spec.gpu}, in "
                      "virtual time (timings are what the trial would take on that GPU)")
    # The engines and the load generator load here, not for every slotune command.
    from slotune.workers.trial.live import run_trial
    from slotune.workers.trial.virtual import run_virtual_trial

    if executor == "virtual":
        result = run_virtual_trial(spec)
    else:
        with err.status("booting, warming up, measuring…", spinner="dots"):
            result = run_trial(spec)
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        _print(result, spec)
    raise typer.Exit(0 if result.status == "ok" else 3)


def _print(result: TrialResult, spec: TrialSpec) -> None:
    console = make_console()
    table = Table(title=f"trial {result.run_id}", show_header=False)
    rows: list[tuple[str, Any]] = [("status", result.status)]
    if result.failure:
        rows += [("failure", result.failure), ("why", result.failure_message)]
    rows += [("objective", f"{result.objective:.3f} " + (
        "req/s capacity" if spec.mode == "capacity" else "req/s goodput")),
        ("SLO gate", "PASS" if result.gate_passed else "FAIL" if result.metrics else "—")]
    for key in ("request_throughput", "p99_ttft_ms", "p99_tpot_ms"):
        if key in result.metrics and result.metrics[key] is not None:
            rows.append((key, f"{result.metrics[key]:.2f}"))
    rows += [(f"constraint {k}", f"{v:+.3f}") for k, v in result.constraints.items()]
    if result.early_abort:
        rows.append(("early abort", result.early_abort))
    if result.quality is not None:
        rows.append(("quality", result.quality.detail or ""))
    if result.diagnosis:
        rows.append(("diagnosis", f"{result.diagnosis.get('label')}: "
                                  f"{result.diagnosis.get('reason')}"))
    t = result.timings
    rows.append(("timings (s)", json.dumps({k: round(v, 2) for k, v in {
        "boot": t.boot_s, "warmup": t.warmup_s, "measure": t.measure_s,
        "teardown": t.teardown_s, "total": t.total_s}.items() if v is not None})))
    if result.engine.kv_cache_tokens:
        rows.append(("KV cache", f"{result.engine.kv_cache_tokens:,} tokens"))
    for key, value in rows:
        table.add_row(key, str(value))
    console.print(table)
    if result.log_tail and result.status == "failed":
        console.print("[dim]engine log (tail):[/]\n" + result.log_tail)
