"""The API's read path: the frontier against ``/best``, at one client and under 200 readers.

Fills a temporary SQLite database with a real capacity sweep (``slotune sweep run
--executor virtual``: the shipped ``lab`` space, ``--trials`` trials), serves it with
``slotune api`` (uvicorn, one process, as deployed), and measures over HTTP:

1. **one client** — ``GET /workloads/lab/frontier`` and ``GET /best`` alternately,
   ``--samples`` each after one warm-up request (the frontier then comes from the read
   cache, :mod:`slotune.tuner.api.read_cache`); the frontier's first read after a write (the
   snapshot reloaded and the frontier recomputed, once); and, in this process without
   HTTP, what the frontier costs computed from scratch (load the snapshot, build it: what
   every request paid before the cache);
2. **200 concurrent readers** — ``--readers`` clients each reading the frontier in a loop
   for ``--duration`` seconds while a writer adds a finished trial to the sweep every
   ``--write-every`` seconds (each write changes the workload's key: the next reads
   recompute), then the same on ``/best`` as the baseline: p50/p99/max latency, requests
   per second and every 5xx or failed request.

Every figure is wall-clock on this machine; latencies are given with their spread (p10–p90
at one client) and ratios are against ``/best`` measured in the same run. The client
shares the machine's cores with the server, as it would on a two-core box. Usage:
``.venv/bin/python benchmarks/read_path.py [--trials 12] [--readers 200]
[--duration 15] [--samples 200] [--write-every 1] [--before REF]``; ``--before main``
measures the same database served by another revision's code first (``git archive``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx

from slotune.tuner.db import migrate
from slotune.tuner.db.snapshot import load_workload
from slotune.tuner.db.store import Store
from slotune.tuner.planning.frontier import _RESCORED, build_frontier
from slotune.workers.contracts import TrialResult

# "From scratch" is what every request paid before the read cache: without the frontier's
# memo of stored trials' rescored capacities either.
_RESCORED_MEMO = _RESCORED._answers

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
API = "/api/v1"
FRONTIER = f"{API}/workloads/lab/frontier"
BEST = f"{API}/best"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--write-every", type=float, default=1.0)
    parser.add_argument("--before", metavar="REF",
                        help="also serve the same database with this git revision's code "
                             "(git archive) and measure it first, the same way")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slotune-read-path-") as tmp:
        url = f"sqlite:///{tmp}/read_path.db"
        migrate.upgrade(url)
        started = time.perf_counter()
        _run(SLOTUNE, "sweep", "run", "--executor", "virtual", "--trials", str(args.trials),
             "--database-url", url, "--report-dir", f"{tmp}/report")
        with Store(url) as store:
            [sweep] = store.list_sweeps().data
            trials = store.list_trials(sweep.id, role="any", limit=None).data
            probes = sum(len((t.result or {}).get("capacity_probes") or []) for t in trials)
            print(f"sweep {sweep.id}: {sweep.mode}, {len(trials)} trials, {probes} probes "
                  f"(filled in {time.perf_counter() - started:.0f} s); SQLite, one uvicorn "
                  f"process, {os.cpu_count()} CPUs")
            scratch = _timed(lambda: build_frontier(load_workload(store, "lab")), 20,
                             before_each=_RESCORED_MEMO.clear)
            print(f"frontier computed from scratch (in process, no HTTP, 20 samples): "
                  f"{_spread(scratch)}")
            runs = [("after", None)]
            if args.before:
                runs.insert(0, (f"before ({args.before})", _checkout(args.before, tmp)))
            for label, code in runs:
                print(f"\n=== {label} ===")
                with _server(url, code) as base:
                    asyncio.run(_one_client(base, store, sweep.id, args.samples))
                    asyncio.run(_concurrent(base, store, sweep.id, args))


async def _one_client(base: str, store: Store, sweep_id: int, samples: int) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for path in (FRONTIER, BEST):
            (await client.get(path)).raise_for_status()  # warm: the cache, the pools
        frontier: list[float] = []
        best: list[float] = []
        for _ in range(samples):  # alternately: both see the same noise
            frontier.append(await _get(client, FRONTIER))
            best.append(await _get(client, BEST))
        writer = _Writer(store, sweep_id)
        after_write = []
        for _ in range(10):
            writer.add()
            after_write.append(await _get(client, FRONTIER))
    ratio = statistics.median(frontier) / statistics.median(best)
    print(f"\none client, {samples} samples each:")
    print(f"  GET /best                      {_spread(best)}")
    print(f"  GET /workloads/lab/frontier    {_spread(frontier)}   "
          f"ratio to /best (p50): {ratio:.2f}")
    print(f"  frontier after a write (10)    {_spread(after_write)}   "
          f"(recomputed once per change)")


async def _concurrent(base: str, store: Store, sweep_id: int,
                      args: argparse.Namespace) -> None:
    print(f"\n{args.readers} concurrent readers, {args.duration:g} s each, a trial added "
          f"every {args.write_every:g} s:")
    results = {}
    for path in (FRONTIER, BEST):
        writer = _Writer(store, sweep_id)
        stop = threading.Event()
        thread = threading.Thread(target=writer.every, args=(args.write_every, stop))
        thread.start()
        try:
            results[path] = await _load(base, path, args.readers, args.duration)
        finally:
            stop.set()
            thread.join()
        latencies, statuses = results[path]
        errors = sum(n for s, n in statuses.items() if not (isinstance(s, int) and s < 500))
        print(f"  {path:<28} p50 {_ms(_q(latencies, 50))}  p99 {_ms(_q(latencies, 99))}  "
              f"max {_ms(max(latencies))}  {len(latencies) / args.duration:6.1f} req/s  "
              f"5xx or failed: {errors}  writes: {writer.added}  "
              f"({', '.join(f'{s}: {n}' for s, n in sorted(statuses.items(), key=str))})")
    frontier, best = (results[p][0] for p in (FRONTIER, BEST))
    print(f"  frontier ÷ /best: p50 {_q(frontier, 50) / _q(best, 50):.2f}, "
          f"p99 {_q(frontier, 99) / _q(best, 99):.2f}")


async def _load(base: str, path: str, readers: int, duration: float
                ) -> tuple[list[float], Counter[int | str]]:
    """``readers`` keep-alive connections, each sending GET ``path`` again as soon as its
    answer is read, for ``duration`` seconds. A minimal HTTP/1.1 client on asyncio streams:
    httpx's pool costs more CPU per request than the server at this concurrency, and the
    client shares the machine's cores with the server."""
    host, port = base.removeprefix("http://").split(":")
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    latencies: list[float] = []
    statuses: Counter[int | str] = Counter()
    deadline = time.perf_counter() + duration

    async def reader() -> None:
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            try:
                if connection is None:
                    connection = await asyncio.open_connection(host, int(port))
                status = await _exchange(*connection, request)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                status, connection = type(exc).__name__, None
            latencies.append(time.perf_counter() - start)
            statuses[status] += 1
        if connection is not None:
            connection[1].close()

    await asyncio.gather(*(reader() for _ in range(readers)))
    return latencies, statuses


