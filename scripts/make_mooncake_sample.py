"""Rewrite the Mooncake-format sample trace that ships with slotune (package data).

    python scripts/make_mooncake_sample.py

The trace is generated, not recorded (:func:`slotune.workers.loadgen.generate.mooncake.sample_trace`
says how), so this is the whole of its provenance; a test checks the shipped file is this script's
output.
"""

from __future__ import annotations

from pathlib import Path

from slotune.workers.loadgen.generate.mooncake import dump_trace, sample_trace

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "slotune" / "workers" / "loadgen" / "workloads" / "traces" / "mooncake_sample.jsonl"

if __name__ == "__main__":
    OUT.write_text(dump_trace(sample_trace()), encoding="utf-8")
    print(f"wrote {OUT}")
