"""The built-in web dashboard: static pages (``static/``) that read the REST API.

Nothing here runs on the server: ``index.html`` (workloads and their best configs,
recent sweeps) and ``sweep.html`` (a sweep's live progress, curves, trials and cards)
are plain HTML + vanilla JavaScript + inline SVG, served by :mod:`slotune.tuner.api` and working
offline (no CDN, no external fonts).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC_DIR"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
