"""How close the simulator's step times are to the reference vLLM step times.

Usage: ``.venv/bin/python benchmarks/sim_fidelity.py [--cost-model roofline] [--rows]``

Prints, per GPU and overall, the median and maximum absolute percentage error of the
modelled step time against every reference row, and the median per kind of step
(prefill / decode / mixed). Targets (issue 8): overall median <= 10 %, max <= 30 %, no
kind with a median above 15 %. The reference file is ``$SLOTUNE_REFERENCE_DIR/
vllm-step-times.csv`` (default ``../shared/reference`` from the repo root), else the
in-repo copy under ``benchmarks/data``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _reference import load_rows, reference_csv

from workers.sim.cost_model import UnsupportedSetup, make_cost_model
from workers.sim.reference import ReferenceRow, reference_setup, reference_shape


def modelled_ms(row: ReferenceRow, cost_model: str) -> float:
    return make_cost_model(cost_model, reference_setup(row)).step_time(reference_shape(row)) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost-model", default="roofline")
    parser.add_argument("--rows", action="store_true", help="also print every row's error")
    args = parser.parse_args(argv)
    rows = load_rows()
    groups: dict[str, list[float]] = defaultdict(list)
    kinds: dict[str, list[float]] = defaultdict(list)
    overall: list[float] = []
    skipped = 0
    for row in rows:
        try:
            ms = modelled_ms(row, args.cost_model)
        except UnsupportedSetup:
            skipped += 1
            continue
        err = abs(ms / row.latency_ms - 1.0) * 100.0
        overall.append(err)
        groups[row.gpu].append(err)
        kinds[row.kind].append(err)
        if args.rows:
            print(f"{row.gpu:9} {row.model.split('/')[-1]:20} {row.weights:4}/{row.kv_cache:4} "
                  f"{row.kind:7} P={row.prefill_tokens:5} D={row.decode_seqs:4} isl={row.isl:5} "
                  f"ref={row.latency_ms:9.3f} sim={ms:9.3f} err={err:5.1f}%")
    print(f"reference: {reference_csv()} ({len(rows)} rows, cost model {args.cost_model!r}"
          + (f", {skipped} not covered" if skipped else "") + ")")
    print(f"{'':10} {'rows':>5} {'median %':>9} {'max %':>7}")
    for name, errors in [*sorted(groups.items()), *sorted(kinds.items()), ("overall", overall)]:
        print(f"{name:10} {len(errors):5} {statistics.median(errors):9.1f} {max(errors):7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
