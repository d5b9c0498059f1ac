"""The twin against guided+tpe on perturbed truths: GPU-hours to 98% of the optimum.

Each seed runs against its own *truth*: the simulated engine with the shipped
calibration's compute, memory and overhead factors moved by 30–50%
(:data:`PERTURBATIONS`), given to it through ``SLOTUNE_SIM_CALIBRATION`` — a file the
twin never reads. The exhaustive grid under that truth is the ground truth (memoised, so
every strategy sees the same measurements: ``search_efficiency``'s harness). Each
strategy then runs one trial at a time, charged each trial's simulated GPU time, until
it stops or has spent the grid's whole cost.

Printed per scenario and strategy: the median GPU-hours to reach 98% of the grid's
optimum as a share of the grid's GPU-hours, and how many seeds reached it; for the twin
also the median capacity error of its screening predictions on the configurations it
never booted (after 3 real trials, and at the end) and its screening CPU time against
the engine time of a trial. Targets (issue "the twin"): ≤ 1% of the grid's GPU-hours on
every space, at most half of ``guided+tpe``'s; median error ≤ 15% after 3 trials;
screening < 5% of a trial's time. Missed targets are printed as NOT MET.

    python benchmarks/twin_search.py                       # every shipped space, 5 seeds
    python benchmarks/twin_search.py --quick               # smallest space, 1 seed
    python benchmarks/twin_search.py --scenarios prefill-bound,kv-bound --seeds 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna
from search_efficiency import (  # type: ignore[import-not-found]
    Eval,
    _as_result,
    _space,
    ground_truth,
    hours_to,
    run_strategy,
)

from slotune.tuner.spaces import SearchSpace
from slotune.tuner.strategies import GuidedTPEStrategy, TwinStrategy, params_key
from slotune.tuner.strategies.twin.factors import TwinFactors
from slotune.workers.sim.calibration import CALIBRATION_ENV, shipped_calibration

TARGET_SHARE = 0.98
TARGET_GRID_FRACTION = 0.01
TARGET_ERROR = 0.15
TARGET_SCREEN_SHARE = 0.05

PERTURBATIONS: tuple[dict[str, float], ...] = (
    {"compute": 0.6, "memory": 1.4, "overhead": 1.5},
    {"compute": 1.4, "memory": 0.65, "overhead": 0.6},
    {"compute": 0.7, "memory": 0.7, "overhead": 1.4},
    {"compute": 1.35, "memory": 1.35, "overhead": 0.5},
    {"compute": 0.55, "memory": 1.3, "overhead": 0.7},
)
"""One truth per seed: ±30–50% on each group of factors, in different directions."""

SCENARIOS: dict[str, tuple[str, int]] = {
    # space, requests per probe (see search_efficiency.Scenario for why they differ)
    "prefill-bound": ("prefill-bound", 50),
    "kv-bound": ("kv-bound", 50),
    "decode-bound": ("decode-bound", 400),
    "h100": ("h100", 50),
    "h200-tp": ("h200-tp", 50),
    "lab": ("lab", 50),
}
QUICK = ("prefill-bound",)

def write_truth(folder: Path, gpu: str, scale: dict[str, float]) -> Path:
    """The truth of one seed: the shipped calibration of ``gpu`` with its factor groups
    scaled (the same groups the twin learns), as a SLOTUNE_SIM_CALIBRATION file."""
    truth = TwinFactors.from_dict(scale).apply(shipped_calibration(gpu))
    path = folder / f"truth-{gpu}-{'-'.join(f'{v:g}' for v in scale.values())}.json"
    path.write_text(json.dumps({"gpus": {gpu: asdict(truth)}}))
    return path


@dataclass(slots=True)
class TwinRun:
    hours: float
    booted: int
    error_after_3: float | None
    error_end: float | None
    screen_share: float
    stop: str | None


def never_booted_error(strategy: TwinStrategy, memo: dict[str, Eval]) -> float | None:
    """Median |expected − true| ÷ true capacity per GPU over the configurations the twin
    never booted (its estimates under its current factors: what it ranks by)."""
    errors = []
    for key, truth in memo.items():
        params = json.loads(key)
        if strategy.known(params) is not None or truth.objective <= 0:
            continue
        errors.append(abs(strategy.expected(params) - truth.objective) / truth.objective)
    return statistics.median(errors) if errors else None


def run_twin(space: SearchSpace, seed: int, memo: dict[str, Eval], budget_h: float,
             level: float) -> TwinRun:
    strategy = TwinStrategy(space, seed=seed)
    spent, best, booted = 0.0, 0.0, 0
    reached = math.inf
    after_3: float | None = None
    trial_s: list[float] = []
    while spent < budget_h:
        proposal = strategy.ask()
        if proposal is None:
            break
        ev = memo[params_key(proposal.params)]
        if proposal.preset is not None:
            strategy.tell(proposal, proposal.preset)
            continue
        spent += ev.gpu_s / 3600.0
        trial_s.append(ev.gpu_s)
        booted += 1
        strategy.tell(proposal, _as_result(proposal.run_id, ev))
        best = max(best, ev.objective)
        if best >= level and not math.isfinite(reached):
            reached = spent
        if booted == 3:
            after_3 = never_booted_error(strategy, memo)
    screen_per_boot = strategy.twin.screen_s / max(booted, 1)
    return TwinRun(reached, booted, after_3, never_booted_error(strategy, memo),
                   screen_per_boot / statistics.mean(trial_s) if trial_s else math.nan,
                   strategy.stop_reason)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smallest space, one seed")
    parser.add_argument("--scenarios", default=None, help=f"from: {', '.join(SCENARIOS)}")
    parser.add_argument("--seeds", type=int, default=None, help="at most 5 (one per truth)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    seeds = min(len(PERTURBATIONS), args.seeds or (1 if args.quick else 5))
    names = (tuple(args.scenarios.split(",")) if args.scenarios
             else QUICK if args.quick else tuple(SCENARIOS))
    if unknown := [n for n in names if n not in SCENARIOS]:
        parser.error(f"unknown scenario: {', '.join(unknown)}; valid: {', '.join(SCENARIOS)}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    started = time.perf_counter()
    print(f"twin search: {len(names)} scenario(s) × {seeds} perturbed truth(s); targets: twin "
          f"to {TARGET_SHARE:.0%} of the optimum in ≤ {TARGET_GRID_FRACTION:.0%} of the grid's "
          f"GPU-hours and ≤ half of guided+tpe's; never-booted error ≤ {TARGET_ERROR:.0%} "
          f"after 3 trials; screening < {TARGET_SCREEN_SHARE:.0%} of a trial's time")
    verdicts: list[bool] = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            space_name, prompts = SCENARIOS[name]
            space = _space(space_name, prompts)
            rows = []
            for seed in range(seeds):
                truth = write_truth(Path(folder), space.gpu, PERTURBATIONS[seed])
                os.environ[CALIBRATION_ENV] = str(truth)  # the engine's; the twin never reads it
                memo = ground_truth(space, args.workers)
                grid_h = sum(e.gpu_s for e in memo.values()) / 3600.0
                level = TARGET_SHARE * max(e.objective for e in memo.values())
                twin = run_twin(space, seed, memo, grid_h, level)
                guided = hours_to(run_strategy(GuidedTPEStrategy(space, seed=seed), memo,
                                               grid_h).curve, level)
                rows.append((grid_h, twin, guided))
                print(f"  {name} seed {seed} {PERTURBATIONS[seed]}: twin "
                      f"{_share(twin.hours, grid_h)} of the grid ({twin.booted} boots, error "
                      f"after 3 {_pct(twin.error_after_3)}, at the end {_pct(twin.error_end)}, "
                      f"screening {twin.screen_share:.1%} of a trial); guided+tpe "
                      f"{_share(guided, grid_h)}; stop: {twin.stop}", flush=True)
            del os.environ[CALIBRATION_ENV]
            twin_share = statistics.median(t.hours / g for g, t, _ in rows)
            guided_share = statistics.median(h / g for g, _, h in rows)
            after_3 = [t.error_after_3 for _, t, _ in rows if t.error_after_3 is not None]
            error = statistics.median(after_3) if after_3 else math.nan
            screen = statistics.median(t.screen_share for _, t, _ in rows)
            checks = {
                f"≤ {TARGET_GRID_FRACTION:.0%} of grid": twin_share <= TARGET_GRID_FRACTION,
                "≤ half of guided+tpe": twin_share <= guided_share / 2,
                f"error ≤ {TARGET_ERROR:.0%}": error <= TARGET_ERROR,
                f"screening < {TARGET_SCREEN_SHARE:.0%}": screen < TARGET_SCREEN_SHARE,
            }
            verdicts += checks.values()
            print(f"## {name} ({space.grid_size()} configs, {seeds} truths): twin "
                  f"{_share(twin_share, 1)} of the grid's GPU-hours (median), guided+tpe "
                  f"{_share(guided_share, 1)}; never-booted error after 3 {_pct(error)}, at "
                  f"the end {_pct(statistics.median(t.error_end or 0 for _, t, _ in rows))}; "
                  f"screening {screen:.1%} of a trial — "
                  + "; ".join(f"{k}: {'MET' if v else 'NOT MET'}" for k, v in checks.items()),
                  flush=True)
    print(f"\noverall: {sum(verdicts)}/{len(verdicts)} targets met "
          f"({time.perf_counter() - started:.0f} s)")
    return 0


def _share(hours: float, grid_h: float) -> str:
    return f"{hours / grid_h:.2%}" if math.isfinite(hours) else "not reached"


def _pct(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.1%}"


if __name__ == "__main__":
    raise SystemExit(main())
