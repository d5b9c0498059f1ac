"""slotune's REST API (FastAPI): sweeps, trials, workloads, best configs, capacity planning.

Start it with ``slotune api`` or ``uvicorn --factory slotune.tuner.api.app:create_app``.
"""

from __future__ import annotations

from slotune.tuner.api.app import API_PREFIX, create_app

__all__ = ["API_PREFIX", "create_app"]
