"""``slotune sim step-time``: the modelled cost of one engine step (placeholder, see issue 8)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("step-time is not implemented yet")
