"""The simulated engine's flags: vLLM's arguments, their defaults and refusals.

Parse the flags vLLM would take (:func:`add_engine_arguments`), fill in the defaults vLLM
would choose for this GPU and refuse what vLLM refuses, in vLLM's own sentences
(:func:`build_config`), into one resolved :class:`EngineConfig`. Memory is sized apart
(:mod:`slotune.workers.sim._memory`), after the flags are known; callers import all of it from
:mod:`slotune.workers.sim.config`.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Any

from slotune.workers.sim.calibration import RooflineCalibration
from slotune.workers.sim.catalog import GiB, GPUSpec, ModelSpec, get_gpu, get_model
from slotune.workers.sim.cost_model import KV_BYTES, WEIGHT_BYTES, HardwareSetup
from slotune.workers.sim.numerics import flip_rate

SIM_ENGINE_VERSION = "0.0.0+sim"
"""The version the simulator reports where vLLM prints its own."""
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
DEFAULT_BLOCK_SIZE = 16
VALID_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
QUANTIZATIONS = ("fp8", "awq", "gptq")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
SIM_GPUS = ("a100-80g", "h100-sxm", "h200", "l40s", "rtx4090")


PYDANTIC_ERRORS_URL = "https://errors.pydantic.dev/2.14/v"


class EngineConfigError(ValueError):
    """A configuration vLLM would refuse at start-up; the message is vLLM's own sentence.

    ``config_class`` names the vLLM configuration class that refuses it (they are pydantic
    dataclasses, so vLLM reports a ``ValidationError`` for it); ``field`` and
    ``error_type`` describe a field bound (``gpu_memory_utilization`` ≤ 1). Without a
    class, vLLM raises a plain ``ValueError`` (memory sizing in the engine core).
    """

    def __init__(self, message: str, *, config_class: str | None = None,
                 field: str | None = None, error_type: str = "value_error",
                 input_value: object = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.sentence = message
        self.config_class = config_class
        self.field = field
        self.error_type = error_type
        self.input_value = input_value

    def log_lines(self) -> list[str]:
        """What vLLM prints as it dies of this (the last lines of its traceback)."""
        if self.config_class is None:
            return [f"ValueError: {self}"]
        head = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                f"{self.config_class}")
        if self.field is None:
            return [head,
                    f"  Value error, {self.sentence} [type=value_error, "
                    "input_value=ArgsKwargs(...), "
                    "input_type=ArgsKwargs]",
                    f"    For further information visit {PYDANTIC_ERRORS_URL}/value_error"]
        value = self.input_value
        return [head, self.field,
                f"  {self.sentence} [type={self.error_type}, input_value={value!r}, "
                f"input_type={type(value).__name__}]",
                f"    For further information visit {PYDANTIC_ERRORS_URL}/{self.error_type}"]


SPECULATIVE_METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp")
# Methods whose proposer is a separate checkpoint: vLLM needs its "model" (mtp uses the
# target model's own MTP layers; ngram needs none).
METHODS_NEEDING_A_MODEL = ("eagle", "eagle3", "draft_model")


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """``--speculative-config``: n-gram or draft-model speculation, k tokens per step.

    Validated as vLLM's ``SpeculativeConfig.__post_init__`` does: without ``method`` it
    is ``ngram`` when ``model`` is ``"ngram"`` and ``draft_model`` otherwise; EAGLE,
    EAGLE-3 and draft-model speculation without ``model`` are refused with vLLM's
    sentence.
    """

    method: str
    num_speculative_tokens: int
    acceptance_rate: float
    """Probability that each proposed token is accepted (a workload property; sim flag)."""
    draft_cost_fraction: float
    """Cost of proposing k tokens relative to one target step (0 for n-gram lookup)."""

    @classmethod
    def parse(cls, text: str, acceptance_rate: float) -> SpeculativeConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EngineConfigError(
                f"--speculative-config must be JSON, e.g. "
                f'\'{{"method":"ngram","num_speculative_tokens":5}}\': {exc}'
            ) from exc
        if not isinstance(data, dict):
            raise EngineConfigError("--speculative-config must be a JSON object")
        model = data.get("model")
        method = data.get("method")
        if method is None:
            method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
        method = "ngram" if method == "[ngram]" else str(method)
        if method not in SPECULATIVE_METHODS:
            raise EngineConfigError(
                f"Unsupported speculative method {method!r}; the simulator models "
                f"{', '.join(SPECULATIVE_METHODS)}.", config_class="SpeculativeConfig"
            )
        k = data.get("num_speculative_tokens")
        if model is None and k is not None and method in METHODS_NEEDING_A_MODEL:
            raise EngineConfigError(
                "num_speculative_tokens was provided but without speculative model.",
                config_class="SpeculativeConfig")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise EngineConfigError("num_speculative_tokens must be a positive integer.",
                                    config_class="SpeculativeConfig")
        if method == "ngram":
            # vLLM's defaults: both 5, or one taken from the other.
            lookup_max_given = data.get("prompt_lookup_max")
            lookup_min = data.get("prompt_lookup_min") or lookup_max_given or 5
            lookup_max = lookup_max_given or lookup_min
            if (isinstance(lookup_min, int) and isinstance(lookup_max, int)
                    and lookup_min > lookup_max):
                raise EngineConfigError(
                    f"prompt_lookup_min={lookup_min} must be <= prompt_lookup_max={lookup_max}",
                    config_class="SpeculativeConfig")
        draft_cost = 0.0 if method == "ngram" else 0.08 * k
        return cls(method, k, acceptance_rate, draft_cost)



@dataclass(frozen=True, slots=True)
class EngineConfig:
    """A fully resolved engine configuration (defaults filled in, validated)."""

    model: ModelSpec
    gpu: GPUSpec
    served_model_name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    kv_cache_dtype: str
    quantization: str | None
    tensor_parallel_size: int
    block_size: int
    enforce_eager: bool
    load_format: str
    speculative: SpeculativeConfig | None
    data_parallel_size: int = 1
    """Engine ranks behind the one API server (:mod:`slotune.workers.sim.data_parallel`); each
    holds this whole configuration (``max_num_seqs``, KV cache, …) on TP devices."""
    enable_expert_parallel: bool = False
    seed: int = 0
    noise: float = 0.0
    time_scale: float = 1.0
    cost_model: str = "roofline"
    calibration: RooflineCalibration | None = None
    """Roofline factors to run with instead of the engine's own (the twin's learned ones)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hardware(self) -> HardwareSetup:
        return HardwareSetup(
            model=self.model,
            gpu=self.gpu,
            tensor_parallel_size=self.tensor_parallel_size,
            weight_format=self.quantization or "bf16",
            kv_cache_dtype=self.kv_cache_dtype,
            enforce_eager=self.enforce_eager,
            data_parallel_size=self.data_parallel_size,
            enable_expert_parallel=self.enable_expert_parallel,
            seed=self.seed,
        )

    @property
    def flip_rate(self) -> float:
        """Per-token probability that lossy numerics change the greedy answer."""
        return flip_rate(self.quantization, self.kv_cache_dtype)

    def resolved(self) -> dict[str, Any]:
        """The engine arguments as vLLM would log them (what a trial records)."""
        return {
            "model": self.model.name,
            "served_model_name": self.served_model_name,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "kv_cache_dtype": self.kv_cache_dtype,
            "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size,
            "data_parallel_size": self.data_parallel_size,
            "enable_expert_parallel": self.enable_expert_parallel,
            "block_size": self.block_size,
            "enforce_eager": self.enforce_eager,
            "speculative_config": None if self.speculative is None else {
                "method": self.speculative.method,
                "num_speculative_tokens": self.speculative.num_speculative_tokens,
            },
            "sim_gpu": self.gpu.name,
        }


