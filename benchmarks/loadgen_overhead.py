"""Load generator overhead: how late does the client send, and up to what rate does it keep up?

Starts a zero-cost streaming server (``slotune.workers.loadgen.stub_server`` with no delays) in a
subprocess, then:

1. sends 20 req/s (Poisson) of 128 streamed tokens each and prints the send-lag p99
   (target: ≤ 5 ms);
2. doubles the rate until the send-lag p99 exceeds 5 ms, then bisects, and prints the
   highest rate at which it stays ≤ 5 ms.

Send lag = when the client began sending − when the schedule wanted it sent. Run:
``.venv/bin/python benchmarks/loadgen_overhead.py [--seconds 4]``.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import httpx

from slotune.workers.contracts import Arrivals, RandomDataset, Workload
from slotune.workers.loadgen.runner import run_benchmark_sync

TARGET_MS = 5.0
OUTPUT_TOKENS = 128


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server() -> tuple[str, subprocess.Popen[bytes]]:
    port = _free_port()
    argv = [sys.executable, "-m", "slotune.workers.loadgen.stub_server", "--port", str(port),
            "--ttft-ms", "0", "--itl-ms", "0", "--no-metrics"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("zero-cost server did not start")


def lag_p99(url: str, rate: float, seconds: float) -> tuple[float, int]:
    n = max(20, int(rate * seconds))
    workload = Workload(
        name="overhead", dataset=RandomDataset(input_len=64, output_len=OUTPUT_TOKENS),
        arrivals=Arrivals(request_rate=rate), num_prompts=n, warmup_requests=5, seed=0,
    )
    run = run_benchmark_sync(url, "stub", workload, scrape_metrics=False)
    failed = sum(1 for r in run.records if not r.success)
    return run.send_lag.p99_ms, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each probe")
    args = parser.parse_args()
    url, proc = _start_server()
    try:
        p99, failed = lag_p99(url, 20.0, max(args.seconds, 5.0))
        verdict = "OK" if p99 <= TARGET_MS else "OVER TARGET"
        print(f"send-lag p99 at 20 req/s x {OUTPUT_TOKENS} streamed tokens: {p99:.3f} ms "
              f"(target <= {TARGET_MS} ms: {verdict}; {failed} failed)")
        good, bad = 20.0, None
        rate = 40.0
        while bad is None and rate <= 5120:
            p99, failed = lag_p99(url, rate, args.seconds)
            print(f"  {rate:7.0f} req/s: send-lag p99 {p99:8.3f} ms, {failed} failed")
            if p99 <= TARGET_MS and failed == 0:
                good, rate = rate, rate * 2
            else:
                bad = rate
        for _ in range(3 if bad is not None else 0):
            assert bad is not None
            mid = round((good + bad) / 2)
            p99, failed = lag_p99(url, mid, args.seconds)
            print(f"  {mid:7.0f} req/s: send-lag p99 {p99:8.3f} ms, {failed} failed")
            if p99 <= TARGET_MS and failed == 0:
                good = mid
            else:
                bad = mid
        print(f"highest rate with send-lag p99 <= {TARGET_MS} ms: ~{good:.0f} req/s "
              f"({OUTPUT_TOKENS} streamed tokens per request, this machine)")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
