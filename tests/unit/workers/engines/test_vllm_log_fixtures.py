"""The adapter reads real vLLM output, and the simulator speaks the same words.

The fixtures in ``tests/fixtures/vllm/`` are lines a real ``vllm serve`` (0.32.0, CPU
build) printed: a healthy eager start-up, a compiled one cold and again with its compile
cache, and refused configurations (see their README).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from slotune.workers.contracts import BOOT_PHASES, PhaseTimings
from slotune.workers.engines import EngineAdapter, boot_phases, classify_failure, parse_startup_log
from slotune.workers.sim.config import (
    SIM_ENGINE_VERSION,
    EngineConfigError,
    build_config,
    plan_memory,
    startup_log_lines,
)
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "vllm"
QWEN7B = "Qwen/Qwen2.5-7B-Instruct"
NO_SPEC_MODEL = "Value error, num_speculative_tokens was provided but without speculative model."


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- start-up facts ------------------------------------------------------------------------


def test_facts_from_the_real_healthy_startup() -> None:
    facts = parse_startup_log(fixture("startup_healthy.log"))
    # "CPU KV cache size: 262,144 tokens, Maximum concurrency for 1,024 tokens per
    # request: 256.00x" — one line in vLLM 0.32.
    assert facts["kv_cache_tokens"] == 262_144
    assert facts["max_concurrency"] == 256.0
    # From "Initializing a V1 LLM engine (v0.32.0) with config: …".
    assert facts["engine_version"] == "0.32.0"
    # "Initializing model took 0.143670 seconds"; "init engine (…) took 0.62 s". Eager
    # mode on the CPU: no compilation, no graphs, and the dummy loader reports no load.
    assert facts["startup_phases_s"] == {"initialize_model": 0.14367, "init_engine": 0.62}
    assert "cuda_visible_devices" not in facts


def test_current_gpu_wordings_are_read() -> None:
    """vLLM 0.32's GPU lines (from its source), not printed by the CPU build."""
    log = """\
(EngineCore pid=1) INFO 12-01 11:07:40 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='Qwen/Qwen2.5-7B-Instruct', speculative_config=None
(Worker pid=2) INFO 12-01 11:07:44 [default_loader.py:502] Loading weights took 3.21 seconds
(Worker pid=2) INFO 12-01 11:07:45 [gpu_model_runner.py:5150] Model loading took 15.27 GiB memory and 4.012000 seconds
(Worker pid=2) INFO 12-01 11:08:05 [monitor.py:40] torch.compile took 20.15 s in total
(EngineCore pid=1) INFO 12-01 11:08:07 [kv_cache_utils.py:2327] GPU KV cache size: 437,392 tokens, Maximum concurrency for 32,768 tokens per request: 13.35x
(Worker pid=2) INFO 12-01 11:08:19 [gpu_model_runner.py:6582] Graph capturing finished in 12 secs, took 0.53 GiB
(EngineCore pid=1) INFO 12-01 11:08:20 [core.py:396] init engine (profile, create kv cache, warmup model) took 41.62 s (compilation: 20.15 s)
"""  # noqa: E501
    facts = parse_startup_log(log)
    assert facts["kv_cache_tokens"] == 437_392
    assert facts["max_concurrency"] == 13.35
    assert facts["engine_version"] == "0.32.0"
    assert facts["startup_phases_s"] == {
        "load_weights": 3.21, "model_loading": 4.012, "torch_compile": 20.15,
        "graph_capture": 12.0, "init_engine": 41.62, "compilation": 20.15}
    # Init engine holds the compile and the graph capture: what is left of its 41.62 s
    # is profiling and the KV cache; 60 s of boot leave 14.368 s to the server around it.
    assert boot_phases(facts["startup_phases_s"], 60.0) == {
        "boot_turn_wait_s": None, "boot_weights_s": 4.012, "boot_compile_s": 20.15,
        "boot_graph_capture_s": 12.0, "boot_kv_cache_s": 9.47, "boot_server_ready_s": 14.368}
    # A boot that first waited 10 s for another boot of its configuration on the node: the
    # wait is its own phase, taken from what the server's start-up would otherwise show.
    waited = boot_phases({**facts["startup_phases_s"], "turn_wait": 10.0}, 70.0)
    assert waited["boot_turn_wait_s"] == 10.0 and waited["boot_server_ready_s"] == 14.368


