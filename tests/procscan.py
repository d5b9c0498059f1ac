"""Find processes by the trial marker every engine carries (``SLOTUNE_TRIAL_ID``)."""

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