async def _exchange(stream: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    request: bytes) -> int:
    """Send one request, read its whole answer (Content-Length framed); its status."""
    writer.write(request)
    await writer.drain()
    head = await stream.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines
                  if line.lower().startswith("content-length:"))
    await stream.readexactly(length)
    return int(lines[0].split()[1])


class _Writer:
    """Adds finished copies of the sweep's first measured trial, as a coordinator would."""

    def __init__(self, store: Store, sweep_id: int) -> None:
        self.store, self.sweep_id = store, sweep_id
        trials = store.list_trials(sweep_id, status="ok", limit=None).data
        self.template = next(t for t in trials if t.result and t.capacity)
        self.next_number = max(t.number for t in store.list_trials(
            sweep_id, role="any", limit=None).data) + 1
        self.added = 0

    def add(self) -> None:
        row = self.store.start_trial(self.sweep_id, number=self.next_number,
                                     params=self.template.params, worker="bench")
        self.store.finish_trial(row.id, TrialResult.model_validate(self.template.result))
        self.next_number += 1
        self.added += 1

    def every(self, seconds: float, stop: threading.Event) -> None:
        while not stop.wait(seconds):
            self.add()


def _checkout(ref: str, tmp: str) -> Path:
    """The tree of git revision ``ref`` (its code only), unpacked under ``tmp``."""
    folder = Path(tmp) / "before"
    folder.mkdir()
    # From the repository's root: in a subfolder, git archive packs that folder alone.
    archive = subprocess.run(["git", "archive", ref], capture_output=True, check=True,
                             cwd=Path(__file__).resolve().parents[1])
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    if not (folder / "tuner" / "api").is_dir():
        raise SystemExit(f"{ref} has no slotune/tuner/api to serve")
    return folder


# Another revision's API on this database: its tuner and workers on sys.path instead of
# the installed (editable) ones, and no schema check (its head is older than this
# database's; the columns added since are ones it never reads).
_SERVE_OTHER = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
sys.path.insert(0, sys.argv[1])
import uvicorn
from slotune.tuner.api import create_app
from slotune.tuner.settings import DatabaseSettings, Settings
app = create_app(Settings(database=DatabaseSettings(url=sys.argv[2])))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="info")
"""


class _server:
    """``slotune api`` on a free port (``code``: another revision's tree), stopped on exit."""

    def __init__(self, url: str, code: Path | None = None) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url, self.code = url, code
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTUNE_API")}
        argv = ([SLOTUNE, "api", "--host", "127.0.0.1", "--port", str(self.port),
                 "--database-url", self.url] if self.code is None else
                [sys.executable, "-c", _SERVE_OTHER, str(self.code), self.url, str(self.port)])
        self.process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{self.port}"
        for _ in range(300):
            try:
                if httpx.get(f"{base}{BEST}", timeout=5).status_code == 200:
                    return base
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit("the API did not answer /best within 30 s")

    def __exit__(self, *_: object) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(10)


async def _get(client: httpx.AsyncClient, path: str) -> float:
    start = time.perf_counter()
    (await client.get(path)).raise_for_status()
    return time.perf_counter() - start


def _timed(call: Callable[[], object], n: int, before_each: Callable[[], object]
           ) -> list[float]:
    out = []
    for _ in range(n):
        before_each()
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed:\n{done.stdout}{done.stderr}")


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def _spread(values: list[float]) -> str:
    return (f"p50 {_ms(_q(values, 50))} (p10 {_q(values, 10) * 1000:.1f} – p90 "
            f"{_q(values, 90) * 1000:.1f} ms, n={len(values)})")


if __name__ == "__main__":
    main()
