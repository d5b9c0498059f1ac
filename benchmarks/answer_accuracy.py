"""Answer accuracy: the default sweep's answer against a long measurement of its configuration.

For each shipped capacity space (or the spaces named), in virtual time, for ``--seeds``
workload samples (the space's workload with ``seed`` 0, 1, …): run the default sweep as a
user does — ``slotune sweep run --space S --executor virtual`` (the guided+tpe strategy,
10 trials, the CLI's confirmation) on a SQLite file of its own — and read its answer
from the best-config view: the winner's configuration, its capacity (the interval's
centre) and its interval. Then measure that configuration's **truth** with long probes:
at each rate, :data:`TRUTH_SAMPLES` fresh samples of :data:`TRUTH_PROMPTS` requests each
(none of them the sweep's), pooled; a rate holds when the SLO percentile of the pooled
values is within every target (the point estimate: with 12 000 requests its own noise is
small) and every sample kept up with the rate (completed rate ≥ 95 % of offered); the
truth is the highest holding rate, bisected to 1 %.

Printed per space: answer / truth (median, range), how many answers are within ±5 % of
their truth and how many more than 8 % above it, how many intervals contain their truth,
the sweep's GPU-hours, and — where the space's grid has at most ``--grid-limit``
configurations — the answer's truth against the optimum's (the grid screened with short
point probes, the best :data:`OPTIMUM_CANDIDATES` measured as the truth is). The targets
(issue 37): within ±5 % in ≥ 90 % of seeds, never more than 8 % above, the interval
containing the truth in ≥ 80 %; GPU-hours of the default lab sweep ≤ 1.5× before.

``--before REF`` runs the same sweeps with the code of a git revision (a temporary
worktree, its code first on ``PYTHONPATH``, this environment's packages) and prints
both, so the comparison is measured in one run. Truths are cached in
``benchmarks/.answer_accuracy_truths.json`` (by space, configuration and engine
calibration): the engine's, not the sweep's.

    python benchmarks/answer_accuracy.py --quick                    # lab, 3 seeds
    python benchmarks/answer_accuracy.py                            # every space, 8 seeds
    python benchmarks/answer_accuracy.py --spaces lab --before 216ec3e
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from slotune.tuner.spaces import SearchSpace, load_space
from slotune.workers.contracts import KnobValue, TrialSpec
from slotune.workers.loadgen.score.scoring import score
from slotune.workers.loadgen.score.verdict import steady_state
from slotune.workers.trial.capacity import probe_workload
from slotune.workers.trial.virtual import engine_config, measure

REPO = Path(__file__).resolve().parents[1]
SPACES = ("lab", "h100", "h200-tp", "prefill-bound", "decode-bound", "kv-bound", "moe-h100")
QUICK_SPACES = ("lab",)
TRUTH_PROMPTS = 3000
TRUTH_SAMPLES = 4
TRUTH_TOLERANCE = 0.01
TRUTH_SEED = 900_000
OPTIMUM_CANDIDATES = 4
CACHE = REPO / "benchmarks" / ".answer_accuracy_truths.json"


@dataclass(frozen=True, slots=True)
class Answer:
    space: str
    seed: int
    config: dict[str, KnobValue]
    capacity: float
    low: float | None
    high: float | None
    gpus: int
    gpu_hours: float
    wall_s: float


# --- the truth ---------------------------------------------------------------------------


def _params(space: SearchSpace, config: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
    return {k: v for k, v in config.items() if k in space.knobs}


def _truth_spec(space: SearchSpace, config: Mapping[str, KnobValue]) -> TrialSpec:
    spec = space.to_trial_spec(_params(space, config), "truth", quality=None)
    return spec.model_copy(update={"early_abort": False})


def _holds(spec: TrialSpec, rate: float) -> bool:
    config = engine_config(spec)
    records = []
    for k in range(TRUTH_SAMPLES):
        workload = probe_workload(spec, rate, k, num_prompts=TRUTH_PROMPTS).model_copy(
            update={"seed": TRUTH_SEED + 7919 * k, "warmup_requests": 0})
        run = measure(spec, config, workload)
        if run.sim.crashed:
            return False
        steady = steady_state(run.run.records, run.run.scrape)
        if steady.judged and steady.completed_rate < 0.95 * steady.offered_rate:
            return False
        records.extend(run.run.records)
    return score(records, 1.0, spec.slo).gate


def truth(space: SearchSpace, config: Mapping[str, KnobValue], near: float) -> float:
    """The highest rate (req/s per replica) the configuration holds on long probes."""
    spec = _truth_spec(space, config)
    low, high = near / 1.25, near * 1.25
    while not _holds(spec, low):
        high, low = low, low / 1.25
        if low < 0.01:
            return 0.0
    while _holds(spec, high):
        low, high = high, high * 1.25
    while high / low - 1 > TRUTH_TOLERANCE:
        mid = math.sqrt(low * high)
        if _holds(spec, mid):
            low = mid
        else:
            high = mid
    return low


def _engine_key() -> str:
    path = os.environ.get("SLOTUNE_SIM_CALIBRATION")
    if not path:
        return "shipped"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


class Truths:
    """Truths by (space, configuration, engine calibration), kept between runs."""

    def __init__(self) -> None:
        self.data: dict[str, float] = json.loads(CACHE.read_text()) if CACHE.is_file() else {}

    def get(self, space_name: str, space: SearchSpace, config: Mapping[str, KnobValue],
            near: float) -> float:
        key = json.dumps([space_name, _engine_key(), _params(space, config)], sort_keys=True,
                         default=str)
        if key not in self.data:
            self.data[key] = truth(space, config, near)
            CACHE.write_text(json.dumps(self.data, indent=1))
        return self.data[key]


# --- the sweeps --------------------------------------------------------------------------


@contextlib.contextmanager
def _code(ref: str | None) -> Iterator[dict[str, str]]:
    """The environment a sweep runs in: this checkout, or ``ref`` in a temporary worktree."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if ref is None:
        env["PYTHONPATH"] = str(REPO)
        yield env
        return
    with tempfile.TemporaryDirectory(prefix="answer-accuracy-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), ref],
                       check=True, capture_output=True)
        try:
            env["PYTHONPATH"] = str(tree)
            env["SLOTUNE_REPO"] = str(tree)
            yield env
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(tree)], check=False, capture_output=True)