def default_scheduler_limits(gpu: GPUSpec) -> tuple[int, int]:
    """vLLM's API-server defaults: (max_num_batched_tokens, max_num_seqs) for this GPU."""
    if gpu.memory_bytes >= 70 * GiB and "a100" not in gpu.device_name.lower():
        return 8192, 1024
    return 2048, 256


def check_tensor_parallel(model: ModelSpec, tensor_parallel_size: int) -> None:
    """vLLM's check (ModelConfig.verify_with_parallel_config), in its own words."""
    if tensor_parallel_size < 1:
        raise EngineConfigError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}.")
    if model.num_attention_heads % tensor_parallel_size:
        raise EngineConfigError(
            f"Total number of attention heads ({model.num_attention_heads}) must be "
            f"divisible by tensor parallel size ({tensor_parallel_size}).",
            config_class="VllmConfig",
        )


def check_parallel_layout(model: ModelSpec, tensor_parallel_size: int,
                          data_parallel_size: int = 1,
                          enable_expert_parallel: bool = False) -> None:
    """The layout's checks: vLLM's head count (:func:`check_tensor_parallel`), the
    experts' width that vLLM's ``FusedMoEConfig`` asserts divides across the TP × DP
    devices without expert parallelism (vLLM says only ``AssertionError``; these words
    are ours), and expert parallelism on a model without experts (vLLM ignores the flag;
    refused here so a search does not spend a trial on a layout that equals another)."""
    check_tensor_parallel(model, tensor_parallel_size)
    if data_parallel_size < 1:
        raise EngineConfigError(f"data_parallel_size must be >= 1, got {data_parallel_size}.")
    moe = model.moe
    if moe is None:
        if enable_expert_parallel:
            raise EngineConfigError(
                f"enable_expert_parallel is set but {model.name} has no experts (its "
                "config.json declares no mixture-of-experts layers): expert parallelism "
                "has nothing to split; leave it off for a dense model.")
        return
    devices = tensor_parallel_size * data_parallel_size
    if not enable_expert_parallel and moe.expert_intermediate_size % devices:
        raise EngineConfigError(
            f"The experts' intermediate size ({moe.expert_intermediate_size}) must be "
            f"divisible by tensor_parallel_size × data_parallel_size ({devices}): without "
            "expert parallelism vLLM shards every expert across all of those devices "
            "(FusedMoEConfig: assert intermediate_size % tp_size == 0). Enable expert "
            "parallelism or choose sizes that divide it.")