# Boot wall seconds of the compiled fixtures, process start to /health (their README).
COLD_BOOT_S, WARM_BOOT_S = 66.9, 41.9


def test_a_compiled_cpu_boot_has_a_compile_phase_in_its_timings() -> None:
    cold = parse_startup_log(fixture("startup_compiled.log"))["startup_phases_s"]
    warm = parse_startup_log(fixture("startup_compiled_warm.log"))["startup_phases_s"]
    # The CPU build prints no compile time: its warm-up lines' timestamps, 08:08:13 to
    # 08:08:41, give it; "init engine … took 27.58 s" contains it.
    assert cold == {"initialize_model": 0.093392, "compile_warmup": 28.0, "init_engine": 27.58}
    timings = PhaseTimings(boot_s=COLD_BOOT_S, **boot_phases(cold, COLD_BOOT_S))
    assert timings.boot_weights_s == 0.093392
    assert timings.boot_compile_s == 27.58  # capped at the init engine that holds it
    assert timings.boot_graph_capture_s is None  # no CUDA graphs on a CPU
    assert timings.boot_kv_cache_s == 0.0
    assert timings.boot_server_ready_s == 39.227
    # Again with the same cache directories: vLLM 0.32's CPU build cannot load its AOT
    # artifact ("Compiling model again due to a load failure") and compiles again, three
    # times faster from the inductor cache.
    assert "Compiling model again due to a load failure" in fixture("startup_compiled_warm.log")
    assert warm["compile_warmup"] == 9.0
    again = PhaseTimings(boot_s=WARM_BOOT_S, **boot_phases(warm, WARM_BOOT_S))
    assert again.boot_compile_s is not None and timings.boot_compile_s is not None
    assert 0 < again.boot_compile_s < timings.boot_compile_s
    assert again.boot_kv_cache_s == 0.67 and again.boot_server_ready_s == 32.096


def test_an_eager_boot_has_no_compile_phase() -> None:
    phases = parse_startup_log(fixture("startup_healthy.log"))["startup_phases_s"]
    split = boot_phases(phases, 45.0)
    assert set(split) == set(BOOT_PHASES)
    assert split["boot_compile_s"] is None and split["boot_graph_capture_s"] is None
    assert split["boot_kv_cache_s"] == 0.62 and split["boot_weights_s"] == 0.14367
    # Without a measured boot (it failed) the log's phases stay, the rest is unknown.
    assert boot_phases(phases, None)["boot_server_ready_s"] is None
    assert boot_phases(phases, None)["boot_kv_cache_s"] == 0.62


@pytest.mark.parametrize(("line", "phase", "seconds"), [
    # vllm/compilation/decorators.py, compiled without AOT.
    ("(Worker pid=2) INFO 12-01 11:08:05 [monitor.py:61] torch.compile and initial "
     "profiling/warmup run together took 31.20 s in total", "torch_compile", 31.2),
    ("(Worker pid=2) INFO 12-01 11:08:05 [monitor.py:61] [backbone] torch.compile took "
     "5.05 s in total", "torch_compile", 5.05),
    # vllm/compilation/backends.py (0.32: "compile range"; older: "dynamic shape").
    ("(Worker pid=2) INFO 12-01 11:08:01 [backends.py:295] [backbone] Directly load the "
     "compiled graph(s) for compile range [1, 8192] from the cache, took 2.345 s",
     "compile_cache_load", 2.345),
    ("INFO 05-01 10:00:01 [backends.py:161] Directly load the compiled graph(s) for "
     "dynamic shape from the cache, took 4.100 s", "compile_cache_load", 4.1),
    # The CPU warm-up across midnight.
    ("(Worker pid=2) INFO 12-01 23:59:58 [cpu_model_runner.py:87] Warming up model for the "
     "compilation...\n(Worker pid=2) INFO 12-02 00:00:03 [cpu_model_runner.py:91] Warming "
     "up done.", "compile_warmup", 5.0),
])
def test_compile_wordings_are_read(line: str, phase: str, seconds: float) -> None:
    phases = parse_startup_log(line)["startup_phases_s"]
    assert phases == {phase: seconds}
    assert boot_phases(phases, None)["boot_compile_s"] == seconds