def sweep(space_name: str, seed: int, env: Mapping[str, str], workdir: Path) -> Answer | None:
    """The default sweep of ``space_name`` on workload sample ``seed``, and its answer."""
    space = load_space(space_name)
    workload = space.resolve_workload().model_dump(mode="json")
    workload["seed"] = seed
    wl_file = workdir / f"{space_name}-{seed}.yaml"
    wl_file.write_text(yaml.safe_dump(workload))
    db = workdir / f"{space_name}-{seed}.db"
    tree = Path(env.get("SLOTUNE_REPO", REPO))
    space_file = tree / "search_spaces" / f"{space_name}.yaml"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "slotune.tuner.cli", "sweep", "run",
                    "--space", str(space_file), "--workload", str(wl_file),
                    "--executor", "virtual", "--database-url", f"sqlite:///{db}",
                    "--report-dir", str(workdir / "reports"), "--log-format", "json"],
                   cwd=tree, env={**env, "SLOTUNE_HOME": str(workdir / "home")},
                   capture_output=True, check=False, timeout=3600)
    wall = time.perf_counter() - started
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM best_config_per_workload").fetchone()
        progress = json.loads(conn.execute("SELECT progress FROM sweeps").fetchone()[0])
    if row is None:
        return None
    keys = row.keys()
    return Answer(space_name, seed, json.loads(row["config"]), row["capacity"],
                  row["capacity_low"] if "capacity_low" in keys else None,
                  row["capacity_high"] if "capacity_high" in keys else None,
                  row["gpus"], float(progress.get("gpu_hours") or 0.0), wall)


