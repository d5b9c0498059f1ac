"""Any model from its config.json, any GPU from a datasheet file: parsing, resolution
(catalogue, local directory, Hugging Face cache), refusals, and the simulator using them."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slotune.workers.contracts import SLO, TrialSpec
from slotune.workers.engines.sim import SimEngine
from slotune.workers.loadgen.generate.workload_files import load_workload
from slotune.workers.sim import model_config
from slotune.workers.sim.calibration import load_calibration
from slotune.workers.sim.catalog import GiB, ModelSpec, UnknownCatalogEntry, get_gpu, get_model
from slotune.workers.sim.config import (
    add_engine_arguments,
    build_config,
    config_from_args,
    plan_memory,
)
from slotune.workers.sim.cost_model import HardwareSetup, RooflineCostModel, StepShape
from slotune.workers.sim.cost_registry import make_cost_model
from slotune.workers.sim.device_file import DeviceFileError
from slotune.workers.sim.model_config import ModelConfigError, model_spec_from_config
from slotune.workers.trial.virtual import run_virtual_trial

# Mistral-7B-v0.3's config.json (the fields the simulator reads): not in the catalogue.
MISTRAL_7B: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "intermediate_size": 14336, "vocab_size": 32768, "max_position_embeddings": 32768,
    "sliding_window": None, "torch_dtype": "bfloat16",
}

B200: dict[str, Any] = {
    "name": "b200", "device_name": "NVIDIA B200", "memory_gib": 180, "bf16_tflops": 2250,
    "fp8_tflops": 4500, "memory_bandwidth_gbps": 8000, "interconnect_gbps": 900,
}


def model_dir(root: Path, config: dict[str, Any], name: str = "model") -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def device_file(root: Path, data: dict[str, Any], name: str = "b200.yaml") -> Path:
    path = root / name
    path.write_text(yaml.safe_dump(data) if name.endswith((".yaml", ".yml"))
                    else json.dumps(data), encoding="utf-8")
    return path


def small_trial(model: str, gpu: str, n: int = 20) -> TrialSpec:
    workload, _ = load_workload("lab")
    workload = workload.model_copy(update={
        "num_prompts": n, "warmup_requests": 0,
        "arrivals": workload.arrivals.model_copy(update={"request_rate": 2.0})})
    return TrialSpec(run_id="t", engine="sim", model=model, knobs={},
                     engine_args={"max_model_len": 4096}, workload=workload,
                     slo=SLO(ttft=300, tpot=50), gpu=gpu)


# --- the catalogue: config.json facts like any other model -------------------------------


_QWEN25 = dict(head_dim=128, vocab_size=152064, max_position_embeddings=32768, qkv_bias=True)
_LLAMA31 = dict(num_kv_heads=8, head_dim=128, vocab_size=128256,
                max_position_embeddings=131072)
CATALOGUE = [
    ModelSpec("Qwen/Qwen2.5-7B-Instruct", hidden_size=3584, num_layers=28,
              num_attention_heads=28, num_kv_heads=4, intermediate_size=18944,
              aliases=("Qwen/Qwen2.5-7B",), **_QWEN25),  # type: ignore[arg-type]
    ModelSpec("Qwen/Qwen2.5-32B-Instruct", hidden_size=5120, num_layers=64,
              num_attention_heads=40, num_kv_heads=8, intermediate_size=27648,
              aliases=("Qwen/Qwen2.5-32B",), **_QWEN25),  # type: ignore[arg-type]
    ModelSpec("Qwen/Qwen3-8B", hidden_size=4096, num_layers=36, num_attention_heads=32,
              num_kv_heads=8, head_dim=128, intermediate_size=12288, vocab_size=151936,
              max_position_embeddings=40960, aliases=("Qwen/Qwen3-8B-Base",)),
    ModelSpec("meta-llama/Llama-3.1-8B-Instruct", hidden_size=4096, num_layers=32,
              num_attention_heads=32, intermediate_size=14336,
              aliases=("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B",
                       "meta-llama/Meta-Llama-3.1-8B-Instruct"),
              **_LLAMA31),  # type: ignore[arg-type]
    ModelSpec("meta-llama/Llama-3.1-70B-Instruct", hidden_size=8192, num_layers=80,
              num_attention_heads=64, intermediate_size=28672,
              aliases=("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B",
                       "meta-llama/Meta-Llama-3.1-70B-Instruct"),
              **_LLAMA31),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("expected", CATALOGUE, ids=lambda m: m.name)
def test_catalogue_models_parse_from_their_config_json_to_the_same_facts(
        expected: ModelSpec) -> None:
    assert get_model(expected.name) == expected
    assert get_model(expected.aliases[0].upper()) == expected


def test_catalogue_parameter_counts_are_the_published_ones() -> None:
    params = {name: get_model(name).params for name in (
        "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-70B-Instruct")}
    assert params == {"Qwen/Qwen2.5-7B-Instruct": 7_615_616_512,
                      "Qwen/Qwen3-8B": 8_190_726_144,
                      "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248,
                      "meta-llama/Llama-3.1-70B-Instruct": 70_553_706_496}


# --- a model outside the catalogue -------------------------------------------------------


def test_a_local_directory_runs_through_build_config_and_a_virtual_trial(
        tmp_path: Path) -> None:
    directory = model_dir(tmp_path, MISTRAL_7B, "mistral-7b")
    model = get_model(str(directory))
    assert model.name == str(directory)  # named by the path as given
    assert (model.num_kv_heads, model.head_dim, model.tie_word_embeddings,
            model.qkv_bias) == (8, 128, False, False)
    assert model.params == 7_248_023_552  # Mistral-7B-v0.3's published count
    config = build_config(str(directory), sim_gpu="h100-sxm")
    assert config.model == model and config.max_model_len == 32768
    assert plan_memory(config).kv_tokens > 100_000
    result = run_virtual_trial(small_trial(str(directory), "h100-sxm"))
    assert result.status == "ok" and result.objective > 0, result.failure_message
    assert result.engine.resolved_config["max_model_len"] == 4096


def test_a_relative_or_home_path_is_a_directory_too(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    model_dir(tmp_path, MISTRAL_7B, "m")
    monkeypatch.chdir(tmp_path)
    assert get_model("./m").name == "./m" and get_model("./m").vocab_size == 32768
    monkeypatch.setenv("HOME", str(tmp_path))
    assert get_model("~/m").hidden_size == 4096


def test_family_defaults_follow_hugging_face() -> None:
    base = {k: v for k, v in MISTRAL_7B.items() if k != "num_key_value_heads"}
    qwen3 = model_spec_from_config({**base, "model_type": "qwen3", "hidden_size": 2048},
                                   name="q", source="test")
    # Qwen3Config's head_dim default is 128, not hidden // heads (64); no KV heads: MHA.
    assert (qwen3.head_dim, qwen3.num_kv_heads, qwen3.qkv_bias) == (128, 32, False)
    gemma = model_spec_from_config({**base, "model_type": "gemma2"}, name="g", source="test")
    assert gemma.tie_word_embeddings and gemma.head_dim == 256
    assert model_spec_from_config({**base, "model_type": "qwen2"}, name="q",
                                  source="test").qkv_bias  # q/k/v biases, always
    llama = model_spec_from_config({**base, "model_type": "llama", "attention_bias": True},
                                   name="l", source="test")
    assert llama.qkv_bias and not llama.tie_word_embeddings and llama.head_dim == 128


def test_a_hugging_face_name_resolves_from_the_local_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--Mistral-Clone-7B"
    model_dir(repo / "snapshots", MISTRAL_7B, commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit + "\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    model = get_model("acme/Mistral-Clone-7B")
    assert model.name == "acme/Mistral-Clone-7B" and model.params == 7_248_023_552
    # $HF_HOME/hub when HF_HUB_CACHE is unset
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert get_model("acme/Mistral-Clone-7B").vocab_size == 32768
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(UnknownCatalogEntry) as info:
        get_model("acme/Mistral-Clone-7B")
    message = str(info.value)
    assert "Qwen/Qwen3-8B" in message and "config.json" in message
    assert str(tmp_path / "elsewhere" / "hub") in message


# --- refusals ----------------------------------------------------------------------------


def test_a_missing_field_is_refused_naming_it_and_the_file(tmp_path: Path) -> None:
    directory = model_dir(tmp_path, {k: v for k, v in MISTRAL_7B.items()
                                     if k != "intermediate_size"})
    with pytest.raises(ModelConfigError) as info:
        get_model(str(directory))
    assert "lacks 'intermediate_size'" in str(info.value) and str(directory) in str(info.value)
    # the same refusal ends a trial as an invalid configuration, with the same words
    result = run_virtual_trial(small_trial(str(directory), "h100-sxm"))
    assert result.failure == "invalid_config"
    assert "lacks 'intermediate_size'" in (result.failure_message or "")


# --- mixture-of-experts models -----------------------------------------------------------


def test_moe_catalogue_models_count_every_expert_resident_and_the_active_ones_per_token() -> None:
    # Published: Qwen3-30B-A3B "30.5B in total and 3.3B activated" (its model card);
    # Mixtral 8x7B "46.7B total parameters but only uses 12.9B per token" (Mistral AI).
    for name, total, active in (("Qwen/Qwen3-30B-A3B", 30.5e9, 3.3e9),
                                ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7e9, 12.9e9)):
        model = get_model(name)
        assert model.params == pytest.approx(total, rel=0.003), name
        assert model.active_params == pytest.approx(active, rel=0.02), name
    qwen = get_model("Qwen/Qwen3-30B-A3B").moe
    assert qwen is not None and (qwen.num_experts, qwen.experts_per_token,
                                 qwen.expert_intermediate_size, qwen.num_moe_layers,
                                 qwen.shared_intermediate_size) == (128, 8, 768, 48, 0)
    assert get_model("Qwen/Qwen3-8B").moe is None


def get_model_config(name: str) -> dict[str, Any]:
    """A catalogue model's config.json as the catalogue ships it."""
    entries = json.loads((Path(model_config.__file__).parent / "models.json").read_text())
    return next(e["config"] for e in entries["models"] if e["name"] == name)