def test_compilation_with_an_encoder_is_its_own_phase() -> None:
    line = ("init engine (profile, create kv cache, warmup model) took 88.00 s "
            "(compilation: 30.50 s — language_model: 20.00 s, encoder: 10.50 s)")
    assert parse_startup_log(line)["startup_phases_s"] == {"init_engine": 88.0,
                                                           "compilation": 30.5}


def test_the_banner_gives_the_version_when_the_engine_core_never_started() -> None:
    assert parse_startup_log(fixture("refused_max_model_len.log"))["engine_version"] == "0.32.0"


# --- refusals ------------------------------------------------------------------------------

REFUSALS = {
    "refused_batched_tokens_lt_seqs.log":
        "Value error, max_num_batched_tokens (32) must be greater than or equal to "
        "max_num_seqs (64).",
    "refused_spec_eagle_no_model.log": NO_SPEC_MODEL,
    "refused_spec_draft_model_no_model.log": NO_SPEC_MODEL,
    "refused_gpu_memory_utilization.log":
        "gpu_memory_utilization: Input should be less than or equal to 1 (got 1.5)",
    "refused_cpu_tensor_parallel_numa.log":
        "AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers. "
        "Allowed NUMA nodes are [0]. Please try to bind threads manually or decrease DP/TP/PP.",
    "refused_max_model_len.log":
        "Value error, User-specified max_model_len (100000) is greater than the derived "
        "max_model_len (max_position_embeddings=2048.0 or model_max_length=None in model's "
        "config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
        "extreme caution. If the model uses relative position encoding (RoPE), positions "
        "exceeding derived_max_model_len lead to nan. If the model uses absolute position "
        "encoding, positions exceeding derived_max_model_len will cause a CUDA array "
        "out-of-bounds error.",
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_real_refusals_are_invalid_configs_in_vllms_words(name: str) -> None:
    text = fixture(name)
    assert classify_failure(text, during="startup") == "invalid_config"
    # Not a traceback line, not pydantic's "[type=…]" trailer or its URL: vLLM's sentence.
    assert EngineAdapter.last_error_line(text) == REFUSALS[name]
    # A refusal is not an out-of-memory, whenever it shows up.
    assert classify_failure(text, during="measure") == "crashed"


def test_what_the_cpu_build_does_not_implement_is_a_refusal_in_its_words_when_it_shows() -> None:
    # Two data-parallel ranks of a MoE model: healthy, then dead at the first request.
    text = fixture("refused_cpu_moe_data_parallel.log")
    assert parse_startup_log(text)["kv_cache_tokens"] == 262_144  # it did boot
    for during in ("startup", "measure"):
        assert classify_failure(text, during=during) == "invalid_config"
    # a bare NotImplementedError: the sentence names where vLLM raised it
    assert EngineAdapter.last_error_line(text) == (
        "NotImplementedError in all_gatherv "
        "(vllm/distributed/device_communicators/base_device_communicator.py, line 296)")


def test_a_healthy_startup_is_not_classified_as_a_refusal_or_oom() -> None:
    # It mentions OSError and oneDNN failures in warnings; none is a cause of death.
    assert classify_failure(fixture("startup_healthy.log"), during="startup") == "crashed"


@pytest.mark.parametrize(("line", "sentence"), [
    ("(EngineCore pid=9) ERROR 12-01 11:08:07 [core.py:1100] ValueError: No available "
     "memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.",
     "ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine."),
    ("ValueError: Free memory on device cuda:0 (10.0/79.1 GiB) on startup is less than "
     "desired GPU memory utilization (0.92, 72.8 GiB). Decrease GPU memory utilization or "
     "reduce GPU memory used by other processes.", None),
    ("(Worker pid=3) ERROR 12-01 11:07:45 [gpu_model_runner.py:5146] Failed to load model - "
     "not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for "
     "weights, increasing --tensor-parallel-size, or using --quantization.", None),
])
def test_out_of_memory_is_still_detected(line: str, sentence: str | None) -> None:
    text = (f"INFO 12-01 11:07:40 [core.py:133] starting\n{line}\n"
            "Traceback (most recent call last):\n")
    assert classify_failure(text, during="startup") == "oom"
    assert classify_failure(text, during="measure") == "oom"
    expected = sentence or line.split("] ", 1)[-1]
    assert EngineAdapter.last_error_line(text) == expected


# --- the simulator speaks vLLM's words -----------------------------------------------------


def test_simulator_startup_gives_the_same_facts_as_real_vllm() -> None:
    real = parse_startup_log(fixture("startup_healthy.log"))
    # The fixture's own configuration: eager, dummy weights, max_model_len 1024.
    cfg = build_config(QWEN7B, sim_gpu="h100-sxm", enforce_eager=True, load_format="dummy",
                       max_model_len=1024)
    plan = plan_memory(cfg)
    sim = parse_startup_log("\n".join(startup_log_lines(cfg, plan)))
    assert set(sim) == set(real)
    assert set(real["startup_phases_s"]) <= set(sim["startup_phases_s"])
    assert sim["kv_cache_tokens"] == plan.kv_tokens
    assert sim["max_concurrency"] == round(plan.kv_tokens / 1024, 2)
    assert sim["engine_version"] == SIM_ENGINE_VERSION
    # On a GPU with graphs and real weights vLLM also reports loading and capture.
    cfg = build_config(QWEN7B, sim_gpu="h100-sxm")
    phases = parse_startup_log("\n".join(startup_log_lines(cfg, plan_memory(cfg))))[
        "startup_phases_s"]
    assert {"initialize_model", "load_weights", "model_loading", "graph_capture",
            "init_engine"} <= set(phases)
    # Its init engine holds the graph capture as vLLM's does: one profiling second is left
    # (give or take the capture's rounding to whole seconds, vLLM's "%.0f secs").
    split = boot_phases(phases, None)
    assert split["boot_graph_capture_s"] == phases["graph_capture"] > 0
    assert split["boot_kv_cache_s"] == pytest.approx(1.0, abs=0.5)
    assert split["boot_compile_s"] is None


@pytest.mark.parametrize("spec", [
    '{"method": "eagle", "num_speculative_tokens": 3}',
    '{"method": "eagle3", "num_speculative_tokens": 3}',
    '{"method": "draft_model", "num_speculative_tokens": 3}',
    # Without a method vLLM takes it for draft-model speculation.
    '{"num_speculative_tokens": 3}',
])
def test_simulator_refuses_speculation_without_its_model(spec: str) -> None:
    with pytest.raises(EngineConfigError) as info:
        build_config(QWEN7B, speculative_config=spec)
    assert "Value error, " + str(info.value) == NO_SPEC_MODEL
    assert info.value.config_class == "SpeculativeConfig"


@pytest.mark.parametrize("spec", [
    '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", '
    '"num_speculative_tokens": 3}',
    '{"method": "ngram", "num_speculative_tokens": 3}',
    '{"model": "ngram", "num_speculative_tokens": 3}',
    '{"method": "mtp", "num_speculative_tokens": 1}',
])
def test_simulator_takes_the_speculation_vllm_takes(spec: str) -> None:
    cfg = build_config(QWEN7B, speculative_config=spec)
    assert cfg.speculative is not None and cfg.speculative.num_speculative_tokens >= 1


@pytest.mark.parametrize(("name", "args"), [
    ("refused_batched_tokens_lt_seqs.log", ["--max-num-batched-tokens", "32",
                                            "--max-num-seqs", "64"]),
    ("refused_spec_eagle_no_model.log",
     ["--speculative-config", '{"method":"eagle","num_speculative_tokens":3}']),
    ("refused_gpu_memory_utilization.log", ["--gpu-memory-utilization", "1.5"]),
    ("refused_max_model_len.log", ["--max-model-len", "100000"]),
])
def test_simulator_refuses_as_vllm_does(name: str, args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "slotune.workers.sim", "serve", QWEN7B, *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert classify_failure(text, during="startup") == "invalid_config"
    sim_line = EngineAdapter.last_error_line(text)
    real_line = REFUSALS[name]
    if name == "refused_max_model_len.log":
        # The same sentence, with the simulated model's own limit (32768 for Qwen2.5-7B).
        head, _, tail = real_line.partition("2048.0")
        assert sim_line.startswith(head) and sim_line.endswith(tail)
        assert "max_position_embeddings=32768.0" in sim_line
    else:
        assert sim_line == real_line
