"""Where slotune keeps its files on a machine: ``$SLOTUNE_HOME``, else the XDG data dir.

One rule for both halves: the control plane keeps its embedded database and reports there
(:mod:`slotune.tuner.settings`), a worker its shared engine caches
(:mod:`slotune.workers.engines.shared_cache`). It lives in ``workers`` because ``workers`` never
imports ``tuner``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_data_dir"]


def default_data_dir() -> Path:
    """``$SLOTUNE_HOME`` when set, else ``$XDG_DATA_HOME/slotune`` (``~/.local/share/slotune``)."""
    home = os.environ.get("SLOTUNE_HOME")
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "slotune"
