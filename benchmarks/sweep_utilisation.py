"""Sweep GPU utilisation: of the GPU time a sweep holds, how much is spent measuring?

Runs a real sweep of the simulated engine on a local Ray with two simulated GPUs
(:class:`~tuner.executors.RayExecutor`, the coordinator of :mod:`tuner.coordinator`, a
temporary SQLite database): the shipped ``lab`` space, its workload shortened to
``--prompts`` requests at 4 req/s, the engine at ``--time-scale`` 2, ``--trials`` trials,
no confirmation. Then it reads each trial's stored ``timings`` and splits the GPU time
the sweep held — its wall time (claim to finish) × GPUs — into:

* measuring (``warmup_s + measure_s``: the engine serving the workload),
* booting (``boot_s``: process start until ``/health``),
* tearing down (``teardown_s``),
* other in-trial time (``total_s`` minus the phases: building requests, scoring, Ray),
* idle (no trial held the GPU: scheduling gaps, the tail when fewer trials than GPUs
  remain, trials never booted because they broke a rule).

Every figure is in wall-clock seconds on this machine (engine time ÷ time scale). Usage:
``.venv/bin/python benchmarks/sweep_utilisation.py [--trials 8] [--prompts 60]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import optuna
import yaml

from tuner.coordinator import Coordinator
from tuner.db import migrate
from tuner.executors import RayExecutor
from tuner.store import Store
from tuner.sweeps import SweepBudget, SweepRequest, queue_sweep

GPUS = 2
PHASES = ("measuring", "booting", "tearing down", "other in-trial", "idle")


def _space(prompts: int, time_scale: float) -> dict[str, Any]:
    path = Path(__file__).resolve().parent.parent / "search_spaces" / "lab.yaml"
    space: dict[str, Any] = yaml.safe_load(path.read_text())
    space["workload"].update(num_prompts=prompts, warmup_requests=5)
    space["sim"] = {**space.get("sim", {}), "time_scale": time_scale}
    return space


def breakdown(trials: list[Any], wall_s: float, gpus: int) -> dict[str, float]:
    """GPU-seconds per phase (``PHASES``) from the trials' stored timings."""
    out = dict.fromkeys(PHASES, 0.0)
    for trial in trials:
        t = trial.timings or {}
        if not t.get("total_s"):
            continue  # never booted (a rule broken): no GPU held
        tp = int((trial.config or {}).get("tensor_parallel_size") or 1)
        boot, warm = t.get("boot_s") or 0.0, t.get("warmup_s") or 0.0
        measure, down = t.get("measure_s") or 0.0, t.get("teardown_s") or 0.0
        out["measuring"] += (warm + measure) * tp
        out["booting"] += boot * tp
        out["tearing down"] += down * tp
        out["other in-trial"] += max(t["total_s"] - boot - warm - measure - down, 0.0) * tp
    out["idle"] = max(wall_s * gpus - sum(out.values()), 0.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=60, help="measured requests per trial")
    parser.add_argument("--time-scale", type=float, default=2.0)
    parser.add_argument("--strategy", default="tpe")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'slotune.db'}"
        migrate.upgrade(url)
        store = Store(url)
        request = SweepRequest(space=_space(args.prompts, args.time_scale),
                               strategy=args.strategy, budget=SweepBudget(
                                   max_trials=args.trials, confirm_top=0))
        sweep = queue_sweep(store, request)
        t0 = time.perf_counter()
        executor = RayExecutor(num_gpus=GPUS)
        ray_start_s = time.perf_counter() - t0
        try:
            t1 = time.perf_counter()
            final = Coordinator(store, executor, database_url=url).run_sweep(sweep.id)
            wall_s = time.perf_counter() - t1
        finally:
            executor.shutdown()
        trials = store.list_trials(sweep.id).data
        store.close()

    parts = breakdown(trials, wall_s, GPUS)
    held = wall_s * GPUS
    booted = sum(1 for t in trials if (t.timings or {}).get("total_s"))
    print(f"sweep {final.status}: {len(trials)} trials ({booted} booted), strategy "
          f"{args.strategy}, {args.prompts} prompts/trial at 4 req/s, time scale "
          f"{args.time_scale:g}, {GPUS} simulated GPUs on local Ray")
    print(f"local Ray start-up: {ray_start_s:.1f} s (not counted below)")
    print(f"sweep wall time {wall_s:.1f} s x {GPUS} GPUs = {held:.1f} GPU-s held")
    for name in PHASES:
        print(f"  {name:<15} {parts[name]:7.1f} GPU-s  {100 * parts[name] / held:5.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
