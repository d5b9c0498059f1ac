"""Fit the roofline's per-GPU factors to the reference step times; write calibration.json.

Usage: ``.venv/bin/python benchmarks/fit_calibration.py [--dry-run]``

For each GPU with reference rows, a coordinate search in log-parameter space minimises
the mean squared log error of the modelled step times, plus a term on the worst rows
(the fourth power of the log error) so that no row is sacrificed for the median. Each
factor stays inside physically plausible bounds (an efficiency cannot exceed 1). No
scipy: the model is cheap and has about ten factors, so a coordinate search
converges in under a minute on two cores.

The ``default`` entry (GPUs without reference rows, e.g. the RTX 4090) copies the factors
of the GPU named by ``DEFAULT_FROM``: efficiencies are fractions of a datasheet peak, so
they carry over by the target's own datasheet figures; the L40S is the same AD102 die as
the RTX 4090. ``eager_overhead_per_layer_s`` is not in the reference data (it models
CUDA-graph execution) and keeps its prior.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import asdict, fields, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _reference import load_rows, reference_csv

from slotune.workers.sim.calibration import RooflineCalibration
from slotune.workers.sim.cost_model import HardwareSetup, RooflineCostModel, StepShape
from slotune.workers.sim.reference import ReferenceRow, reference_setup, reference_shape

CALIBRATION_JSON = (Path(__file__).resolve().parent.parent / "slotune" / "workers" / "sim"
                    / "calibration.json")
DEFAULT_FROM = "l40s"

BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.2, 0.95),
    "fp8_gemm_efficiency": (0.2, 0.95),
    "memory_efficiency": (0.4, 0.98),
    "kv_efficiency": (0.4, 0.98),
    "fp8_kv_efficiency": (0.3, 0.98),
    "attention_efficiency": (0.1, 0.9),
    "overlap_exponent": (1.0, 12.0),
    "step_overhead_s": (1e-6, 5e-3),
    "layer_overhead_s": (1e-7, 200e-6),
    "attention_overhead_per_layer_s": (1e-7, 200e-6),
    "per_seq_overhead_s": (1e-9, 50e-6),
}
"""What the search may move, and where physics (or plausibility) bounds it."""


def _loss(cal: RooflineCalibration,
          cases: list[tuple[HardwareSetup, StepShape, float]]) -> float:
    total = 0.0
    for setup, shape, target in cases:
        err = math.log(RooflineCostModel(setup, cal).step_time(shape) / target)
        total += err * err + 50.0 * err**4
    return total / len(cases)


def fit_gpu(rows: list[ReferenceRow], start: RooflineCalibration,
            rounds: int = 2000) -> RooflineCalibration:
    """Coordinate search on log parameters.

    Try a step up and down each factor in turn; halve the step when none improves.
    """
    cases = [(reference_setup(r), reference_shape(r), r.latency_ms / 1e3) for r in rows]
    has_fp8_weights = any(r.weights == "fp8" for r in rows)
    has_fp8_kv = any(r.kv_cache == "fp8" for r in rows)
    free = [name for name in BOUNDS
            if (has_fp8_weights or name != "fp8_gemm_efficiency")
            and (has_fp8_kv or name != "fp8_kv_efficiency")]
    cal, best = start, _loss(start, cases)
    step = 0.5
    for _ in range(rounds):
        improved = False
        for name in free:
            lo, hi = BOUNDS[name]
            for direction in (1.0, -1.0):
                value = min(hi, max(lo, getattr(cal, name) * math.exp(direction * step)))
                trial = replace(cal, **{name: value})
                loss = _loss(trial, cases)
                if loss < best - 1e-12:
                    cal, best, improved = trial, loss, True
                    break
        if not improved:
            step /= 2
            if step < 1e-3:
                break
    if not has_fp8_weights:
        # No FP8 rows (the A100 has no FP8 tensor cores): FP8 weights run weight-only
        # (Marlin W8A16) at the BF16 GEMM efficiency, which is what the model uses anyway.
        cal = replace(cal, fp8_gemm_efficiency=cal.gemm_efficiency)
    if not has_fp8_kv:
        cal = replace(cal, fp8_kv_efficiency=cal.kv_efficiency)
    return cal


def _entry(cal: RooflineCalibration) -> dict[str, float]:
    return {k: float(f"{v:.4g}") for k, v in asdict(cal).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the fit, do not write it")
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args(argv)
    by_gpu: dict[str, list[ReferenceRow]] = defaultdict(list)
    for row in load_rows():
        by_gpu[reference_setup(row).gpu.name].append(row)
    gpus: dict[str, dict[str, float]] = {}
    for gpu, rows in sorted(by_gpu.items()):
        cal = fit_gpu(rows, RooflineCalibration(), args.rounds)
        gpus[gpu] = _entry(cal)
        print(f"{gpu}: {len(rows)} rows -> {gpus[gpu]}")
    gpus["default"] = dict(gpus[DEFAULT_FROM])
    document = {
        "_comment": (
            "Roofline factors per GPU (see slotune/workers/sim/calibration.py for their meaning), "
            "fitted by benchmarks/fit_calibration.py to the reference step times; "
            "do not edit by hand."
        ),
        "_source": reference_csv().name,
        "_default_from": (
            f"{DEFAULT_FROM}: same architecture (AD102) as the RTX 4090; efficiencies apply "
            "to the target GPU's own datasheet peaks"
        ),
        "gpus": gpus,
    }
    known = {f.name for f in fields(RooflineCalibration)}
    assert all(set(entry) <= known for entry in gpus.values())
    if args.dry_run:
        print(json.dumps(document, indent=2))
    else:
        CALIBRATION_JSON.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {CALIBRATION_JSON}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
