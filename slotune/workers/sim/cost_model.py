"""Step-time cost models: what one engine step of a given batch shape costs on a GPU.

The scheduler describes each step by its :class:`StepShape`; a :class:`CostModel` turns
that into a :class:`StepCost` with its breakdown. The roofline model is the default; a
measured model (AIConfigurator's per-op database) is registered beside it
(:mod:`slotune.workers.sim.cost_registry`, which names them). The ``slotune sim step-time``
command calls exactly this code path.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass

from slotune.workers.sim.calibration import RooflineCalibration, load_calibration
from slotune.workers.sim.catalog import GPUSpec, ModelSpec
from slotune.workers.sim.moe import ExpertLayout, expert_layout, experts_touched

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
    data_parallel_size: int = 1
    """Engine ranks of one server; a MoE model's expert layers span all of them."""
    enable_expert_parallel: bool = False
    seed: int = 0
    """The engine's seed: it draws the experts' load imbalance (:mod:`slotune.workers.sim.moe`)."""

    @property
    def expert_layout(self) -> ExpertLayout | None:
        """Where a MoE model's experts sit on this layout's devices; None for a dense model."""
        moe = self.model.moe
        if moe is None:
            return None
        return expert_layout(moe, self.tensor_parallel_size, self.data_parallel_size,
                             self.enable_expert_parallel, self.seed)

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
    group_tokens: int = 0
    """Tokens the whole data-parallel group runs this step (a MoE model's expert layers
    run them together); 0: this rank's tokens on every rank (balanced ranks)."""

    @classmethod
    def uniform(cls, prefill_tokens: int, decode_seqs: int, context_len: int,
                decode_query_tokens: int = 1) -> StepShape:
        """A fresh prompt of ``prefill_tokens`` beside ``decode_seqs`` of ``context_len`` each."""
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
    """A roofline per group of kernels, with calibrated efficiencies, plus overheads and all-reduce.

    A step runs a few groups of kernels one after another, so their times add; inside a
    group, compute and memory traffic overlap, so the group's time is a smooth maximum
    ``(c**k + m**k) ** (1/k)`` of its compute time ``c`` and memory time ``m`` (``k`` is
    fitted: a hard max overstates the overlap near the ridge point, where measured GEMMs
    run at neither peak). The groups, mirroring how vLLM's forward pass is built:

    * **linear layers** (QKV, O, gate/up, down): 2 × params FLOPs per token at the weight
      format's peak × GEMM efficiency, against one read of the weights;
    * **lm_head**: only for tokens that sample (one per decoding sequence and speculative
      token, one per prefill chunk); vLLM leaves it in BF16 even for quantised models;
    * **elementwise** (norms, residual adds, SiLU-and-mul): memory traffic of the
      activations, ``8·hidden + 3·intermediate`` elements per token and layer;
    * **prefill attention**: 4·heads·head_dim FLOPs per query-key pair per layer at the
      BF16 peak × attention efficiency, against reading the chunk's KV;
    * **decode attention**: reading every decoding sequence's KV cache at the bandwidth ×
      KV efficiency (lower for an FP8 cache, which is dequantised on the fly);
    * **overhead**: a fixed per-step cost, a per-layer kernel-launch cost, a per-layer
      cost for each attention pass present (prefill, decode), a per-sequence CPU cost
      (input preparation, sampling), and with ``--enforce-eager`` a per-layer cost for
      launching kernels outside CUDA graphs;
    * **communication**: two all-reduces per layer of the step's activations across TP
      ranks (none at TP 1);
    * **routed experts** of a mixture-of-experts model (:mod:`slotune.workers.sim.moe`, whose
      docstring states the assumptions): the group's tokens × top-k expert passes over
      this device's share (times the layout's imbalance or tile waste) against reading
      the experts the step touches, one more roofline group; and, across DP ranks, an
      all-gather and a reduce-scatter of the group's hidden states per MoE layer.
      The linear layers above are then the rest: attention, dense MLPs, shared experts.

    ``StepCost.compute_s`` and ``memory_s`` are the sums of the groups' compute and memory
    times, so ``max(compute, memory) <= total - overhead - communication`` and the
    difference is the time lost to imperfect overlap.
    """

    name = "roofline"

    def __init__(self, setup: HardwareSetup,
                 calibration: RooflineCalibration | None = None) -> None:
        super().__init__(setup)
        cal = self.cal = calibration or load_calibration(setup.gpu.name)
        m, gpu, tp = setup.model, setup.gpu, setup.tensor_parallel_size
        layers = m.num_layers
        fp8_cores = setup.weight_format == "fp8" and gpu.fp8_flops is not None
        gemm_eff = cal.fp8_gemm_efficiency if fp8_cores else cal.gemm_efficiency
        bf16_rate = gpu.bf16_flops * cal.gemm_efficiency
        mem_rate = gpu.memory_bandwidth * cal.memory_efficiency
        fp8_kv = setup.kv_bytes_per_element < 2.0
        kv_rate = gpu.memory_bandwidth * (cal.fp8_kv_efficiency if fp8_kv else cal.kv_efficiency)
        lm_head = m.vocab_size * m.hidden_size / tp
        moe, layout = m.moe, setup.expert_layout
        routed = m.active_routed_params
        body = (m.matmul_params - routed) / tp - (0 if m.tie_word_embeddings else lm_head)
        # Seconds per unit of work, so that step_cost is a handful of multiplications.
        self._k = cal.overlap_exponent
        self._body_c = 2.0 * body / (setup.gemm_flops * gemm_eff)
        self._body_m = body * setup.weight_bytes_per_param / mem_rate
        self._head_c = 2.0 * lm_head / bf16_rate
        self._head_m = lm_head * 2.0 / mem_rate
        mlp_width = m.intermediate_size if moe is None else (
            moe.experts_per_token * moe.expert_intermediate_size + moe.shared_intermediate_size)
        elementwise = 8 * m.hidden_size + 3 * mlp_width / tp
        self._elementwise_m = layers * elementwise * 2.0 / mem_rate
        self._pair_c = (4.0 * layers * (m.num_attention_heads / tp) * m.head_dim
                        / (gpu.bf16_flops * cal.attention_efficiency))
        kv_token = m.kv_bytes_per_token(setup.kv_bytes_per_element, tp)
        self._kv_prefill_m = kv_token / mem_rate
        self._kv_decode_m = kv_token / kv_rate
        self._attn_pass = cal.attention_overhead_per_layer_s * layers
        self._fixed = cal.step_overhead_s + cal.layer_overhead_s * layers + (
            cal.eager_overhead_per_layer_s * layers if setup.enforce_eager else 0.0
        )
        self._per_seq = cal.per_seq_overhead_s
        if tp > 1:
            allreduce_bytes = m.hidden_size * 2.0 * 2.0 * (tp - 1) / tp
            self._comm_fixed = 2 * layers * gpu.interconnect_latency_s
            self._comm_token = 2 * layers * allreduce_bytes / gpu.interconnect_bandwidth
        else:
            self._comm_fixed = self._comm_token = 0.0
        self._dp = dp = setup.data_parallel_size
        self._moe = moe
        self._expert_c = self._expert_m = self._dp_comm_fixed = self._dp_comm_token = 0.0
        if moe is not None and layout is not None:
            # Per group token: its top-k experts' FLOPs, this device's share of them.
            self._expert_c = (2.0 * routed * layout.compute_factor / layout.devices
                              / (setup.gemm_flops * gemm_eff))
            # Per touched expert (all MoE layers): the bytes this device holds of it.
            self._expert_m = (moe.num_moe_layers * moe.expert_params * m.hidden_size
                              * setup.weight_bytes_per_param * layout.weight_share
                              * moe.num_experts / mem_rate)
            if dp > 1:
                gathered = m.hidden_size * 2.0 * (dp - 1) / dp
                self._dp_comm_fixed = 2 * moe.num_moe_layers * gpu.interconnect_latency_s
                self._dp_comm_token = 2 * moe.num_moe_layers * gathered / (
                    gpu.interconnect_bandwidth)

    def _overlap(self, compute: float, memory: float) -> float:
        k = self._k
        return float((compute**k + memory**k) ** (1.0 / k))

    def step_cost(self, shape: StepShape) -> StepCost:
        tokens = shape.num_tokens
        if tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0)
        q = shape.decode_query_tokens
        sampled = shape.prefill_seqs + shape.decode_seqs * q
        body_c, body_m = tokens * self._body_c, self._body_m
        head_c, head_m = sampled * self._head_c, self._head_m
        elem_m = tokens * self._elementwise_m
        compute = body_c + head_c
        memory = body_m + head_m + elem_m
        busy = self._overlap(body_c, body_m) + self._overlap(head_c, head_m) + elem_m
        overhead = self._fixed + (shape.prefill_seqs + shape.decode_seqs) * self._per_seq
        if shape.prefill_tokens:
            attn_c = shape.prefill_attention_pairs * self._pair_c
            attn_m = (shape.prefill_context + shape.prefill_tokens) * self._kv_prefill_m
            compute += attn_c
            memory += attn_m
            busy += self._overlap(attn_c, attn_m)
            overhead += self._attn_pass
        if shape.decode_seqs:
            attn_c = shape.decode_context * q * self._pair_c
            attn_m = (shape.decode_context + shape.decode_seqs * q) * self._kv_decode_m
            compute += attn_c
            memory += attn_m
            busy += self._overlap(attn_c, attn_m)
            overhead += self._attn_pass
        comm = self._comm_fixed + tokens * self._comm_token if self._comm_token else 0.0
        if self._moe is not None:
            group = shape.group_tokens or tokens * self._dp
            expert_c = group * self._expert_c
            expert_m = experts_touched(self._moe, group) / self._moe.num_experts * self._expert_m
            compute += expert_c
            memory += expert_m
            busy += self._overlap(expert_c, expert_m)
            if self._dp_comm_token:
                comm += self._dp_comm_fixed + group * self._dp_comm_token
        return StepCost(busy + overhead + comm, compute, memory, overhead, comm)