# Qwen1.5-MoE-A2.7B's config.json (Qwen2-MoE: one shared expert of 5632), published 14.3B.
QWEN2_MOE: dict[str, Any] = {
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
    "max_position_embeddings": 8192, "tie_word_embeddings": False,
}
# GLM-4.5-Air's config.json: DeepSeek-style expert fields, grouped attention.
GLM45_AIR: dict[str, Any] = {
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 4096,
    "num_hidden_layers": 46, "num_attention_heads": 96, "num_key_value_heads": 8,
    "head_dim": 128, "attention_bias": True, "intermediate_size": 10944,
    "moe_intermediate_size": 1408, "n_routed_experts": 128, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 1, "vocab_size": 151552,
    "max_position_embeddings": 131072, "tie_word_embeddings": False,
}


def test_qwen2_moe_and_deepseek_style_fields_are_read(tmp_path: Path) -> None:
    qwen2 = get_model(str(model_dir(tmp_path, QWEN2_MOE, "qwen15-moe")))
    assert qwen2.moe is not None and qwen2.moe.shared_intermediate_size == 5632
    assert qwen2.params == pytest.approx(14.3e9, rel=0.01)  # its model card's 14.3B
    assert qwen2.active_params == pytest.approx(2.7e9, rel=0.03)  # "A2.7B"
    glm = get_model(str(model_dir(tmp_path, GLM45_AIR, "glm-air")))
    assert glm.moe is not None
    # the first layer is dense (first_k_dense_replace), the shared expert is one expert wide
    assert (glm.moe.num_moe_layers, glm.moe.shared_intermediate_size) == (45, 1408)
    assert glm.params == pytest.approx(106e9, rel=0.03)  # "106B total, 12B active"
    sparse = get_model(str(model_dir(tmp_path, {**QWEN2_MOE, "decoder_sparse_step": 2,
                                                "mlp_only_layers": [1]}, "sparse")))
    # odd layers are MoE (i + 1 divisible by 2), but layer 1 is listed dense
    assert sparse.moe is not None and sparse.moe.num_moe_layers == 11
    # transformers 5 saves Qwen3-MoE's experts as num_local_experts: the same model
    published = {k: v for k, v in get_model_config("Qwen/Qwen3-30B-A3B").items()}
    saved = {**{k: v for k, v in published.items() if k != "num_experts"},
             "num_local_experts": published["num_experts"]}
    assert get_model(str(model_dir(tmp_path, saved, "v5"))).moe == get_model(
        "Qwen/Qwen3-30B-A3B").moe


