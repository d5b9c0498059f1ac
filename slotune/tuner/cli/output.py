"""How the CLI writes for people: one console rule for every command, and one rule for a
text cell a spreadsheet will open.

On a terminal, rich's console as wide as the terminal. Anywhere else — a file, a pipe,
``| tee``, CI — as wide as the content (or ``$COLUMNS`` when set): rich would otherwise
assume 80 columns and wrap every table cell over several lines.

Tab-separated output (``slotune best --output tsv``) is opened in spreadsheets, which
evaluate a cell that begins with ``=``, ``+``, ``-`` or ``@`` (and a leading tab or CR)
as a formula: a workload named ``=HYPERLINK(…)`` would be a link the reader never wrote.
:func:`spreadsheet_cell` is the one place such text is made inert.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

__all__ = ["FORMULA_STARTS", "make_console", "spreadsheet_cell"]


def make_console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=int(columns) if columns.isdigit() else 10_000,
                   soft_wrap=True)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a cell as a formula (OWASP's CSV-injection list)."""


def spreadsheet_cell(text: str) -> str:
    """``text`` as an inert tab-separated cell: a leading quote where it would begin a
    formula (OWASP's advice; the spreadsheet shows the text as written), and tabs and
    line breaks inside it as spaces (TSV has no quoting: they would split the row)."""
    if text.startswith(FORMULA_STARTS):
        text = "'" + text
    return text.replace("\r\n", " ").translate(_ROW_BREAKERS)


_ROW_BREAKERS = str.maketrans({"\t": " ", "\r": " ", "\n": " "})
