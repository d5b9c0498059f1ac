"""Does the winner depend on the workload? The lab space on random prompts and on conversations.

Runs a grid of the lab space's knobs (prefix caching, KV cache dtype, fp8 weights, the
batched-token budget; the other knobs at the space's defaults) in virtual time, capacity
mode (each capacity found to within 3%), once on the ``lab`` workload (random 512 in /
128 out) and once on ``chat-multiturn`` (conversations re-sending their context), and
prints, per workload,
every configuration's capacity (req/s one RTX 4090 carries under the lab SLO), the
winner, and each workload's winner scored on the other workload — so the table says what
choosing on the wrong workload costs. Deterministic (virtual time, fixed seeds); the
quality gate is left out (both fp8 choices pass it in the lab's sweeps).

Usage: ``.venv/bin/python benchmarks/workload_winners.py [--space lab]
[--workloads lab chat-multiturn]``.
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

from slotune.tuner.spaces import load_space
from slotune.workers.loadgen import load_workload
from slotune.workers.trial.virtual import run_virtual_trial

GRID: dict[str, list[Any]] = {
    "enable_prefix_caching": [True, False],
    "kv_cache_dtype": ["auto", "fp8"],
    "quantization": [None, "fp8"],
    "max_num_batched_tokens": [1024, 2048, 4096],
}


def capacity(space_name: str, workload_name: str, params: dict[str, Any]) -> float:
    space = load_space(space_name)
    # a finer search than a sweep's (3%, not 15%), so that near ties are told apart
    search = space.capacity.model_copy(update={"relative_tolerance": 0.03, "max_probes": 10})
    spec = space.to_trial_spec({**space.defaults(), **params}, "grid",
                               workload=load_workload(workload_name)[0], quality=None,
                               capacity=search)
    result = run_virtual_trial(spec)
    return result.capacity or 0.0 if result.status == "ok" else 0.0


def label(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="lab")
    parser.add_argument("--workloads", nargs=2, default=["lab", "chat-multiturn"])
    args = parser.parse_args()
    points = [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]
    scores: dict[str, list[float]] = {}
    for workload in args.workloads:
        started = time.perf_counter()
        scores[workload] = [capacity(args.space, workload, p) for p in points]
        print(f"{workload}: {len(points)} configurations in "
              f"{time.perf_counter() - started:.0f} s")
    a, b = args.workloads
    print(f"\n{'configuration':<100} {a:>10} {b:>14}")
    for i, p in enumerate(points):
        print(f"{label(p):<100} {scores[a][i]:>10.2f} {scores[b][i]:>14.2f}")
    best = {w: max(range(len(points)), key=lambda i, w=w: scores[w][i]) for w in scores}
    print()
    for w in args.workloads:
        other = b if w == a else a
        i = best[w]
        print(f"winner on {w}: {label(points[i])}: {scores[w][i]:.2f} req/s on {w}, "
              f"{scores[other][i]:.2f} on {other} (the {other} winner: "
              f"{scores[other][best[other]]:.2f}, "
              f"{scores[other][i] / scores[other][best[other]]:.0%} of it)")
    print(f"the winners {'differ' if best[a] != best[b] else 'are the same configuration'}")


if __name__ == "__main__":
    main()