def build_config(
    model: str,
    *,
    sim_gpu: str = "h100-sxm",
    served_model_name: str | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    enable_prefix_caching: bool = True,
    enable_chunked_prefill: bool = True,
    kv_cache_dtype: str = "auto",
    quantization: str | None = None,
    speculative_config: str | None = None,
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    block_size: int = DEFAULT_BLOCK_SIZE,
    enforce_eager: bool = False,
    load_format: str = "auto",
    sim_seed: int = 0,
    sim_noise: float = 0.0,
    sim_time_scale: float = 1.0,
    sim_cost_model: str = "roofline",
    sim_acceptance_rate: float = 0.6,
) -> EngineConfig:
    """Resolve defaults and run vLLM's argument checks (not the memory check)."""
    model_spec = get_model(model)
    gpu = get_gpu(sim_gpu)
    if kv_cache_dtype not in KV_BYTES:
        raise EngineConfigError(
            f"Unknown kv cache dtype {kv_cache_dtype!r}; valid: {', '.join(KV_CACHE_DTYPES)}"
        )
    if quantization is not None and quantization not in WEIGHT_BYTES:
        raise EngineConfigError(
            f"Unknown quantization method: {quantization}. Must be one of {list(QUANTIZATIONS)}."
        )
    check_parallel_layout(model_spec, tensor_parallel_size, data_parallel_size,
                          enable_expert_parallel)
    # CacheConfig's field bound (0, 1]; pydantic words it.
    if gpu_memory_utilization > 1.0:
        raise EngineConfigError(
            "Input should be less than or equal to 1", config_class="CacheConfig",
            field="gpu_memory_utilization", error_type="less_than_equal",
            input_value=gpu_memory_utilization,
        )
    if gpu_memory_utilization <= 0.0:
        raise EngineConfigError(
            "Input should be greater than 0", config_class="CacheConfig",
            field="gpu_memory_utilization", error_type="greater_than",
            input_value=gpu_memory_utilization,
        )
    if block_size not in VALID_BLOCK_SIZES:
        raise EngineConfigError(
            f"Invalid block size {block_size}; valid: {', '.join(map(str, VALID_BLOCK_SIZES))}"
        )
    derived_len = model_spec.max_position_embeddings
    if max_model_len is None:
        max_model_len = derived_len
    elif max_model_len > derived_len:
        raise EngineConfigError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={float(derived_len)} or "
            "model_max_length=None in model's config.json). To allow overriding this "
            "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model "
            "uses relative position encoding (RoPE), positions exceeding "
            "derived_max_model_len lead to nan. If the model uses absolute position "
            "encoding, positions exceeding derived_max_model_len will cause a CUDA array "
            "out-of-bounds error.",
            config_class="ModelConfig",
        )
    elif max_model_len < 1:
        raise EngineConfigError(f"max_model_len must be positive, got {max_model_len}.")
    default_tokens, default_seqs = default_scheduler_limits(gpu)
    if max_num_seqs is None:
        max_num_seqs = default_seqs
    if max_num_batched_tokens is None:
        max_num_batched_tokens = default_tokens
        if not enable_chunked_prefill:
            # Without chunked prefill a prompt must fit one step, so vLLM raises the budget.
            max_num_batched_tokens = max(max_model_len, default_tokens)
    if max_num_seqs < 1:
        raise EngineConfigError(f"max_num_seqs must be positive, got {max_num_seqs}.")
    # SchedulerConfig.verify_max_model_len, in its order.
    if not enable_chunked_prefill and max_num_batched_tokens < max_model_len:
        raise EngineConfigError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len.",
            config_class="SchedulerConfig",
        )
    if max_num_batched_tokens < max_num_seqs:
        raise EngineConfigError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or "
            f"equal to max_num_seqs ({max_num_seqs}).",
            config_class="SchedulerConfig",
        )
    if not 0.0 <= sim_acceptance_rate <= 1.0:
        raise EngineConfigError(
            f"--sim-acceptance-rate must be in [0, 1], got {sim_acceptance_rate}."
        )
    if sim_noise < 0:
        raise EngineConfigError(f"--sim-noise must be >= 0, got {sim_noise}.")
    if sim_time_scale <= 0:
        raise EngineConfigError(f"--sim-time-scale must be > 0, got {sim_time_scale}.")
    speculative = (
        SpeculativeConfig.parse(speculative_config, sim_acceptance_rate)
        if speculative_config else None
    )
    return EngineConfig(
        model=model_spec,
        gpu=gpu,
        served_model_name=served_model_name or model,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        enable_prefix_caching=enable_prefix_caching,
        enable_chunked_prefill=enable_chunked_prefill,
        kv_cache_dtype=kv_cache_dtype,
        quantization=quantization,
        tensor_parallel_size=tensor_parallel_size,
        block_size=block_size,
        enforce_eager=enforce_eager,
        load_format=load_format,
        speculative=speculative,
        data_parallel_size=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel,
        seed=sim_seed,
        noise=sim_noise,
        time_scale=sim_time_scale,
        cost_model=sim_cost_model,
    )



