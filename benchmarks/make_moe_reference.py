"""Derive the mixture-of-experts reference step times: ``benchmarks/data/vllm-moe-step-times.csv``.

The shared reference (``vllm-step-times.csv``) holds dense models only. These rows come
from the same source by the same route: NVIDIA AIConfigurator (``aiconfigurator-core``
0.12.0, whose bundled configs include Qwen3-30B-A3B) estimating one
vLLM engine step from its per-operation measurements on H100 SXM, for each layout the
way AIConfigurator spells vLLM's: attention on TP ranks times ``attention_dp_size`` DP
ranks; the experts sharded ``moe_tp_size = TP × DP`` ways without expert parallelism, or
placed ``moe_ep_size = TP × DP`` ways with it. A decode row is
``decode_step_latency(decode_seqs, isl, osl)`` (one rank's batch), a prefill row
``predict_prefill_latency(1, isl)``, as for the dense rows. They are an estimate, not a
measurement of vLLM itself; ``benchmarks/sim_fidelity.py`` reports the simulator's error
against them beside the dense rows.

Run it where aiconfigurator-core is installed (``pip install 'slotune[aiconfigurator]'``;
it imports nothing else of slotune):

    python benchmarks/make_moe_reference.py [OUT.csv]
"""

from __future__ import annotations

import csv
import logging
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "vllm-moe-step-times.csv"
BACKEND_VERSION = "0.24.0"  # the dense rows' vLLM release
SYSTEM = "h100_sxm"
# (model, TP, DP, expert parallel): layouts of the shipped moe-h100 space. (Mixtral's
# bundled config still makes it reach for Hugging Face, which these machines cannot.)
LAYOUTS = [
    ("Qwen/Qwen3-30B-A3B", 1, 1, False), ("Qwen/Qwen3-30B-A3B", 2, 1, False),
    ("Qwen/Qwen3-30B-A3B", 4, 1, False), ("Qwen/Qwen3-30B-A3B", 1, 2, True),
    ("Qwen/Qwen3-30B-A3B", 2, 2, True), ("Qwen/Qwen3-30B-A3B", 1, 4, True),
]
DECODE = [(1, 1024, 128), (8, 1024, 128), (32, 1024, 128), (128, 1024, 128), (256, 512, 128)]
PREFILL = [512, 1024, 2048, 4096, 8192]
COLUMNS = ["model", "gpu", "tp", "dp", "ep", "weights", "kv_cache", "kind", "prefill_tokens",
           "decode_seqs", "isl", "osl", "latency_ms"]


def main(argv: list[str] | None = None) -> int:
    from aiconfigurator_core.sdk.engine import EngineHandle

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    out = Path((argv or sys.argv[1:] or [str(OUT)])[0])
    rows = []
    for model, tp, dp, ep in LAYOUTS:
        devices = tp * dp
        engine = EngineHandle.compile(
            model, SYSTEM, "vllm", backend_version=BACKEND_VERSION, tp_size=tp,
            attention_dp_size=dp, moe_tp_size=1 if ep else devices,
            moe_ep_size=devices if ep else 1, gemm_quant_mode="bfloat16",
            moe_quant_mode="bfloat16", kvcache_quant_mode="bfloat16",
            fmha_quant_mode="bfloat16")
        base = {"model": model, "gpu": SYSTEM, "tp": tp, "dp": dp, "ep": int(ep),
                "weights": "bf16", "kv_cache": "bf16"}
        for seqs, isl, osl in DECODE:
            ms = float(engine.decode_step_latency(seqs, isl, osl))
            rows.append({**base, "kind": "decode", "prefill_tokens": 0, "decode_seqs": seqs,
                         "isl": isl, "osl": osl, "latency_ms": round(ms, 4)})
        for tokens in PREFILL:
            ms = float(engine.predict_prefill_latency(1, tokens))
            rows.append({**base, "kind": "prefill", "prefill_tokens": tokens, "decode_seqs": 0,
                         "isl": tokens, "osl": 1, "latency_ms": round(ms, 4)})
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
