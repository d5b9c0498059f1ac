"""Cluster-mode rules of slotune.workers.trial.ray_worker, without Ray: GPU-type resources, log
excerpts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from slotune.workers.contracts import SLO, TrialSpec, Workload
from slotune.workers.trial.ray_worker import (
    GPU_TYPES_ENV,
    gpu_type_resource,
    log_excerpt,
    parse_gpu_types,
    redact_log,
    trial_options,
    trial_resources,
    uses_gpu_types,
)


def spec(engine: str = "sim", gpu: str = "rtx4090", **knobs: Any) -> TrialSpec:
    return TrialSpec(run_id="t", engine=engine, model="Qwen/Qwen2.5-7B-Instruct",
                     knobs=knobs, workload=Workload(), slo=SLO(ttft=300), gpu=gpu)


def test_sim_trials_ask_for_their_gpu_type_times_tensor_parallelism() -> None:
    assert trial_resources(spec(), {}) == {"gpu_type:rtx4090": 1.0}
    assert trial_resources(spec(gpu="h100-sxm", tensor_parallel_size=4), {}) == \
        {"gpu_type:h100-sxm": 4.0}
    # The map renames node labels for sim trials too.
    assert gpu_type_resource(spec(gpu="h100-sxm"), {"h100-sxm": "h100"}) == "gpu_type:h100"


def test_vllm_trials_ask_for_a_type_only_through_the_map(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GPU_TYPES_ENV, raising=False)
    assert trial_resources(spec("vllm", "h100-sxm")) == {}
    monkeypatch.setenv(GPU_TYPES_ENV, "h100-sxm=h100, a100-80g=a100")
    assert trial_resources(spec("vllm", "h100-sxm", tensor_parallel_size=2)) == \
        {"gpu_type:h100": 2.0}
    assert trial_resources(spec("vllm", "l40s")) == {}


def test_a_declared_map_asks_for_the_type_while_no_typed_node_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker groups scaled to zero (the Helm chart's GPU groups between sweeps): no node
    advertises a type, yet the trial's demand must name it, or an autoscaler with several
    GPU groups adds a node of any type and the trial runs on the wrong GPU. The operator's
    map says the nodes are typed; no Ray needs to be asked."""
    monkeypatch.setenv(GPU_TYPES_ENV, "h100-sxm=h100")
    options = trial_options(spec("vllm", "h100-sxm", tensor_parallel_size=2))
    assert options["num_gpus"] == 2 and options["resources"] == {"gpu_type:h100": 2.0}
    assert trial_options(spec("sim", "rtx4090"))["resources"] == {"gpu_type:rtx4090": 1.0}
    assert uses_gpu_types()


@pytest.mark.parametrize("text", ["h100", "=h100", "h100=", "a=b,c"])
def test_a_malformed_map_names_the_item(text: str) -> None:
    with pytest.raises(ValueError, match=GPU_TYPES_ENV):
        parse_gpu_types(text)


def test_log_excerpt_keeps_start_up_lines_and_the_end_within_the_cap(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    assert log_excerpt(log) is None
    log.write_text("")
    assert log_excerpt(log) is None
    log.write_text("GPU KV cache size: 1,000 tokens\nshort\n")
    assert log_excerpt(log) == "GPU KV cache size: 1,000 tokens\nshort\n"
    lines = ["GPU KV cache size: 52,000 tokens"] + [f"step {i} é" for i in range(5000)]
    log.write_text("\n".join(lines) + "\nthe last line\n")
    excerpt = log_excerpt(log, limit=4096)
    assert excerpt is not None and len(excerpt.encode()) <= 4096
    assert excerpt.startswith("GPU KV cache size: 52,000 tokens")
    assert excerpt.endswith("the last line") and "lines omitted" in excerpt


def test_the_stored_excerpt_carries_no_secret(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("HF_TOKEN=hf_abcdef123456 api key sk-flag-secret ok\n")
    s = spec(api_key="sk-flag-secret")
    excerpt = log_excerpt(log, redact=lambda text: redact_log(
        text, s, {"HF_TOKEN": "hf_abcdef123456", "PATH": "/usr/bin"}))
    assert excerpt == "HF_TOKEN=*** api key *** ok\n"


def test_cpu_trials_ask_ray_for_cpus_not_gpus() -> None:
    spec = TrialSpec(run_id="c", engine="vllm", model="m", device="cpu",
                     knobs={"tensor_parallel_size": 2}, workload=Workload(), slo=SLO(ttft=1))
    options = trial_options(spec)
    assert options["num_gpus"] == 0 and options["num_cpus"] == 2
    assert gpu_type_resource(spec, {"cpu": "cpu"}) is None


def test_a_warm_node_is_preferred_only_while_it_has_room() -> None:
    spec = TrialSpec(run_id="c", engine="vllm", model="m", device="cpu",
                     workload=Workload(), slo=SLO(ttft=1))
    assert "scheduling_strategy" not in trial_options(spec)
    node = "ab" * 28  # a Ray node id: 28 bytes, hex
    strategy = trial_options(spec, prefer_node=node)["scheduling_strategy"]
    assert isinstance(strategy, NodeAffinitySchedulingStrategy)
    # soft alone would wait for a busy node; spilling sends the trial elsewhere at once.
    assert (strategy.node_id, strategy.soft, strategy._spill_on_unavailable) == (
        node, True, True)
    assert trial_options(spec, prefer_node=node)["num_cpus"] == 1  # resources unchanged
