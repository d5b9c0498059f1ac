"""The twin on a real engine: vLLM's CPU build serving the tiny model.

The whole grid (:data:`KNOBS`, 24 configurations; the chunked-off ones below
max_model_len are refused by vLLM in seconds) is measured once with ``slotune trial run``
— real boots, real capacity probes — and cached per configuration (``--cache``, so an
interrupted run resumes). That is the ground truth. Then ``twin``, ``guided+tpe`` and
``random`` replay against it: each asks, is told the cached real result, and the
figure is the number of real boots until the best measured reaches 98% of the grid's
best. The twin's prior for ``gpu: cpu`` is the simulator's nominal CPU
(:data:`slotune.workers.sim.catalog.CPU`) with the shipped default calibration; it learns the
rest from the real probes it is told. Target (issue "the twin"): at most half the boots
of ``guided+tpe``.

    python benchmarks/twin_real.py --cache /tmp/real-grid.json   # ~40 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna
import yaml

from slotune.tuner.spaces import SearchSpace, load_space
from slotune.tuner.strategies import (
    GuidedTPEStrategy,
    RandomStrategy,
    Strategy,
    TwinStrategy,
    params_key,
)
from slotune.workers.contracts import TrialResult

ROOT = Path(__file__).resolve().parents[1]
TARGET_SHARE = 0.98
KNOBS: dict[str, Any] = {
    "max_num_seqs": {"type": "values", "values": [2, 8, 32, 128], "default": 128},
    "max_num_batched_tokens": {"type": "values", "values": [128, 512, 2048], "default": 2048},
    "enable_chunked_prefill": {"type": "bool", "default": True},
}


def space_file(folder: Path, model: str) -> Path:
    """The benchmark's space: the tiny model on vLLM's CPU build, capacity mode."""
    space = {
        "name": "twin-real", "engine": "vllm", "model": model, "gpu": "cpu",
        "fixed": {"load_format": "dummy", "enforce_eager": True, "max_model_len": 1024,
                  "kv_cache_memory_bytes": 256 << 20},
        "allowed_extra_args": ["kv_cache_memory_bytes"],
        "knobs": KNOBS,
        "workload": {"name": "twin-real", "dataset": {"kind": "random", "input_len": 384,
                                                      "output_len": 32},
                     "arrivals": {"request_rate": 2}, "num_prompts": 32},
        "slo": "ttft:1500,tpot:60",
        "mode": "capacity",
        # 32-request probes read every configuration at the rate cap (a one-second burst
        # ends before a queue builds): each probe lasts at least 8 s of arrivals
        "capacity": {"min_rate": 0.25, "max_rate": 64, "max_probes": 6,
                     "relative_tolerance": 0.1, "min_probe_s": 8},
    }
    path = folder / "twin-real.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def measure_grid(space: SearchSpace, path: Path, cache: Path, vllm_bin: str
                 ) -> dict[str, TrialResult]:
    known: dict[str, Any] = json.loads(cache.read_text()) if cache.exists() else {}
    slotune = str(Path(sys.executable).with_name("slotune"))
    for params in space.grid():
        key = params_key(params)
        if key in known:
            continue
        sets = [arg for k, v in params.items()
                for arg in ("--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}")]
        started = time.perf_counter()
        proc = subprocess.run([slotune, "trial", "run", "--space", str(path), *sets, "--json"],
                              capture_output=True, text=True, timeout=1200,
                              stdin=subprocess.DEVNULL,
                              env={**os.environ, "SLOTUNE_VLLM_BIN": vllm_bin})
        if not proc.stdout.strip():
            raise SystemExit(f"trial {params} printed nothing: {proc.stderr[-2000:]}")
        known[key] = json.loads(proc.stdout)
        cache.write_text(json.dumps(known))
        result = known[key]
        print(f"  measured {params}: {result['status']} {result.get('failure') or ''} "
              f"objective {result['objective']:.3g} ({time.perf_counter() - started:.0f} s)",
              flush=True)
    return {k: TrialResult.model_validate(v) for k, v in known.items()}


def boots_to(strategy: Strategy, truth: dict[str, TrialResult], level: float) -> float:
    boots = 0
    while True:
        proposal = strategy.ask()
        if proposal is None:
            return math.inf
        if proposal.preset is not None:
            strategy.tell(proposal, proposal.preset)
            continue
        result = truth[params_key(proposal.params)].model_copy(
            update={"run_id": proposal.run_id})
        boots += 1
        strategy.tell(proposal, result)
        if result.objective >= level:
            return boots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True,
                        help="JSON file of measured results (created, resumed)")
    parser.add_argument("--vllm-bin", default=os.environ.get(
        "SLOTUNE_VLLM_BIN", str(ROOT / ".vllm" / "venv" / "bin" / "vllm")))
    parser.add_argument("--model", default=os.environ.get(
        "SLOTUNE_VLLM_MODEL", str(ROOT / ".vllm" / "models" / "tiny-llama")))
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    with tempfile.TemporaryDirectory() as folder:
        path = space_file(Path(folder), args.model)
        space = load_space(path)
        print(f"twin on real vLLM (CPU): {space.grid_size()} configurations of the tiny model, "
              f"SLO {space.resolve_slo()}, capacity mode", flush=True)
        truth = measure_grid(space, path, args.cache, args.vllm_bin)
    best = max(r.objective for r in truth.values())
    level = TARGET_SHARE * best
    feasible = sum(r.objective > 0 for r in truth.values())
    print(f"grid: best {best:.3g} req/s, {feasible} of {len(truth)} hold the SLO somewhere")
    figures: dict[str, list[float]] = {}
    for name, make in (("twin", lambda s: TwinStrategy(space, seed=s)),
                       ("guided+tpe", lambda s: GuidedTPEStrategy(space, seed=s)),
                       ("random", lambda s: RandomStrategy(space, seed=s))):
        figures[name] = [boots_to(make(seed), truth, level) for seed in range(args.seeds)]
        shown = [("—" if math.isinf(b) else str(int(b))) for b in figures[name]]
        print(f"{name:<11} real boots to {TARGET_SHARE:.0%} of the best: median "
              f"{statistics.median(figures[name]):g} (seeds: {', '.join(shown)})")
    twin, guided = (statistics.median(figures[n]) for n in ("twin", "guided+tpe"))
    met = twin <= guided / 2
    print(f"target (twin ≤ half of guided+tpe's boots): {'MET' if met else 'NOT MET'} — "
          f"{twin:g} vs {guided:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
