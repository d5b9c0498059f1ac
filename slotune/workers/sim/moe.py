"""Mixture-of-experts layers across tensor, data and expert parallel ranks: the assumptions.

What the simulator (and so the twin) assumes of a MoE model served by vLLM 0.32 with
``--tensor-parallel-size TP --data-parallel-size DP [--enable-expert-parallel]``, and
where each assumption comes from. :mod:`slotune.workers.sim.cost_model` prices a step with
:class:`ExpertLayout`; :mod:`slotune.workers.sim.config` sizes memory with it;
:mod:`slotune.workers.sim.data_parallel` runs the DP ranks.

* **Where the experts live** (vLLM's ``FusedMoEParallelConfig.make``): the MoE layers
  of all DP × TP devices form one group. Without expert parallelism every routed expert
  is sharded across all of them (``flatten_tp_across_dp``: each holds 1/(TP·DP) of every
  expert's intermediate width, and vLLM's ``FusedMoEConfig`` asserts that the width
  divides); with ``--enable-expert-parallel`` the EP size is TP × DP and each device
  holds whole experts, distributed as evenly as possible (``determine_expert_map``:
  the first ``E mod EP`` ranks hold one more). Attention, dense MLPs, shared experts,
  routers and embeddings are sharded over TP and replicated across DP ranks. Every
  expert's weights are resident; a token's GEMMs touch only its top-k experts.
* **Weights read per step.** A step reads each routed expert some token of the group
  is sent to. With uniform routing, a batch of T tokens choosing k of E experts
  touches ``E · (1 - (1 - k/E)^T)`` of them on average (:func:`experts_touched`): a
  small decode batch reads a fraction of the experts, a large prefill reads all.
* **Compute.** The group's tokens × k expert passes are spread over the TP·DP devices.
  Without EP each device multiplies every token by its slice of the expert; a slice
  narrower than one GEMM tile (:data:`GEMM_TILE_N`, the ``BLOCK_SIZE_N`` of vLLM's
  Triton fused-MoE configurations) still costs the whole tile. With EP each device runs
  its own experts for the tokens routed to them, and the busiest device sets the pace:
  its share is the mean times :func:`expert_load_imbalance`.
* **Expert load imbalance** is a documented, seeded factor: each expert's popularity is
  drawn from a log-normal of σ = :data:`ROUTING_SKEW` (seeded by the engine's seed and
  the expert count, so a configuration's reruns agree), experts are placed on ranks in
  contiguous blocks (vLLM's default ``linear`` placement), and the factor is the busiest
  rank's share of the routing over the mean share. σ = 0.35 gives 1.0-1.05× at EP 2,
  1.0-1.1× at EP 4 and 1.1-1.2× at EP 8 on 128 experts (more on few experts: Mixtral's 8
  at EP 8 give 1.2-1.5×). An assumption, not a measurement: it stands for a skew that
  is real (the reason vLLM ships EPLB) at a size nobody has published for these models;
  no EPLB rebalancing is modelled.
* **Dispatch and combine.** vLLM 0.32's default all-to-all backend
  (``allgather_reducescatter``) all-gathers the group's hidden states across the DP
  ranks before each MoE layer and reduce-scatters the experts' output after it, with or
  without EP: per MoE layer two collectives over the device's interconnect, each moving
  ``(DP - 1)/DP`` of the group's ``tokens × hidden × 2`` bytes, each paying the
  interconnect's latency. Within a DP rank the TP all-reduces are priced as for a dense
  model. DeepEP/pplx backends (a true all-to-all of k copies) are not modelled.
* **Data-parallel ranks** are independent schedulers behind one API server
  (:mod:`slotune.workers.sim.data_parallel`), but a MoE model's ranks step in lockstep: vLLM runs
  a dummy batch on an idle rank so the group's collectives line up, so a step lasts as
  long as its slowest rank. Dense models' ranks are modelled in lockstep too (in vLLM
  they are not; that costs a dense DP layout a little).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import cache

from slotune.workers.sim._specs import MoESpec

__all__ = ["GEMM_TILE_N", "ROUTING_SKEW", "ExpertLayout", "expert_layout",
           "expert_load_imbalance", "experts_touched"]

GEMM_TILE_N = 128
"""The N tile of vLLM's Triton fused-MoE GEMMs (``BLOCK_SIZE_N`` 64-256 in its tuned
configurations; 128 the common one): a shard's width is paid in whole tiles."""
ROUTING_SKEW = 0.35
"""σ of the log-normal popularity of experts (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """How one MoE model's routed experts sit on the devices of one replica."""

    devices: int
    """Devices the experts are spread over: TP × DP."""
    expert_parallel: bool
    weight_share: float
    """Share of all routed experts' weights the busiest device holds."""
    compute_factor: float
    """Multiplier on a device's mean share of expert FLOPs: the busiest EP rank's
    imbalance, or the tile waste of narrow TP shards."""


def expert_layout(moe: MoESpec, tensor_parallel_size: int, data_parallel_size: int,
                  expert_parallel: bool, seed: int = 0) -> ExpertLayout:
    """Where the experts go for this layout (the module docstring's rules)."""
    devices = tensor_parallel_size * data_parallel_size
    if expert_parallel and devices > 1:
        busiest = math.ceil(moe.num_experts / devices)
        return ExpertLayout(devices, True, busiest / moe.num_experts,
                            expert_load_imbalance(moe.num_experts, devices, seed))
    width = moe.expert_intermediate_size / devices
    waste = math.ceil(width / GEMM_TILE_N) * GEMM_TILE_N / width
    return ExpertLayout(devices, False, 1.0 / devices, waste)


@cache
def expert_load_imbalance(num_experts: int, ep_size: int, seed: int = 0) -> float:
    """The busiest EP rank's share of the routing over the mean share (≥ 1; 1 at EP 1)."""
    if ep_size <= 1:
        return 1.0
    rng = random.Random(seed * 1_000_003 + num_experts)
    popularity = [rng.lognormvariate(0.0, ROUTING_SKEW) for _ in range(num_experts)]
    total = sum(popularity)
    base, extra = divmod(num_experts, ep_size)
    loads, start = [], 0
    for rank in range(ep_size):
        count = base + (1 if rank < extra else 0)
        loads.append(sum(popularity[start:start + count]))
        start += count
    return max(loads) / (total / ep_size)


def experts_touched(moe: MoESpec, tokens: float) -> float:
    """Expected routed experts a step of ``tokens`` sends at least one token to (per layer)."""
    if tokens <= 0:
        return 0.0
    e = moe.num_experts
    return float(e * (1.0 - (1.0 - moe.experts_per_token / e) ** tokens))