def optimum(space_name: str, limit: int, truths: Truths) -> float | None:
    """The best truth per GPU over the space's grid (None: the grid is over ``limit``)."""
    from slotune.workers.trial.virtual import run_virtual_trial

    space = load_space(space_name)
    if not space.is_finite() or space.grid_size() > limit:
        return None
    screened = []
    for params in space.grid():
        if space.check(params) is not None:
            continue
        spec = space.to_trial_spec(params, "grid", quality=None)
        spec = spec.model_copy(update={"capacity": spec.capacity.model_copy(update={
            "confidence": 0.5, "prompts_per_probe": 1000, "extensions": 0,
            "resolve_undecided": False, "relative_tolerance": 0.05})})
        result = run_virtual_trial(spec, per_request=False)
        if result.status == "ok" and result.capacity:
            screened.append((result.objective, params, result.capacity, spec.gpus))
    best = sorted(screened, key=lambda s: -s[0])[:OPTIMUM_CANDIDATES]
    return max((truths.get(space_name, space, space.flags(p), c) / g for _, p, c, g in best),
               default=None)


# --- the report --------------------------------------------------------------------------


def _summary(label: str, rows: list[tuple[Answer, float]], opt: float | None) -> str:
    if not rows:
        return f"  {label}: no answer"
    ratios = [a.capacity / t for a, t in rows if t > 0]
    within = sum(abs(r - 1) <= 0.05 for r in ratios)
    high = sum(r > 1.08 for r in ratios)
    contains = sum(a.low is not None and a.low <= t <= (a.high or math.inf) for a, t in rows)
    hours = [a.gpu_hours for a, _ in rows]
    wall = statistics.fmean(a.wall_s for a, _ in rows)
    line = (f"  {label}: answer/truth median {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f}, {max(ratios):.3f}] over {len(ratios)} seeds; within ±5%: "
            f"{within}/{len(ratios)}; >8% high: {high}; interval holds the truth: "
            f"{contains}/{len(rows)}; GPU-hours mean {statistics.fmean(hours):.3f} "
            f"(sd {statistics.pstdev(hours):.3f}); wall {wall:.0f} s")
    if opt:
        vs = [t / a.gpus / opt for a, t in rows]
        line += (f"; answer's truth / optimum median {statistics.median(vs):.3f} "
                 f"(min {min(vs):.3f})")
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spaces", nargs="*", default=None)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--before", default=None, help="a git revision to compare with")
    parser.add_argument("--grid-limit", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="lab, 3 seeds")
    args = parser.parse_args()
    spaces = tuple(args.spaces or (QUICK_SPACES if args.quick else SPACES))
    seeds = range(3 if args.quick else args.seeds)
    truths = Truths()
    runs = [("after", None)] + ([("before", args.before)] if args.before else [])
    with tempfile.TemporaryDirectory(prefix="answer-accuracy-") as tmp:
        for space_name in spaces:
            space = load_space(space_name)
            print(f"{space_name}: {space.model} on {space.gpu}, SLO {space.resolve_slo()}",
                  flush=True)
            opt = optimum(space_name, args.grid_limit, truths)
            per_run: dict[str, list[tuple[Answer, float]]] = {}
            for label, ref in runs:
                workdir = Path(tmp) / label
                workdir.mkdir(exist_ok=True)
                with _code(ref) as env:
                    rows = []
                    for seed in seeds:
                        answer = sweep(space_name, seed, env, workdir)
                        if answer is None:
                            print(f"  {label} seed {seed}: no answer", flush=True)
                            continue
                        t = truths.get(space_name, space, answer.config,
                                       answer.low or answer.capacity)
                        rows.append((answer, t))
                        print(f"  {label} seed {seed}: answer {answer.capacity:.3f} "
                              f"[{answer.low or float('nan'):.3f}, "
                              f"{answer.high or float('nan'):.3f}] truth {t:.3f} "
                              f"({answer.capacity / t:.3f}); {answer.gpu_hours:.3f} GPU-h",
                              flush=True)
                per_run[label] = rows
                print(_summary(label, rows, opt), flush=True)
            if "before" in per_run and per_run["before"] and per_run["after"]:
                ratio = (statistics.fmean(a.gpu_hours for a, _ in per_run["after"])
                         / statistics.fmean(a.gpu_hours for a, _ in per_run["before"]))
                print(f"  GPU-hours after / before: {ratio:.2f}", flush=True)


if __name__ == "__main__":
    main()