@pytest.mark.parametrize(("config", "field"), [
    ({**MISTRAL_7B, "model_type": "mixtral", "num_local_experts": 8}, "num_experts_per_tok"),
    ({**QWEN2_MOE, "moe_intermediate_size": None}, "moe_intermediate_size"),
    ({**QWEN2_MOE, "num_experts_per_tok": 61}, "num_experts_per_tok (61) exceeds num_experts"),
    ({**GLM45_AIR, "model_type": "deepseek_v3", "kv_lora_rank": 512}, "kv_lora_rank"),
    ({**MISTRAL_7B, "model_type": "gpt_oss", "num_local_experts": 32}, "num_local_experts"),
    ({**MISTRAL_7B, "num_local_experts": 8}, "model_type 'mistral' is not a mixture-of-experts"),
    ({**QWEN2_MOE, "decoder_sparse_step": 100}, "no layer uses them"),
])
def test_what_cannot_be_modelled_of_a_moe_config_is_refused_naming_the_field(
        tmp_path: Path, config: dict[str, Any], field: str) -> None:
    directory = model_dir(tmp_path, config)
    with pytest.raises(ModelConfigError, match=re.escape(field)):
        build_config(str(directory))


def test_an_unknown_model_type_is_refused_listing_the_supported_ones(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as info:
        get_model(str(model_dir(tmp_path, {**MISTRAL_7B, "model_type": "gpt2"})))
    assert "'gpt2'" in str(info.value)
    assert ("gemma, gemma2, gemma3_text, glm4_moe, llama, mistral, mixtral, qwen2, qwen2_moe, "
            "qwen3, qwen3_moe") in str(info.value)


def test_a_directory_without_config_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"has no config\.json"):
        get_model(str(tmp_path))
    with pytest.raises(ModelConfigError, match="must be a positive integer"):
        get_model(str(model_dir(tmp_path, {**MISTRAL_7B, "hidden_size": -1}, "neg")))


