"""One contract, one suite: every engine adapter boots, reports, refuses and cleans up alike.

The suite (:class:`tests.support.engines.AdapterContract`) runs here on the sim adapter and
on the vllm adapter against the simulated engine's vLLM-compatible entry (``slotune-sim
serve MODEL --vllm-flags``, so the argv vLLM would receive is what runs); on a real ``vllm
serve`` in ``tests/e2e/vllm/test_adapter_contract_real_vllm.py``. Then the adapters' own
rules: flags, argv, environment, log facts, process groups.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slotune.workers.engines import (
    EngineFailure,
    EngineState,
    flag_args,
    make_engine,
    parse_startup_log,
    redact_argv,
)
from tests.support.engines import QWEN7B, SIM_BINARY, AdapterContract, make_spec
from tests.support.paths import REPO
from tests.support.procscan import engine_pids


@pytest.fixture(autouse=True)
def _sim_gpu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOTUNE_SIM_GPU", "rtx4090")


@pytest.mark.parametrize("kind", ["sim", "vllm"])
class TestAdapterContract(AdapterContract):
    """The contract on the sim adapter and on the vllm adapter driving the simulator."""


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
from tests.support.engines import make_spec
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
    trial = subprocess.Popen([sys.executable, "-c", TRIAL_PROCESS, run_id, str(wrapper),
                              str(tmp_path / "work")], cwd=REPO, stdout=subprocess.PIPE,
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
