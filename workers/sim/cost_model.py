"""Step-time cost models: what one engine step of a given batch shape costs on a GPU.

The scheduler describes each step by its :class:`StepShape`; a :class:`CostModel` turns
that into a :class:`StepCost` with its breakdown. The roofline model is the default; a
measured model (AIConfigurator's per-op database) can be registered beside it. The
``slotune sim step-time`` command calls exactly this code path.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import asdict, dataclass

from workers.sim.calibration import RooflineCalibration, load_calibration
from workers.sim.catalog import GPUSpec, ModelSpec

WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "awq": 0.5, "gptq": 0.5}
"""Bytes per weight for each weight format (int4 formats: 4 bits, scales ignored)."""
KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
"""Bytes per KV element for each ``--kv-cache-dtype``."""


@dataclass(frozen=True, slots=True)
class HardwareSetup:
    """What the cost of a step depends on besides the batch: model, GPU, parallelism, formats."""

    model: ModelSpec
    gpu: GPUSpec
    tensor_parallel_size: int = 1
    weight_format: str = "bf16"
    """``bf16``, ``fp8``, ``awq`` or ``gptq`` (from ``--quantization``)."""
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False

    @property
    def weight_bytes_per_param(self) -> float:
        return WEIGHT_BYTES[self.weight_format]

    @property
    def kv_bytes_per_element(self) -> float:
        return KV_BYTES[self.kv_cache_dtype]

    @property
    def gemm_flops(self) -> float:
        """Peak GEMM throughput for this weight format (fp8 runs on fp8 tensor cores if any)."""
        if self.weight_format == "fp8" and self.gpu.fp8_flops is not None:
            return self.gpu.fp8_flops
        return self.gpu.bf16_flops


@dataclass(frozen=True, slots=True)
class StepShape:
    """The shape of one engine step's batch, aggregated over its requests.

    Aggregates suffice for a roofline and keep the scheduler's per-step work small.
    """

    prefill_tokens: int = 0
    """New prompt tokens computed this step, over all prefill chunks."""
    prefill_seqs: int = 0
    """Requests with a prefill chunk in this step."""
    prefill_attention_pairs: float = 0.0
    """Σ over chunks of chunk_tokens × (cached_tokens + chunk_tokens / 2): query-key pairs."""
    prefill_context: int = 0
    """Σ over chunks of the KV tokens the chunk attends to (cached + chunk)."""
    decode_seqs: int = 0
    decode_context: int = 0
    """Σ over decoding requests of their context length (KV tokens read)."""
    decode_query_tokens: int = 1
    """Tokens each decoding request verifies this step: 1, or 1 + speculative tokens."""

    @classmethod
    def uniform(cls, prefill_tokens: int, decode_seqs: int, context_len: int,
                decode_query_tokens: int = 1) -> StepShape:
        """One fresh prefill of ``prefill_tokens`` beside ``decode_seqs`` sequences of ``context_len``."""
        return cls(
            prefill_tokens=prefill_tokens,
            prefill_seqs=1 if prefill_tokens else 0,
            prefill_attention_pairs=prefill_tokens * prefill_tokens / 2,
            prefill_context=prefill_tokens,
            decode_seqs=decode_seqs,
            decode_context=decode_seqs * context_len,
            decode_query_tokens=decode_query_tokens,
        )

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs * self.decode_query_tokens

    @property
    def is_empty(self) -> bool:
        return self.num_tokens == 0


@dataclass(frozen=True, slots=True)
class StepCost:
    """A step's modelled time and where it goes, in seconds."""

    total_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    communication_s: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class CostModel(abc.ABC):
    """Maps a step's shape to its duration on one hardware setup.

    Implementations are pure (no clock, no randomness: noise is the engine's business)
    and cheap, since the scheduler calls :meth:`step_cost` once per step. A model that
    cannot cover a setup raises :class:`UnsupportedSetup` from its constructor.
    """

    name: str = ""

    def __init__(self, setup: HardwareSetup) -> None:
        self.setup = setup

    @abc.abstractmethod
    def step_cost(self, shape: StepShape) -> StepCost:
        """The modelled cost of one step of this shape."""

    def step_time(self, shape: StepShape) -> float:
        return self.step_cost(shape).total_s


