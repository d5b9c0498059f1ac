"""``slotune sim step-time``: the modelled cost of one engine step, with its breakdown.

Builds the :class:`~slotune.workers.sim.cost_model.HardwareSetup` from vLLM's flags and the step
from ``StepShape.uniform(prefill_tokens, decode_seqs, context_len)``, then asks
``make_cost_model`` — exactly the path the simulated engine's scheduler takes each step.
Prints a table, or JSON with ``--json``. Bad input is one line on stderr and exit code 2.

FP8 weights on a GPU without FP8 tensor cores (A100) are accepted, as vLLM accepts
them: it runs them weight-only through its Marlin W8A16 kernels, so the weights take
one byte each but the GEMMs run at the BF16 rate. The output says so in its notes.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from slotune.workers.sim.catalog import UnknownCatalogEntry, get_gpu, get_model
from slotune.workers.sim.config import EngineConfigError, check_parallel_layout
from slotune.workers.sim.cost_model import (
    KV_BYTES,
    WEIGHT_BYTES,
    HardwareSetup,
    StepShape,
    UnsupportedSetup,
)
from slotune.workers.sim.cost_registry import COST_MODELS, make_cost_model

EXIT_BAD_INPUT = 2
QUANTIZATIONS = tuple(k for k in WEIGHT_BYTES if k != "bf16")
KV_CACHE_DTYPES = tuple(KV_BYTES)


class BadInput(ValueError):
    """Input the command refuses; its message is printed as is."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="Hugging Face model name (the simulator's catalogue, or "
                                      "one cached locally) or a directory with a config.json")
    parser.add_argument("--sim-gpu", required=True,
                        help="GPU type: a100-80g, h100-sxm, h200, l40s, rtx4090 (or an alias), "
                             "or the path of a device file (.yaml/.yml/.json)")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1,
                        help="engine ranks stepping together (a MoE model's experts span "
                             "them); the step is one rank's, the group runs DP of them")
    parser.add_argument("--enable-expert-parallel", action="store_true",
                        help="whole experts per device instead of every expert sharded")
    parser.add_argument("--sim-seed", type=int, default=0,
                        help="draws a MoE model's expert load imbalance (slotune.workers.sim.moe)")
    parser.add_argument("--prefill-tokens", type=int, default=0,
                        help="prompt tokens computed this step (one fresh prompt)")
    parser.add_argument("--decode-seqs", type=int, default=0,
                        help="sequences decoding one token this step")
    parser.add_argument("--context-len", type=int, default=0,
                        help="context length (KV tokens) of each decoding sequence")
    parser.add_argument("--quantization", "-q", default=None,
                        help=f"weight format: {', '.join(QUANTIZATIONS)} (default: bf16 weights)")
    parser.add_argument("--kv-cache-dtype", default="auto",
                        help=f"KV cache dtype: {', '.join(KV_CACHE_DTYPES)}")
    parser.add_argument("--enforce-eager", action="store_true",
                        help="no CUDA graphs: larger per-step launch overhead")
    parser.add_argument("--sim-cost-model", default="roofline",
                        help=f"cost model: {', '.join(sorted(COST_MODELS))}")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    try:
        setup, shape, notes = _build(args)
        cost = make_cost_model(args.sim_cost_model, setup).step_cost(shape)
    except (BadInput, UnknownCatalogEntry, UnsupportedSetup, ValueError) as exc:
        print(f"slotune sim step-time: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report: dict[str, Any] = {
        "model": setup.model.name,
        "gpu": setup.gpu.name,
        "tensor_parallel_size": setup.tensor_parallel_size,
        "data_parallel_size": setup.data_parallel_size,
        "enable_expert_parallel": setup.enable_expert_parallel,
        "weight_format": setup.weight_format,
        "kv_cache_dtype": setup.kv_cache_dtype,
        "enforce_eager": setup.enforce_eager,
        "cost_model": args.sim_cost_model,
        "shape": {
            "prefill_tokens": args.prefill_tokens,
            "decode_seqs": args.decode_seqs,
            "context_len": args.context_len,
            "num_tokens": shape.num_tokens,
        },
        "total_ms": cost.total_s * 1e3,
        "breakdown_ms": {
            "compute": cost.compute_s * 1e3,
            "memory": cost.memory_s * 1e3,
            "overhead": cost.overhead_s * 1e3,
            "communication": cost.communication_s * 1e3,
        },
        "notes": notes,
    }
    print(json.dumps(report, indent=2) if args.json else _table(report))
    return 0


