#!/usr/bin/env python3
"""Container health checks of slotune's compose stack (exit 0: healthy, 1: not).

``slotune-healthcheck api``          GET /api/v1/health answers 200 (database migrated).
``slotune-healthcheck coordinator``  a ``slotune coordinator`` process is alive in this
                                     container, so is its local Ray node, the Ray head
                                     answers, and the database has our schema.
``slotune-healthcheck ray-node``     this container's raylet is alive and the head answers.

Only the standard library and slotune itself; the settings come from the same
environment as the service's (``DATABASE_URL``, ``RAY_ADDRESS``, ``SLOTUNE_API_PORT``).
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.request
from pathlib import Path


def _processes() -> list[list[str]]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                raw = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if raw:
                out.append([part.decode(errors="replace") for part in raw.split(b"\0") if part])
    return out


def _running(*words: str) -> bool:
    return any(all(any(w in part for part in argv) for w in words) for argv in _processes())


def _head_answers(timeout_s: float = 3.0) -> bool:
    address = os.environ.get("RAY_ADDRESS") or f"ray-head:{os.environ.get('RAY_PORT', '6379')}"
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def check_api() -> str | None:
    port = os.environ.get("SLOTUNE_API_PORT", "8080")
    url = f"http://127.0.0.1:{port}/api/v1/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status = response.status
    except OSError as exc:
        return f"{url}: {exc}"
    return None if status == 200 else f"{url}: HTTP {status}"


def check_ray_node() -> str | None:
    if not _running("raylet"):
        return "no raylet process in this container"
    if not _head_answers():
        return "the Ray head does not answer"
    return None


def check_coordinator() -> str | None:
    if not _running("slotune", "coordinator"):
        return "no `slotune coordinator` process"
    problem = check_ray_node()
    if problem:
        return problem
    from slotune.tuner.db.store import Store
    from slotune.tuner.settings import get_settings

    try:
        with Store(get_settings().database.url) as store:
            store.check_schema()
    except Exception as exc:  # any failure is "unhealthy", with its reason
        return f"database: {type(exc).__name__}: {exc}"
    return None


CHECKS = {"api": check_api, "coordinator": check_coordinator, "ray-node": check_ray_node}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(f"usage: slotune-healthcheck {{{'|'.join(CHECKS)}}}", file=sys.stderr)
        return 2
    problem = CHECKS[argv[0]]()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