# --- a GPU from a datasheet file ---------------------------------------------------------


def test_a_device_file_is_a_gpu_for_build_config_and_the_engine(tmp_path: Path) -> None:
    path = str(device_file(tmp_path, B200))
    gpu = get_gpu(path)
    assert (gpu.name, gpu.device_name, gpu.memory_bytes) == ("b200", "NVIDIA B200", 180 * GiB)
    assert (gpu.bf16_flops, gpu.fp8_flops, gpu.memory_bandwidth) == (2250e12, 4500e12, 8000e9)
    assert gpu.interconnect_latency_s == pytest.approx(6e-6)  # NVLink-class default
    assert get_gpu(str(device_file(tmp_path, B200, "b200.json"))) == gpu  # JSON too
    config = build_config("Qwen/Qwen2.5-7B-Instruct", sim_gpu=path)
    assert config.gpu == gpu and (config.max_num_batched_tokens, config.max_num_seqs) == (
        8192, 1024)  # vLLM's large-GPU defaults: the file's 180 GiB
    h100 = plan_memory(build_config("Qwen/Qwen2.5-7B-Instruct", sim_gpu="h100-sxm"))
    assert plan_memory(config).kv_tokens > 2 * h100.kv_tokens
    # the engine process takes it as --sim-gpu
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    args = parser.parse_args(["Qwen/Qwen2.5-7B-Instruct", "--sim-gpu", path])
    assert config_from_args(args).gpu == gpu
    spec = small_trial("Qwen/Qwen2.5-7B-Instruct", path)
    assert SimEngine.gpu_type(spec, {}) == "b200"  # placed by the file's name, not its path
    facts = SimEngine(spec, tmp_path).hardware_facts(None)  # type: ignore[arg-type]
    assert facts["gpu_memory_bytes"] == 180 * GiB and facts["gpu_name"].startswith("NVIDIA B200")


def test_memory_bandwidth_from_the_file_moves_decode_steps(tmp_path: Path) -> None:
    model = get_model("meta-llama/Llama-3.1-70B-Instruct")
    slow = get_gpu(str(device_file(tmp_path, B200, "slow.yaml")))
    fast = get_gpu(str(device_file(tmp_path, {**B200, "memory_bandwidth_gbps": 16000},
                                   "fast.yaml")))

    def step(gpu: Any, shape: StepShape) -> float:
        return make_cost_model("roofline", HardwareSetup(model, gpu)).step_time(shape)

    decode = StepShape.uniform(0, 8, 1024)  # streams 140 GB of weights for 8 tokens
    ratio = step(fast, decode) / step(slow, decode)
    assert 0.45 < ratio < 0.7
    prefill = StepShape.uniform(8192, 0, 0)  # compute-bound: bandwidth barely matters
    assert step(fast, prefill) / step(slow, prefill) > 0.85
    # an uncalibrated device takes the default calibration entry
    cost = make_cost_model("roofline", HardwareSetup(model, slow))
    assert isinstance(cost, RooflineCostModel) and cost.cal == load_calibration("default")


