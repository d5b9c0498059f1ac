"""The ``slotune`` command line.

Commands that mirror another tool's flags (``sim serve`` takes vLLM's, ``bench`` takes
``vllm bench serve``'s) forward their arguments untouched to that tool's own argparse
parser in ``workers``, so the names and help match the tool they stand in for.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer
from pydantic import ValidationError

# Typer 0.29 vendors click; its exception classes are only importable from there.
from typer._click import exceptions as click

from slotune.tuner.cli.api import api_command
from slotune.tuner.cli.db import db_app
from slotune.tuner.cli.plan import frontier_command, plan_command
from slotune.tuner.cli.sweep import best_command, coordinator_command, sweep_app
from slotune.tuner.cli.trace import trace_app
from slotune.tuner.cli.trial import trial_app
from slotune.tuner.db.errors import StorageError, exit_code

app = typer.Typer(
    name="slotune",
    help="SLO-constrained search for LLM serving configurations.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
sim_app = typer.Typer(help="The simulated vLLM engine.", no_args_is_help=True)
app.add_typer(sim_app, name="sim")
app.add_typer(db_app, name="db")
app.add_typer(trial_app, name="trial")
app.add_typer(trace_app, name="trace")
app.command("api")(api_command)
app.add_typer(sweep_app, name="sweep")
app.command("coordinator")(coordinator_command)
app.command("best")(best_command)
app.command("plan")(plan_command)
app.command("frontier")(frontier_command)

_PASSTHROUGH = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "help_option_names": [],
}


@sim_app.command("serve", context_settings=_PASSTHROUGH, add_help_option=False)
def sim_serve(ctx: typer.Context) -> None:
    """Serve a model on the simulated engine (vLLM's flags; --help for all of them)."""
    from slotune.workers.sim.cli import main as sim_main

    raise typer.Exit(sim_main(["serve", *ctx.args]))


@sim_app.command("step-time", context_settings=_PASSTHROUGH, add_help_option=False)
def sim_step_time(ctx: typer.Context) -> None:
    """What one engine step of a given shape costs, with its breakdown (--help for flags)."""
    from slotune.workers.sim.cli import main as sim_main

    raise typer.Exit(sim_main(["step-time", *ctx.args]))


@app.command("bench", context_settings=_PASSTHROUGH, add_help_option=False)
def bench(ctx: typer.Context) -> None:
    """Benchmark any OpenAI-compatible server (vllm bench serve's flags; --help for all)."""
    from slotune.workers.loadgen.cli import main as bench_main

    raise typer.Exit(bench_main(list(ctx.args)))


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point.

    A usage mistake (an unknown option, a value out of range) is one line on stderr and
    exit code 2, like every other mistake in a command, instead of click's framed box.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = app(args=args, prog_name="slotune", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:  # `slotune sweep`: the group's help, as before
        exc.show()
        sys.exit(2)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "slotune"
        message = " ".join(exc.format_message().split())
        print(f"{where}: error: {message} (see {where} --help)", file=sys.stderr)
        sys.exit(2)
    except click.ClickException as exc:
        print(f"slotune: error: {' '.join(exc.format_message().split())}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("slotune: aborted", file=sys.stderr)
        sys.exit(1)
    except ValidationError as exc:  # the environment's settings (SLOTUNE_*), read lazily
        reasons = "; ".join(" ".join(str(e["msg"]).split()) for e in exc.errors())
        print(f"slotune: error: {reasons}", file=sys.stderr)
        sys.exit(2)
    except StorageError as exc:  # what a command did not map itself: one line, never a trace
        print(f"slotune: error: {' '.join(str(exc).split())}", file=sys.stderr)
        sys.exit(exit_code(exc))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
