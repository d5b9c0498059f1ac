"""Where a report may be written: the one rule, checked before a sweep starts and again
when its report is written.

A report directory is created when missing. It may not be, or lie under, a symlink that
someone else could have planted — a link inside a directory that others (group or world)
may write, such as a shared ``/tmp`` — and its files are opened without following
symlinks, so no link can redirect the write. Links that only their directory's owner
could have made (a system's ``/var/run`` → ``/run``, a home on another disk) are followed
as usual. A directory that cannot be written (read-only filesystem, ``/proc``, no
permission) is refused with the reason, before anything runs.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["ReportPathError", "prepare_report_dir", "write_no_follow"]


class ReportPathError(ValueError):
    """The report cannot go where it was asked to (a planted symlink, not a directory,
    not writable); the message says why and what to give instead."""


def prepare_report_dir(directory: str | Path) -> Path:
    """Check ``directory`` against the rule above, create it, and prove it writable."""
    folder = Path(os.path.abspath(directory))  # normalised, links not resolved
    if folder.is_symlink():
        raise ReportPathError(f"report directory {folder} is a symlink; give a real "
                              "directory (or a new path, created for you)")
    _refuse_planted_links(folder)
    if folder.exists() and not folder.is_dir():
        raise ReportPathError(f"report directory {folder} exists and is not a directory")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass  # a file can be created there: the report will be too
    except OSError as exc:
        raise ReportPathError(f"report directory {folder} cannot be written "
                              f"({exc.strerror or exc}); give a writable directory") from None
    return folder


def write_no_follow(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, refusing (not following) a symlink planted there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReportPathError(f"report file {path} is a symlink; remove it or choose "
                                  "another directory") from None
        raise ReportPathError(f"report file {path} cannot be written "
                              f"({exc.strerror or exc}); give a writable directory") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _refuse_planted_links(folder: Path) -> None:
    for parent in reversed(folder.parents):
        if not parent.is_symlink():
            continue
        holder = os.stat(parent.parent)
        if holder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ReportPathError(
                f"report directory {folder} lies under the symlink {parent}, in "
                f"{parent.parent}, a directory others may write: it could have been planted "
                "there; give a path without it")