def _bool_flag(parser: argparse.ArgumentParser, name: str, default: bool, help_text: str) -> None:
    parser.add_argument(
        f"--{name}", action=argparse.BooleanOptionalAction, default=default, help=help_text
    )


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's flag names (as ``vllm serve`` spells them) plus the simulator's own."""
    parser.add_argument("model", help="model name, e.g. Qwen/Qwen2.5-7B-Instruct, or a local "
                                      "directory holding a config.json")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float,
                        default=DEFAULT_GPU_MEMORY_UTILIZATION)
    parser.add_argument("--max-model-len", type=int, default=None)
    _bool_flag(parser, "enable-prefix-caching", True, "reuse KV blocks of shared prefixes")
    _bool_flag(parser, "enable-chunked-prefill", True, "split long prompts across steps")
    parser.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    parser.add_argument("--quantization", "-q", choices=QUANTIZATIONS, default=None)
    parser.add_argument("--speculative-config", default=None,
                        help='JSON, e.g. \'{"method":"ngram","num_speculative_tokens":5}\'')
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    _bool_flag(parser, "enable-expert-parallel", False,
               "place whole experts on ranks instead of sharding every expert (MoE models)")
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    _bool_flag(parser, "enforce-eager", False, "run without CUDA graphs")
    parser.add_argument("--load-format", default="auto")
    # The --sim-* defaults can come from SLOTUNE_SIM_* variables, so a launcher that only
    # speaks vLLM's flags (the vllm adapter pointed at this entry) can still pick them.
    env = os.environ.get
    # No argparse choices: a device file's path is a GPU too; build_config refuses an
    # unknown one with the list of valid names.
    parser.add_argument("--sim-gpu", default=env("SLOTUNE_SIM_GPU", "h100-sxm"),
                        help=f"the simulated GPU type: {', '.join(SIM_GPUS)} (or an alias), or "
                             "the path of a device file (.yaml/.yml/.json; env SLOTUNE_SIM_GPU)")
    parser.add_argument("--sim-seed", type=int, default=int(env("SLOTUNE_SIM_SEED", "0")))
    parser.add_argument("--sim-noise", type=float, default=float(env("SLOTUNE_SIM_NOISE", "0")),
                        help="run-to-run jitter of step times (relative std dev); 0 = exact")
    parser.add_argument("--sim-time-scale", type=float,
                        default=float(env("SLOTUNE_SIM_TIME_SCALE", "1")),
                        help="run the real-time driver this many times faster than real time")
    parser.add_argument("--sim-cost-model", default=env("SLOTUNE_SIM_COST_MODEL", "roofline"))
    parser.add_argument("--sim-acceptance-rate", type=float, default=0.6,
                        help="speculative decoding: probability each proposed token is accepted")
    parser.add_argument("--sim-startup-delay", type=float, default=None,
                        help="seconds to wait before /health turns 200 "
                             "(default: the modelled load time divided by the time scale, ≤ 2 s)")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    return build_config(
        args.model,
        sim_gpu=args.sim_gpu,
        served_model_name=args.served_model_name,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        enable_prefix_caching=args.enable_prefix_caching,
        enable_chunked_prefill=args.enable_chunked_prefill,
        kv_cache_dtype=args.kv_cache_dtype,
        quantization=args.quantization,
        speculative_config=args.speculative_config,
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size,
        enable_expert_parallel=args.enable_expert_parallel,
        block_size=args.block_size,
        enforce_eager=args.enforce_eager,
        load_format=args.load_format,
        sim_seed=args.sim_seed,
        sim_noise=args.sim_noise,
        sim_time_scale=args.sim_time_scale,
        sim_cost_model=args.sim_cost_model,
        sim_acceptance_rate=args.sim_acceptance_rate,
    )
