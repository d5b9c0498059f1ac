"""A measured cost model: NVIDIA AIConfigurator's per-operation database of vLLM kernels.

``--sim-cost-model aiconfigurator`` replaces the roofline by AIConfigurator's estimate
(``aiconfigurator-core``, an optional extra: ``pip install 'slotune[aiconfigurator]'``).
The package ships, per GPU and vLLM version, measured latencies of every kernel of a
forward pass (GEMMs, attention, norms, all-reduce); it compiles a model into a list of
those operations once (about a second, offline: its model configs and data are bundled)
and then estimates a step in a few microseconds of Rust. It is the source of the
reference step times the roofline is calibrated on.

Coverage, refused with :class:`UnsupportedSetup` otherwise: the GPUs it has vLLM data
for among ours (H100 SXM, H200, A100 SXM, L40S — not the RTX 4090), the models whose
config.json it bundles (Llama 3.1 8B/70B, Qwen3 8B; it would download others from
Hugging Face), BF16 or FP8 weights (FP8 not on the A100) and a BF16 or FP8 KV cache.

How a step's aggregate shape maps onto its calls (it thinks in uniform batches):

* decode only → ``decode_step_latency(decode sequences × query tokens, mean context)``;
* prefill only → ``predict_prefill_latency(chunks, mean chunk + cached, cached)``;
* mixed → ``mixed_step_latency(prefill tokens, decode sequences, isl, osl)``, where
  ``isl`` is the prefill chunks' mean context (their prompt so far) and ``osl`` is chosen
  so that ``isl + osl // 2`` is the decoding sequences' mean context (it cannot be lower
  than ``isl``: a shorter decode context is costed at ``isl``).

It measures whole kernels, which does not split compute from memory traffic, so
:class:`StepCost` reports the kernel time as ``compute_s`` (all-reduce included) and
leaves ``memory_s``, ``overhead_s`` and ``communication_s`` at zero. ``--enforce-eager``
is not modelled (its data are CUDA-graph timings).
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

from slotune.workers.sim.cost_model import (
    CostModel,
    HardwareSetup,
    StepCost,
    StepShape,
    UnsupportedSetup,
)

INSTALL_HINT = "install the optional extra: pip install 'slotune[aiconfigurator]'"

GPU_SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "a100-80g": "a100_sxm", "l40s": "l40s"}
"""Our GPU names → AIConfigurator's system names (those with vLLM data)."""
MODEL_PATHS = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
}
"""Our catalogue names → the configs it bundles (an instruct model shares its base's)."""
GEMM_MODES = {"bf16": "bfloat16", "fp8": "fp8"}
KV_MODES = {"auto": "bfloat16", "bf16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8"}
BACKEND_VERSION = "0.24.0"
"""The vLLM release of the reference data; GPUs without data for it use their current one."""


class AIConfiguratorCostModel(CostModel):
    """Step times from AIConfigurator's measured per-operation latencies of vLLM."""

    name = "aiconfigurator"

    def __init__(self, setup: HardwareSetup) -> None:
        super().__init__(setup)
        system = GPU_SYSTEMS.get(setup.gpu.name)
        model_path = MODEL_PATHS.get(setup.model.name)
        gemm = GEMM_MODES.get(setup.weight_format)
        kv = KV_MODES.get(setup.kv_cache_dtype)
        if system is None or model_path is None or gemm is None or kv is None:
            raise UnsupportedSetup(
                f"the aiconfigurator cost model does not cover {setup.model.name} on "
                f"{setup.gpu.name} with {setup.weight_format} weights and a "
                f"{setup.kv_cache_dtype} KV cache; it covers GPUs {', '.join(GPU_SYSTEMS)}, "
                f"models {', '.join(MODEL_PATHS)}, weights bf16/fp8, KV cache auto/fp8 "
                "(use --sim-cost-model roofline for the rest)"
            )
        self._engine = _compiled(model_path, system, setup.tensor_parallel_size, gemm, kv)

    def step_cost(self, shape: StepShape) -> StepCost:
        if shape.num_tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0)
        engine = self._engine
        if shape.prefill_tokens == 0:
            mean_context = max(1, round(shape.decode_context / shape.decode_seqs))
            # It costs a decode step at context isl + osl // 2 + 1: osl = 1 gives isl + 1.
            ms = engine.decode_step_latency(shape.decode_seqs * shape.decode_query_tokens,
                                            max(1, mean_context - 1), 1)
        else:
            chunks = max(1, shape.prefill_seqs)
            chunk = max(1, round(shape.prefill_tokens / chunks))
            cached = max(0, round((shape.prefill_context - shape.prefill_tokens) / chunks))
            if shape.decode_seqs == 0:
                ms = engine.predict_prefill_latency(chunks, chunk + cached, cached)
            else:
                isl = chunk + cached
                decode_context = shape.decode_context / shape.decode_seqs
                osl = max(2, 2 * round(decode_context - isl))
                ms = engine.mixed_step_latency(shape.prefill_tokens, shape.decode_seqs, isl, osl)
        seconds = float(ms) / 1e3
        return StepCost(seconds, seconds, 0.0, 0.0, 0.0)


@cache
def _compiled(model_path: str, system: str, tp: int, gemm: str, kv: str) -> Any:
    """Compile (once per process and setup) the model's operations against the GPU's data."""
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError as exc:
        raise UnsupportedSetup(
            f"the aiconfigurator cost model needs aiconfigurator-core: {INSTALL_HINT}"
        ) from exc
    # Its database loader warns about every fallback table it meets (other backends'
    # data); those are not ours to act on.
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    kwargs: dict[str, Any] = dict(tp_size=tp, gemm_quant_mode=gemm, kvcache_quant_mode=kv,
                                  fmha_quant_mode="bfloat16")
    errors = []
    for version in (BACKEND_VERSION, None):
        try:
            engine = EngineHandle.compile(model_path, system, "vllm", backend_version=version,
                                          **kwargs)
            # Probe once, so a setup its tables do not cover fails here, not mid-run.
            engine.decode_step_latency(1, 128, 2)
            engine.predict_prefill_latency(1, 128)
            return engine
        except Exception as exc:  # its errors have no common base; all mean "not covered"
            errors.append(str(exc).splitlines()[0][:200])
    raise UnsupportedSetup(
        f"aiconfigurator has no vLLM data for {model_path} on {system} (tp={tp}, "
        f"weights {gemm}, KV {kv}): {errors[-1]}"
    )