class UnsupportedSetup(ValueError):
    """A cost model was asked about a (model, GPU, format) it does not cover."""


class RooflineCostModel(CostModel):
    """max(compute, memory) with calibrated efficiencies, plus fixed overhead and all-reduce.

    * compute: GEMM FLOPs (2 × params × tokens) at the format's peak × GEMM efficiency,
      plus attention FLOPs at the BF16 peak × attention efficiency;
    * memory: weights read once per step, KV read for every attended token, KV written;
    * overhead: per-step launch/scheduling cost (much larger with ``--enforce-eager``,
      where CUDA graphs are not used) plus a per-sequence CPU cost;
    * communication: two all-reduces per layer of the step's activations across TP ranks.
    """

    name = "roofline"

    def __init__(self, setup: HardwareSetup, calibration: RooflineCalibration | None = None) -> None:
        super().__init__(setup)
        self.cal = calibration or load_calibration(setup.gpu.name)
        m, tp = setup.model, setup.tensor_parallel_size
        self._gemm_flops_per_token = 2.0 * m.matmul_params / tp
        self._attn_flops_per_pair = 4.0 * m.num_layers * (m.num_attention_heads / tp) * m.head_dim
        self._weight_bytes = m.matmul_params / tp * setup.weight_bytes_per_param
        self._kv_bytes_per_token = m.kv_bytes_per_token(setup.kv_bytes_per_element, tp)
        self._gemm_rate = setup.gemm_flops * self.cal.gemm_efficiency
        self._attn_rate = setup.gpu.bf16_flops * self.cal.attention_efficiency
        self._mem_rate = setup.gpu.memory_bandwidth * self.cal.memory_efficiency
        self._allreduce_bytes_per_token = (
            m.hidden_size * 2.0 * 2.0 * (tp - 1) / tp if tp > 1 else 0.0
        )
        self._fixed_overhead = self.cal.step_overhead_s + (
            self.cal.eager_overhead_per_layer_s * m.num_layers if setup.enforce_eager else 0.0
        )

    def step_cost(self, shape: StepShape) -> StepCost:
        tokens = shape.num_tokens
        if tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0)
        decode_pairs = shape.decode_context * shape.decode_query_tokens
        compute = (tokens * self._gemm_flops_per_token / self._gemm_rate
                   + (shape.prefill_attention_pairs + decode_pairs) * self._attn_flops_per_pair
                   / self._attn_rate)
        kv_tokens = shape.decode_context + shape.prefill_context + tokens
        memory = (self._weight_bytes + kv_tokens * self._kv_bytes_per_token) / self._mem_rate
        seqs = shape.decode_seqs + shape.prefill_seqs
        overhead = self._fixed_overhead + seqs * self.cal.per_seq_overhead_s
        comm = 0.0
        if self.setup.tensor_parallel_size > 1:
            layers = self.setup.model.num_layers
            comm = 2 * layers * (self.setup.gpu.interconnect_latency_s
                                 + tokens * self._allreduce_bytes_per_token
                                 / self.setup.gpu.interconnect_bandwidth)
        total = max(compute, memory) + overhead + comm
        return StepCost(total, compute, memory, overhead, comm)


CostModelFactory = Callable[[HardwareSetup], CostModel]

COST_MODELS: dict[str, CostModelFactory] = {"roofline": RooflineCostModel}


def make_cost_model(name: str, setup: HardwareSetup) -> CostModel:
    """Build a registered cost model; an unknown name lists the valid ones."""
    try:
        factory = COST_MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown cost model {name!r}; valid: {', '.join(sorted(COST_MODELS))}"
        ) from None
    return factory(setup)
