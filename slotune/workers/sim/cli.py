"""Command line of the simulated engine: ``serve`` (vLLM's flags) and ``step-time``.

Runnable as ``python -m slotune.workers.sim serve MODEL …`` so it can stand in for the ``vllm``
binary, and as ``slotune sim serve|step-time``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from slotune.workers.sim import config, step_time

    parser = argparse.ArgumentParser(
        prog="slotune sim", description="A simulated vLLM engine (no GPU needed)."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{serve,step-time}")
    serve = sub.add_parser(
        "serve", help="serve a model with vLLM's flags on a simulated GPU",
        description="Start the OpenAI-compatible simulated engine with vLLM's flags.",
    )
    config.add_engine_arguments(serve)
    timing = sub.add_parser(
        "step-time", help="the modelled time of one engine step, with its breakdown",
        description="Print the modelled time of one engine step of a given shape.",
    )
    step_time.add_arguments(timing)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "serve":
        from slotune.workers.sim.server import serve_from_args

        return serve_from_args(args)
    from slotune.workers.sim import step_time

    return step_time.run(args)
