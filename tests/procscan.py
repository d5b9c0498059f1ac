"""Find processes: by the trial marker every engine carries (``SLOTUNE_TRIAL_ID``), by parent."""

from __future__ import annotations

from pathlib import Path


def engine_pids(trial_id: str | None = None) -> list[int]:
    """PIDs of live processes whose environment names a slotune trial (or this one)."""
    needle = b"SLOTUNE_TRIAL_ID=" + (trial_id.encode() + b"\0" if trial_id else b"")
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
        if needle in environ:
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
