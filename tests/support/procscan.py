"""Find processes: by the run marker every engine carries (``SLOTUNE_RUN_ID``), by parent.

Two test sessions start engines with the same run ids (each has a fresh database, so
both have a ``s1-t1-a1``): the two workers of one run, or two checkouts tested on one
machine. A session sees only the engines started under its own ``TMPDIR``
(``tests/conftest.py`` gives each session one, and every engine inherits it), so a test
never counts — or kills — another session's engines.
"""

from __future__ import annotations

import os
from pathlib import Path


def engine_pids(run_id: str | None = None) -> list[int]:
    """PIDs of live processes whose environment names a slotune run (or this one)."""
    needle = b"SLOTUNE_RUN_ID=" + (run_id.encode() + b"\0" if run_id else b"")
    own = os.environ.get("SLOTUNE_TEST_TMPDIR")
    session_tmp = b"TMPDIR=" + own.encode() + b"\0" if own else b""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            status = (proc / "status").read_text()
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        if "State:\tZ" in status:
            continue  # a zombie holds nothing; its parent just has not reaped it yet
        if needle in environ and session_tmp in environ:
            pids.append(int(proc.name))
    return pids


def descendants(pid: int) -> list[int]:
    """PIDs of every live process below ``pid`` (children, their children …)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(proc.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def command_name(pid: int) -> str:
    """The process's name (``/proc/PID/comm``); empty once it is gone."""
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""