def _build(args: argparse.Namespace) -> tuple[HardwareSetup, StepShape, list[str]]:
    for flag in ("prefill_tokens", "decode_seqs", "context_len"):
        if getattr(args, flag) < 0:
            raise BadInput(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    if args.decode_seqs and args.context_len < 1:
        raise BadInput("--context-len must be >= 1 when --decode-seqs is set")
    model, gpu = get_model(args.model), get_gpu(args.sim_gpu)
    tp = args.tensor_parallel_size
    try:
        # the same checks, and words, as the engine's
        check_parallel_layout(model, tp, args.data_parallel_size, args.enable_expert_parallel)
    except EngineConfigError as exc:
        raise BadInput(str(exc)) from None
    if args.quantization is not None and args.quantization not in QUANTIZATIONS:
        raise BadInput(
            f"unknown quantization {args.quantization!r}; valid: {', '.join(QUANTIZATIONS)}"
        )
    if args.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise BadInput(
            f"unknown --kv-cache-dtype {args.kv_cache_dtype!r}; valid: {', '.join(KV_CACHE_DTYPES)}"
        )
    if args.sim_cost_model not in COST_MODELS:
        raise BadInput(
            f"unknown cost model {args.sim_cost_model!r}; valid: {', '.join(sorted(COST_MODELS))}"
        )
    notes = []
    if args.quantization == "fp8" and gpu.fp8_flops is None:
        notes.append(f"{gpu.name} has no FP8 tensor cores: FP8 weights run weight-only "
                     "(Marlin W8A16), one byte per weight, GEMMs at the BF16 rate")
    setup = HardwareSetup(
        model=model, gpu=gpu, tensor_parallel_size=tp,
        weight_format=args.quantization or "bf16", kv_cache_dtype=args.kv_cache_dtype,
        enforce_eager=args.enforce_eager, data_parallel_size=args.data_parallel_size,
        enable_expert_parallel=args.enable_expert_parallel, seed=args.sim_seed,
    )
    return setup, StepShape.uniform(args.prefill_tokens, args.decode_seqs, args.context_len), notes


def _table(report: dict[str, Any]) -> str:
    shape, parts = report["shape"], report["breakdown_ms"]
    lines = [
        f"model          {report['model']}",
        f"gpu            {report['gpu']} x {report['tensor_parallel_size']}"
        + (f" (x {report['data_parallel_size']} data-parallel ranks)"
           if report["data_parallel_size"] > 1 else "")
        + ("  expert parallel" if report["enable_expert_parallel"] else ""),
        f"weights / kv   {report['weight_format']} / {report['kv_cache_dtype']}"
        + ("  (enforce-eager)" if report["enforce_eager"] else ""),
        f"step           {shape['prefill_tokens']} prefill tokens, {shape['decode_seqs']} decode "
        f"seqs x {shape['context_len']} context ({shape['num_tokens']} tokens)",
        f"cost model     {report['cost_model']}",
        "",
        f"{'step time':<15}{report['total_ms']:>10.3f} ms",
        f"{'  compute':<15}{parts['compute']:>10.3f} ms",
        f"{'  memory':<15}{parts['memory']:>10.3f} ms",
        f"{'  overhead':<15}{parts['overhead']:>10.3f} ms",
        f"{'  communication':<15}{parts['communication']:>10.3f} ms",
    ]
    if report["cost_model"] == "roofline":
        lines.append("(compute and memory overlap: the step time is not their sum)")
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(lines)
