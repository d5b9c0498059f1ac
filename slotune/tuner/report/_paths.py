"""Where a report may be written: the one rule, checked before a sweep starts and again
when its report is written.

A report directory is created when missing. It may not be, or lie under, a symlink that
someone else could have planted — a link inside a directory that others (group or world)
may write, such as a shared ``/tmp`` — and its files are opened without following
symlinks, so no link can redirect the write. Links that only their directory's owner
could have made (a system's ``/var/run`` → ``/run``, a home on another disk) are followed
as usual. A directory that cannot be written (read-only filesystem, ``/proc``, no
permission) or whose disk is all but full is refused with the reason, before anything
runs. A report is written to a temporary name beside its target and renamed into place,
so a write that fails (the disk filled during the night) leaves no partial file.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["MIN_FREE_BYTES", "ReportPathError", "ReportWriteError", "prepare_report_dir",
           "write_no_follow"]

MIN_FREE_BYTES = 16 * 1024
"""Less free space than this under the report directory is refused up front: no report
fits (the smallest, of a two-trial sweep, is some 50 KiB; the HTML carries its charts
inline). More than this may still fill up by the end: that is a warning then."""


class ReportPathError(ValueError):
    """The report cannot go where it was asked to (a planted symlink, not a directory,
    not writable, a full disk); the message says why and what to give instead."""


class ReportWriteError(Exception):
    """Writing the report failed part-way (disk full, I/O error); nothing was left."""


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
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise ReportPathError(f"report directory {folder} is on a disk with only "
                              f"{free // 1024} KiB free; a report needs tens of KiB or more: "
                              "free space there or give another directory")
    return folder


def write_no_follow(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all, refusing a symlink planted there.

    The text goes to a new temporary file in the same directory (created exclusively,
    so no link can redirect it) and is renamed over ``path``: a reader sees the old
    report or the new one, never half of one. :class:`ReportWriteError` when the write
    fails; the temporary file is removed.
    """
    if path.is_symlink():
        raise ReportPathError(f"report file {path} is a symlink; remove it or choose "
                              "another directory")
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".part")
    except OSError as exc:
        raise ReportPathError(f"report file {path} cannot be written "
                              f"({exc.strerror or exc}); give a writable directory") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        reason = ("the disk is full" if exc.errno == errno.ENOSPC
                  else exc.strerror or str(exc))
        raise ReportWriteError(f"report file {path} was not written ({reason}); nothing "
                               "partial was left") from None


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
