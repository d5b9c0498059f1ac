"""How close the simulator's step times are to the reference vLLM step times.

Usage: ``.venv/bin/python benchmarks/sim_fidelity.py [--cost-model roofline] [--rows]``

Prints, per GPU and overall, the median and maximum absolute percentage error of the
modelled step time against every reference row, and the median per kind of step
(prefill / decode / mixed). Targets (issue 8): overall median <= 10 %, max <= 30 %, no
kind with a median above 15 %. The reference file is ``$SLOTUNE_REFERENCE_DIR/
vllm-step-times.csv`` (default ``../shared/reference`` from the repo root), else the
in-repo copy under ``benchmarks/data``.

Then the same for the mixture-of-experts rows (``benchmarks/data/vllm-moe-step-times.csv``:
Qwen3-30B-A3B on H100 at the moe-h100 space's layouts, derived from the same source,
AIConfigurator, by ``benchmarks/make_moe_reference.py``), per layout and kind. They are
reported, not fitted: the calibration is the dense rows'.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _reference import MOE_CSV, load_moe_rows, load_rows, reference_csv

from slotune.workers.sim.cost_model import UnsupportedSetup
from slotune.workers.sim.cost_registry import make_cost_model
from slotune.workers.sim.reference import ReferenceRow, reference_setup, reference_shape


def modelled_ms(row: ReferenceRow, cost_model: str) -> float:
    return make_cost_model(cost_model, reference_setup(row)).step_time(reference_shape(row)) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost-model", default="roofline")
    parser.add_argument("--rows", action="store_true", help="also print every row's error")
    args = parser.parse_args(argv)
    _report(load_rows(), str(reference_csv()), args.cost_model, args.rows, by="gpu")
    print()
    _report(load_moe_rows(), str(MOE_CSV), args.cost_model, args.rows, by="layout")
    return 0


def _layout(row: ReferenceRow) -> str:
    return f"tp{row.tp}dp{row.dp}" + ("ep" if row.ep else "")


def _report(rows: list[ReferenceRow], source: str, cost_model: str, show_rows: bool,
            by: str) -> None:
    groups: dict[str, list[float]] = defaultdict(list)
    kinds: dict[str, list[float]] = defaultdict(list)
    overall: list[float] = []
    skipped = 0
    for row in rows:
        try:
            ms = modelled_ms(row, cost_model)
        except UnsupportedSetup:
            skipped += 1
            continue
        err = abs(ms / row.latency_ms - 1.0) * 100.0
        overall.append(err)
        groups[row.gpu if by == "gpu" else _layout(row)].append(err)
        kinds[row.kind].append(err)
        if show_rows:
            print(f"{row.gpu:9} {_layout(row):9} {row.model.split('/')[-1]:20} "
                  f"{row.weights:4}/{row.kv_cache:4} "
                  f"{row.kind:7} P={row.prefill_tokens:5} D={row.decode_seqs:4} isl={row.isl:5} "
                  f"ref={row.latency_ms:9.3f} sim={ms:9.3f} err={err:5.1f}%")
    print(f"reference: {source} ({len(rows)} rows, cost model {cost_model!r}"
          + (f", {skipped} not covered" if skipped else "") + ")")
    print(f"{'':10} {'rows':>5} {'median %':>9} {'max %':>7}")
    for name, errors in [*sorted(groups.items()), *sorted(kinds.items()), ("overall", overall)]:
        print(f"{name:10} {len(errors):5} {statistics.median(errors):9.1f} {max(errors):7.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
