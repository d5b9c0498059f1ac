"""Search spaces: loading, errors that name file and field, rules, grid, trial specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from slotune.tuner.spaces import (
    BUILTIN_RULES,
    KNOB_TYPES,
    Rule,
    RuleError,
    SpaceError,
    load_space,
    parse_space,
)
from slotune.tuner.sweep.request import stored_space
from slotune.workers.engines.sim import SimOptions
from slotune.workers.engines.vllm import VllmOptions
from slotune.workers.loadgen.generate.workload_files import load_workload
from slotune.workers.trial.virtual import run_virtual_trial
from tests.support.paths import FIXTURES, REPO

SHIPPED = sorted(p.stem for p in (REPO / "search_spaces").glob(
    "*.yaml"))

MINIMAL = {
    "name": "t",
    "model": "Qwen/Qwen2.5-7B-Instruct",
    "gpu": "rtx4090",
    "fixed": {"max_model_len": 4096},
    "knobs": {
        "max_num_seqs": {"type": "values", "values": [64, 256, 1024], "default": 256},
        "max_num_batched_tokens": {"type": "values", "values": [128, 2048], "default": 2048},
        "enable_chunked_prefill": {"type": "bool", "default": True},
    },
}


def write(tmp_path: Path, data: object, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_shipped_spaces_load_and_their_defaults_obey_the_rules() -> None:
    assert {"lab", "h100", "h200-tp", "prefill-bound", "decode-bound", "kv-bound"} <= set(SHIPPED)
    for name in SHIPPED:
        space = load_space(name)
        assert space.check(space.defaults()) is None, name
        assert space.is_finite() and space.grid_size() > 1
        spec = space.to_trial_spec(space.defaults(), "t0")
        assert spec.gpu == space.gpu and spec.model == space.model


def test_builtin_rules_are_checked_with_the_rule_text() -> None:
    space = parse_space(MINIMAL)
    assert space.rules[: len(BUILTIN_RULES)] == BUILTIN_RULES
    bad = {"max_num_seqs": 256, "max_num_batched_tokens": 128, "enable_chunked_prefill": True}
    assert space.check(bad) == "max_num_batched_tokens >= max_num_seqs"
    # chunked prefill off: the token budget must cover max_model_len (fixed at 4096)
    off = {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "enable_chunked_prefill": False}
    assert space.check(off) is not None and "max_model_len" in str(space.check(off))
    assert space.check({**off, "enable_chunked_prefill": True}) is None


def test_user_rules_join_the_builtin_ones() -> None:
    space = parse_space({**MINIMAL, "constraints": ["max_num_seqs * 2 <= 1024 or not true"]})
    assert space.check({"max_num_seqs": 1024, "max_num_batched_tokens": 2048}) == (
        "max_num_seqs * 2 <= 1024 or not true")
    assert space.check({"max_num_seqs": 256, "max_num_batched_tokens": 2048}) is None


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "max_num_seqs.real > 1",
                                  "[x for x in ()]", "max_num_seqs > 'a'", "lambda: 1"])
def test_rules_outside_the_tiny_language_are_refused(text: str) -> None:
    with pytest.raises(RuleError, match=r"allowed|does not parse"):
        Rule.parse(text)


def test_rule_naming_an_unknown_knob_lists_the_valid_names(tmp_path: Path) -> None:
    path = write(tmp_path, {**MINIMAL, "constraints": ["max_num_seqz > 1"]})
    with pytest.raises(SpaceError) as err:
        load_space(path)
    assert str(path) in str(err.value) and "max_num_seqz" in str(err.value)
    assert "max_num_seqs" in str(err.value)


def test_unknown_knob_type_names_file_field_and_valid_types(tmp_path: Path) -> None:
    data = {**MINIMAL, "knobs": {"max_num_seqs": {"type": "integer", "low": 1, "high": 8}}}
    path = write(tmp_path, data)
    with pytest.raises(SpaceError) as err:
        load_space(path)
    text = str(err.value)
    assert str(path) in text and "knobs.max_num_seqs" in text
    assert all(t in text for t in KNOB_TYPES)


def test_default_outside_the_values_is_an_error() -> None:
    data = {**MINIMAL, "knobs": {"max_num_seqs": {"type": "values", "values": [1, 2],
                                                  "default": 3}}}
    with pytest.raises(SpaceError, match="default 3 is not one of its values"):
        parse_space(data)


def test_unknown_space_name_lists_shipped_ones() -> None:
    with pytest.raises(SpaceError) as err:
        load_space("no-such-space")
    assert "lab" in str(err.value)


def test_grid_walks_in_natural_order_and_refuses_continuous_knobs() -> None:
    space = parse_space(MINIMAL)
    grid = list(space.grid())
    assert len(grid) == space.grid_size() == 3 * 2 * 2
    assert grid[0] == {"max_num_seqs": 64, "max_num_batched_tokens": 128,
                       "enable_chunked_prefill": False}
    assert grid[1]["enable_chunked_prefill"] is True  # the last knob turns fastest
    cont = parse_space({**MINIMAL, "knobs": {
        "gpu_memory_utilization": {"type": "float", "low": 0.8, "high": 0.95}}})
    with pytest.raises(SpaceError, match="continuous"):
        list(cont.grid())
    stepped = parse_space({**MINIMAL, "knobs": {
        "max_num_seqs": {"type": "log", "low": 16, "high": 128, "integer": True}}})
    assert stepped.choices("max_num_seqs") == [16, 32, 64, 128]


def test_to_trial_spec_merges_fixed_args_and_knobs() -> None:
    space = load_space("lab")
    params = {**space.defaults(), "max_num_seqs": 64}
    spec = space.to_trial_spec(params, "trial-7", slo="ttft:200", mode="capacity")
    assert spec.run_id == "trial-7"
    assert spec.engine_flags["max_num_seqs"] == 64
    assert spec.engine_flags["max_model_len"] == space.fixed["max_model_len"]
    assert spec.slo.ttft == 200 and spec.slo.tpot is None and spec.mode == "capacity"
    assert spec.workload == space.resolve_workload()
    assert space.to_trial_spec(params, "t", workload="lab").workload.name == "lab"
    with pytest.raises(SpaceError, match="not a knob"):
        space.to_trial_spec({"max_num_seqz": 1}, "t")


def test_bad_slo_text_is_refused_at_load() -> None:
    with pytest.raises(SpaceError, match="slo"):
        parse_space({**MINIMAL, "slo": "ttfx:300"})


def _vllm_space(**changes: object) -> dict[str, object]:
    return {**MINIMAL, "engine": "vllm", **changes}


def test_vllm_spaces_take_the_cpu_and_gpu_kinds_the_simulator_does_not_model() -> None:
    cpu = parse_space(_vllm_space(gpu="cpu"))
    spec = cpu.to_trial_spec(cpu.defaults(), "t")
    assert spec.device == "cpu" and spec.engine == "vllm"
    assert parse_space(_vllm_space(gpu="b200")).to_trial_spec({}, "t").device == "gpu"
    with pytest.raises(SpaceError, match="simulated engine models catalogue GPUs"):
        parse_space({**MINIMAL, "gpu": "cpu"})
    with pytest.raises(SpaceError, match="not a name"):
        parse_space(_vllm_space(gpu="H100 SXM; rm -rf"))
    # The simulator's options on a vLLM space say nothing: refused, before anything runs.
    with pytest.raises(SpaceError, match="options of the simulated engine"):
        parse_space(_vllm_space(gpu="cpu", sim={"time_scale": 4}))


def test_a_space_that_gives_its_gpu_as_sim_gpu_still_loads() -> None:
    space = parse_space({k: v for k, v in MINIMAL.items() if k != "gpu"}
                        | {"sim": {"gpu": "l40s", "time_scale": 2}})
    spec = space.to_trial_spec(space.defaults(), "t")
    assert space.gpu == spec.gpu == "l40s" and spec.options == SimOptions(time_scale=2)
    with pytest.raises(SpaceError, match="disagree"):
        parse_space({**MINIMAL, "sim": {"gpu": "l40s"}})


def test_engine_binary_and_a_local_model_directory(tmp_path: Path) -> None:
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    path = write(tmp_path, _vllm_space(model="./models/tiny", engine_binary="/opt/v/bin/vllm"))
    space = load_space(path)
    assert space.model == str(model.resolve())  # relative to the space file, stored absolute
    spec = space.to_trial_spec(space.defaults(), "t")
    assert spec.model == str(model.resolve())
    assert spec.options == VllmOptions(engine_binary="/opt/v/bin/vllm")
    with pytest.raises(SpaceError, match=r"has no config\.json"):
        load_space(write(tmp_path, _vllm_space(model="./models/missing"), "bad.yaml"))
    with pytest.raises(SpaceError, match="engine_binary is for engine: vllm"):
        parse_space({**MINIMAL, "engine_binary": "/opt/v/bin/vllm"})
    # A Hugging Face name stays a name; an absolute path names a directory on the workers.
    assert parse_space(_vllm_space(model="/models/llama")).model == "/models/llama"


# --- simulated spaces: any model directory, any device file ------------------------------


TINY_QWEN3 = {"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 3072, "vocab_size": 151936,
              "max_position_embeddings": 8192, "tie_word_embeddings": True}
B200 = {"name": "b200", "device_name": "NVIDIA B200", "memory_gib": 180, "bf16_tflops": 2250,
        "fp8_tflops": 4500, "memory_bandwidth_gbps": 8000, "interconnect_gbps": 900}


def _sim_files(tmp_path: Path, config: dict[str, object] | None = None,
               device: dict[str, object] | None = None) -> None:
    model = tmp_path / "models" / "tiny-qwen3"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(config or TINY_QWEN3))
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "b200.yaml").write_text(yaml.safe_dump(device or B200))


def test_a_sim_space_runs_a_model_directory_on_a_device_file(tmp_path: Path) -> None:
    _sim_files(tmp_path)
    path = write(tmp_path, {**MINIMAL, "model": "./models/tiny-qwen3",
                            "gpu": "./gpus/b200.yaml"})
    space = load_space(path)
    # both relative to the space file, stored absolute: the trial specs carry them
    assert space.model == str((tmp_path / "models" / "tiny-qwen3").resolve())
    assert space.gpu == str((tmp_path / "gpus" / "b200.yaml").resolve())
    workload, _ = load_workload("lab")
    workload = workload.model_copy(update={"num_prompts": 20, "warmup_requests": 0})
    spec = space.to_trial_spec(space.defaults(), "t0", workload=workload)
    assert (spec.model, spec.gpu) == (space.model, space.gpu)
    result = run_virtual_trial(spec)
    assert result.status == "ok" and result.objective > 0, result.failure_message
    assert result.engine.gpu_name == "NVIDIA B200" and result.engine.resolved_config[
        "sim_gpu"] == "b200"
    # the model's own facts bound the space: its context window is 8192 tokens
    with pytest.raises(SpaceError, match=r"beyond .*context window \(8192 tokens"):
        load_space(write(tmp_path, {**MINIMAL, "model": "./models/tiny-qwen3",
                                    "fixed": {"max_model_len": 16384}}, "long.yaml"))


def test_expert_parallelism_on_a_dense_model_is_refused_by_the_space(tmp_path: Path) -> None:
    ep = {"type": "bool", "default": False}
    for engine in ("sim", "vllm"):  # the model's facts are known either way
        with pytest.raises(SpaceError, match="has no experts"):
            parse_space({**MINIMAL, "engine": engine,
                         "knobs": {**MINIMAL["knobs"], "enable_expert_parallel": ep}})
    moe = parse_space({**MINIMAL, "model": "Qwen/Qwen3-30B-A3B", "gpu": "h100-sxm",
                       "knobs": {"data_parallel_size": {"type": "values", "values": [1, 2]},
                                 "enable_expert_parallel": ep}})
    spec = moe.to_trial_spec({"data_parallel_size": 2, "enable_expert_parallel": True}, "t")
    assert spec.gpus == 2


def test_a_sim_space_refuses_a_config_json_it_cannot_model_naming_the_field(
        tmp_path: Path) -> None:
    _sim_files(tmp_path, config={k: v for k, v in TINY_QWEN3.items() if k != "vocab_size"})
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, {**MINIMAL, "model": "./models/tiny-qwen3"}))
    assert "lacks 'vocab_size'" in str(info.value) and "tiny-qwen3" in str(info.value)
    with pytest.raises(SpaceError, match=r"unknown model 'Foo/Bar-1B'.*engine: vllm"):
        parse_space({**MINIMAL, "model": "Foo/Bar-1B"})


def test_a_bad_device_file_is_a_space_error_naming_the_field(tmp_path: Path) -> None:
    _sim_files(tmp_path, device={**B200, "memory_bandwidth_gbps": -8000})
    path = write(tmp_path, {**MINIMAL, "gpu": "./gpus/b200.yaml"})
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert str(path) in message and "gpu" in message
    assert "memory_bandwidth_gbps must be a positive number" in message
    assert str((tmp_path / "gpus" / "b200.yaml").resolve()) in message
    with pytest.raises(SpaceError, match="does not exist"):
        load_space(write(tmp_path, {**MINIMAL, "gpu": "./gpus/missing.yaml"}, "m.yaml"))


def test_a_device_file_is_for_the_simulated_engine_only(tmp_path: Path) -> None:
    _sim_files(tmp_path)
    with pytest.raises(SpaceError, match="a device file describes a GPU to the simulated"):
        load_space(write(tmp_path, _vllm_space(gpu="./gpus/b200.yaml")))


# --- lossy values and the quality gate ---------------------------------------------------


def test_quantization_and_fp8_kv_are_lossy_by_default_with_their_lossless_baseline() -> None:
    space = load_space("lab")
    defaults = space.defaults()
    assert space.to_trial_spec(defaults, "t").quality is None  # bf16 + auto KV: lossless
    spec = space.to_trial_spec({**defaults, "quantization": "fp8", "kv_cache_dtype": "fp8"},
                               "t")
    gate = spec.quality
    assert gate is not None and gate.golden is not None and gate.command is None
    assert gate.lossy == ("quantization=fp8", "kv_cache_dtype=fp8")
    assert gate.baseline == {"quantization": None, "kv_cache_dtype": "auto"}
    assert (gate.golden.max_tokens, gate.golden.min_agreement) == (32, 0.9)
    baseline = spec.baseline()
    assert baseline.quality is None and baseline.run_id == "t-baseline"
    assert (baseline.knobs["quantization"], baseline.knobs["kv_cache_dtype"]) == (None, "auto")
    assert baseline.knobs["max_num_seqs"] == spec.knobs["max_num_seqs"]  # all else the same


def test_a_space_marks_its_own_lossy_values_and_chooses_the_check(tmp_path: Path) -> None:
    data = {**MINIMAL, "fixed": {"max_model_len": 4096, "kv_cache_dtype": "fp8"},
            "knobs": {**MINIMAL["knobs"], "quantization": {
                "type": "categorical", "choices": [None, "fp8", "awq"], "default": None}},
            "lossy": {"kv_cache_dtype": {"values": []},  # this team accepts fp8 KV
                      "quantization": {"values": ["awq"]}},
            "quality": {"command": {"argv": ["lm_eval", "--model_args", "base_url={base_url}"],
                                    "min_score": 0.61}}}
    space = parse_space(data)
    defaults = space.defaults()
    assert space.quality_gate({**defaults, "quantization": "fp8"}) is None
    gate = space.quality_gate({**defaults, "quantization": "awq"})
    assert gate is not None and gate.lossy == ("quantization=awq",)
    assert gate.command is not None and gate.command.min_score == 0.61 and gate.golden is None
    # a fixed argument is lossy too, when the space does not say otherwise
    fixed_fp8 = parse_space({**MINIMAL, "fixed": {"max_model_len": 4096,
                                                  "quantization": "fp8"}})
    gate = fixed_fp8.quality_gate(fixed_fp8.defaults())
    assert gate is not None and gate.baseline == {"quantization": None}


def test_allowing_lossy_values_is_recorded_in_the_gate() -> None:
    space = load_space("lab")
    gate = space.allowing_lossy().quality_gate({**space.defaults(), "quantization": "fp8"})
    assert gate is not None and gate.allow_lossy


@pytest.mark.parametrize(("quality", "message"), [
    ({"golden": {"max_tokens": 32}, "command": {"argv": ["x"], "min_score": 1}},
     "not both"),
    ({"golden": {"min_agreement": 1.5}}, "min_agreement"),
    ({"golden": {"prompts": []}}, "prompts"),
    ({"command": {"argv": [], "min_score": 1}}, "argv"),
    ({"command": {"argv": ["x"]}}, "min_score"),
    ({"golden": {"tokens": 3}}, "tokens"),
])
def test_a_bad_quality_section_names_the_field(tmp_path: Path, quality: dict[str, object],
                                               message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        load_space(write(tmp_path, {**MINIMAL, "quality": quality}))


# --- engine options: the engine's own model, spelled in a file as before ----------------

STORED = FIXTURES / "specs"


def test_a_space_file_of_each_engine_writes_its_options_as_before(tmp_path: Path) -> None:
    sim = load_space(write(tmp_path, {**MINIMAL, "sim": {"seed": 5, "noise": 0.01,
                                                          "time_scale": 2}}, "sim.yaml"))
    assert sim.options == SimOptions(seed=5, noise=0.01, time_scale=2)
    assert sim.to_trial_spec(sim.defaults(), "t").options == sim.options
    vllm = load_space(write(tmp_path, _vllm_space(engine_binary="/opt/v/bin/vllm"), "v.yaml"))
    assert vllm.options == VllmOptions(engine_binary="/opt/v/bin/vllm")
    assert vllm.to_trial_spec(vllm.defaults(), "t").options == vllm.options
    assert parse_space(_vllm_space()).options == VllmOptions()
    assert load_space("lab").options == SimOptions(time_scale=3)  # lab.yaml: sim: {…}
    # A trial's options override the space's (slotune trial --time-scale).
    fast = sim.to_trial_spec(sim.defaults(), "t", options=SimOptions(time_scale=8))
    assert fast.options == SimOptions(time_scale=8)
    with pytest.raises(ValueError, match=r"options: VllmOptions are the options of vLLM"):
        sim.to_trial_spec(sim.defaults(), "t", options=VllmOptions())
    with pytest.raises(SpaceError, match=r"unknown engine 'tgi'; valid: sim, vllm"):
        parse_space({**MINIMAL, "engine": "tgi"})


def test_a_space_stored_before_engine_options_runs_as_it_did() -> None:
    # Sweeps store their space's dump (sim: {...} or null, engine_binary on every space).
    lab = json.loads((STORED / "space-sim-before-options.json").read_text())
    assert lab["sim"]["time_scale"] == 3 and lab["engine_binary"] is None
    space = stored_space(lab)
    assert space.engine == "sim" and space.options == SimOptions(time_scale=3)
    dumped = space.model_dump(mode="json")
    assert "sim" not in dumped and "engine_binary" not in dumped
    assert stored_space(dumped).model_dump(mode="json") == dumped  # and its dump, again
    assert stored_space({**lab, "sim": None}).options == SimOptions()
    vllm = json.loads((STORED / "space-vllm-before-options.json").read_text())
    assert vllm["sim"] is None and vllm["engine_binary"] == "/opt/vllm/bin/vllm"
    space = stored_space(vllm)
    assert space.options == VllmOptions(engine_binary="/opt/vllm/bin/vllm")
    assert space.to_trial_spec(space.defaults(), "t").options == space.options


def test_a_stored_space_runs_with_the_defaults_it_was_queued_with() -> None:
    # Knobs without a default take their first value or low end; the stored dump (what a
    # queued or resumed sweep runs) must not turn that into a default of None.
    space = parse_space({**MINIMAL, "knobs": {
        "max_num_seqs": {"type": "values", "values": [64, 256]},
        "max_num_batched_tokens": {"type": "int", "low": 2048, "high": 8192, "step": 2048},
        "quantization": {"type": "values", "values": [None, "fp8"], "default": None},
    }})
    assert space.defaults() == {"max_num_seqs": 64, "max_num_batched_tokens": 2048,
                                "quantization": None}
    stored = json.loads(json.dumps(space.model_dump(mode="json")))
    assert "default" not in stored["knobs"]["max_num_seqs"]
    assert stored["knobs"]["quantization"]["default"] is None  # null is one of its values
    assert stored_space(stored).defaults() == space.defaults()
    # A space stored before wrote "default": null on every knob that had none.
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        stored["knobs"][name]["default"] = None
    assert stored_space(stored).defaults() == space.defaults()