@pytest.mark.parametrize(("change", "fragment"), [
    ({"bf16_tflops": -5}, "bf16_tflops must be a positive number, got -5"),
    ({"memory_bandwidth_gbps": "fast"}, "memory_bandwidth_gbps must be a positive number"),
    ({"interconnect_gbps": None}, "lacks 'interconnect_gbps'"),
    ({"memory_gib": None}, "memory_gib or memory_bytes"),
    ({"memory_bytes": 10**11}, "not both"),
    ({"bandwith_gbps": 1}, "unknown field 'bandwith_gbps'"),
    ({"name": "B200 SXM"}, "name must be a short name"),
])
def test_a_bad_device_file_is_refused_naming_the_field_and_file(
        tmp_path: Path, change: dict[str, Any], fragment: str) -> None:
    path = device_file(tmp_path, {**B200, **change})
    with pytest.raises(DeviceFileError) as info:
        get_gpu(str(path))
    assert fragment in str(info.value) and str(path) in str(info.value)


def test_a_missing_device_file_or_unknown_gpu_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DeviceFileError, match="does not exist"):
        get_gpu(str(tmp_path / "nope.yaml"))
    with pytest.raises(UnknownCatalogEntry, match="device file"):
        get_gpu("b200")


@pytest.mark.parametrize(("config", "says"), [
    ({**QWEN2_MOE, "num_experts": 0}, "num_experts must be a positive integer, got 0"),
    ({**MISTRAL_7B, "model_type": "mixtral", "num_local_experts": 0, "num_experts_per_tok": 2},
     "num_local_experts must be a positive integer, got 0"),
    ({**MISTRAL_7B, "num_experts": 0}, "num_experts must be a positive integer, got 0"),
    ({**QWEN2_MOE, "num_experts": "60"}, "num_experts must be a positive integer, got '60'"),
    ({**MISTRAL_7B, "torch_dtype": "int3"},
     "torch_dtype 'int3' is not a dtype vLLM serves; valid: bfloat16, float16, float32"),
    ({**MISTRAL_7B, "torch_dtype": None, "dtype": "int3"}, "dtype 'int3'"),
    ({**MISTRAL_7B, "torch_dtype": 16}, "torch_dtype 16 is not a dtype"),
])
def test_an_impossible_expert_count_or_dtype_is_refused_naming_the_field(
        tmp_path: Path, config: dict[str, Any], says: str) -> None:
    """Issue 38: ``num_experts: 0`` (a MoE model without experts, priced as dense) and
    ``torch_dtype: int3`` were accepted silently."""
    directory = model_dir(tmp_path, config)
    with pytest.raises(ModelConfigError, match=re.escape(says)) as info:
        get_model(str(directory))
    assert "config.json" in str(info.value)


def test_the_dtypes_of_published_configs_are_accepted(tmp_path: Path) -> None:
    for i, dtype in enumerate(("bfloat16", "float16", "float32", "half", "float")):
        assert get_model(str(model_dir(tmp_path, {**MISTRAL_7B, "torch_dtype": dtype},
                                       f"m{i}"))).hidden_size == 4096
    assert get_model(str(model_dir(tmp_path, {**MISTRAL_7B, "torch_dtype": None,
                                              "dtype": "bfloat16"}, "v5"))).hidden_size == 4096


@pytest.mark.parametrize(("change", "fragment"), [
    ({"memory_gib": 1e8}, "memory_gib must be at most 16384"),
    ({"memory_gib": None, "memory_bytes": 10**30}, "memory_bytes must be at most"),
    ({"memory_gib": 0.01}, "memory_gib must be at least 0.5"),
    ({"bf16_tflops": 1e9}, "bf16_tflops must be at most 100000"),
    ({"fp8_tflops": 1e12}, "fp8_tflops must be at most 200000"),
    ({"memory_bandwidth_gbps": 1e9}, "memory_bandwidth_gbps must be at most 100000"),
    ({"interconnect_gbps": 1e9}, "interconnect_gbps must be at most 100000"),
    ({"interconnect_latency_us": 1e12}, "interconnect_latency_us must be at most 100000"),
])
def test_datasheet_numbers_out_of_any_gpus_range_are_refused(
        tmp_path: Path, change: dict[str, Any], fragment: str) -> None:
    """Issue 38: ``memory_gib: 1e8`` was accepted and the engine ended in a bare
    MemoryError; each number is bounded, and the message says the range and the unit."""
    path = device_file(tmp_path, {**B200, **change})
    with pytest.raises(DeviceFileError, match=re.escape(fragment)) as info:
        get_gpu(str(path))
    assert "got " in str(info.value)
    # A trial on it is a configuration the engine refuses, with the same sentence.
    result = run_virtual_trial(small_trial("Qwen/Qwen2.5-7B-Instruct", str(path)))
    assert (result.status, result.failure) == ("failed", "invalid_config")
    assert fragment in (result.failure_message or "")
