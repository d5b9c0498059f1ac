"""How the CLI writes for people: one console rule for every command.

On a terminal, rich's console as wide as the terminal. Anywhere else — a file, a pipe,
``| tee``, CI — as wide as the content (or ``$COLUMNS`` when set): rich would otherwise
assume 80 columns and wrap every table cell over several lines.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

__all__ = ["make_console"]


def make_console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=int(columns) if columns.isdigit() else 10_000,
                   soft_wrap=True)
