"""``slotune trace``: request traces for workloads.

``slotune trace convert LOG OUT`` turns a request log (JSONL or CSV) into a Mooncake-format
trace (``dataset: {kind: mooncake_trace, path: OUT}`` in a workload, or ``slotune bench
--dataset-name mooncake_trace --dataset-path OUT``);
:mod:`slotune.workers.loadgen.generate.mooncake` does the work. Exit codes: 0 written; 2 a bad row
(its line and field on stderr) or an unreadable file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from slotune.workers.loadgen.generate.mooncake import (
    LOG_FIELDS,
    MOONCAKE_BLOCK,
    TraceLogError,
    convert_log,
    dump_trace,
)

__all__ = ["trace_app"]

trace_app = typer.Typer(help="Request traces (Mooncake format) for workloads.",
                        no_args_is_help=True)

_FIELDS_HELP = "; ".join(f"{name}: {meaning}" for name, meaning in LOG_FIELDS.items())


@trace_app.command("convert", help=(
    "Convert a request log (JSONL, or CSV with a header) into a Mooncake-format trace: "
    "JSONL {timestamp (ms from the first request), input_length, output_length, hash_ids "
    f"(one id per block of --block-size tokens)}}, in time order. Log fields — {_FIELDS_HELP}."))
def convert_command(
    log: Annotated[Path, typer.Argument(help="The request log: .jsonl or .csv.",
                                        show_default=False)],
    out: Annotated[Path, typer.Argument(help="The trace to write (JSONL).",
                                        show_default=False)],
    timestamp_unit: Annotated[Literal["s", "ms"], typer.Option(
        "--timestamp-unit", help="The unit of the log's timestamps.")] = "s",
    block_size: Annotated[int, typer.Option(
        "--block-size", min=1, help="Tokens per hash id (Mooncake's traces use 512; "
        "the dataset's block_size must match).")] = MOONCAKE_BLOCK,
    fmt: Annotated[Literal["jsonl", "csv"] | None, typer.Option(
        "--format", help="The log's format (default: from its suffix).",
        show_default=False)] = None,
) -> None:
    kind = fmt or ("csv" if log.suffix.lower() == ".csv" else "jsonl")
    try:
        text = log.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"slotune trace convert: error: {log}: cannot be read ({exc})", file=sys.stderr)
        raise typer.Exit(2) from None
    try:
        rows = convert_log(text, fmt=kind, timestamp_unit=timestamp_unit,
                           block_size=block_size, where=str(log))
    except TraceLogError as exc:
        print(f"slotune trace convert: error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    try:
        out.write_text(dump_trace(rows), encoding="utf-8")
    except OSError as exc:
        print(f"slotune trace convert: error: {out}: cannot be written ({exc.strerror})",
              file=sys.stderr)
        raise typer.Exit(2) from None
    shared = sum(len(r["hash_ids"]) for r in rows) - len({h for r in rows for h in r["hash_ids"]})
    print(f"wrote {out}: {len(rows)} requests, {shared} of their blocks repeat an earlier one "
          f"(block size {block_size})")
