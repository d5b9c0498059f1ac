"""Workload and SLO contracts: defaults, parsing, and errors that name the field."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from slotune.workers.contracts import (
    SLO,
    Arrivals,
    RandomDataset,
    TraceDataset,
    TrialResult,
    TrialSpec,
    Workload,
    options_for,
    replica_gpus,
)
from slotune.workers.engines.sim import SimEngine, SimOptions
from slotune.workers.engines.vllm import VllmOptions
from tests.support.paths import FIXTURES


def test_slo_parse_forms() -> None:
    slo = SLO.parse("ttft:300,tpot:50")
    assert slo.percentile == 99 and slo.targets == {"ttft": 300.0, "tpot": 50.0}
    assert SLO.parse(["ttft:300", "e2el:2000"]).targets == {"ttft": 300.0, "e2el": 2000.0}
    assert SLO.parse("p:95,itl:40").percentile == 95
    assert str(SLO.parse("ttft:300,tpot:50")) == "p99 ttft ≤ 300 ms, tpot ≤ 50 ms"


@pytest.mark.parametrize(("text", "needle"), [
    ("latency:300", "unknown SLO metric 'latency'"),
    ("ttft=300", "not 'metric:milliseconds'"),
    ("ttft:fast", "'fast' is not a number"),
])
def test_slo_parse_errors(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        SLO.parse(text)


def test_slo_rejects_non_positive_target() -> None:
    with pytest.raises(ValidationError, match="ttft"):
        SLO.parse("ttft:0")


def test_workload_roundtrip_and_discriminator() -> None:
    w = Workload.model_validate({"dataset": {"kind": "trace", "path": "t.jsonl"},
                                 "arrivals": {"request_rate": "inf"}})
    assert isinstance(w.dataset, TraceDataset)
    assert math.isinf(w.arrivals.request_rate)
    again = Workload.model_validate_json(w.model_dump_json())
    assert again == w
    assert isinstance(Workload().dataset, RandomDataset)


def test_unknown_dataset_kind_lists_valid_ones() -> None:
    with pytest.raises(ValidationError) as info:
        Workload.model_validate({"dataset": {"kind": "sonnet"}})
    text = str(info.value)
    assert "random" in text and "prefix_repetition" in text and "trace" in text


def test_errors_name_the_field() -> None:
    with pytest.raises(ValidationError, match=r"dataset\.random\.range_ratio"):
        Workload.model_validate({"dataset": {"kind": "random", "range_ratio": 1.5}})
    with pytest.raises(ValidationError, match="request_rat"):
        Workload.model_validate({"arrivals": {"request_rat": 3}})
    with pytest.raises(ValidationError, match="burstiness"):
        Arrivals(burstiness=0)


def test_the_model_revision_comes_from_the_flag_or_the_snapshot_path() -> None:
    def spec(model: str, **knobs: object) -> TrialSpec:
        return TrialSpec(run_id="t", model=model, knobs=knobs, workload=Workload(name="w"),
                         slo=SLO(ttft=300))

    snapshot = "/hf/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/a09a3545/"
    assert spec(snapshot).model_revision == "a09a3545"
    assert spec(snapshot + "sub").model_revision == "a09a3545"
    assert spec("Qwen/Qwen2.5-7B-Instruct", revision="v1.1").model_revision == "v1.1"
    assert spec(snapshot, revision="main").model_revision == "main"  # the flag is what ran
    assert spec("Qwen/Qwen2.5-7B-Instruct").model_revision is None
    assert spec("/models/snapshots").model_revision is None


def test_the_gpu_is_the_trials_and_engine_options_belong_to_their_engine() -> None:
    base = {"run_id": "t", "model": "m", "workload": Workload(), "slo": SLO(ttft=300)}
    spec = TrialSpec.model_validate({**base, "gpu": "rtx4090", "sim": {"seed": 3}})
    assert spec.gpu == "rtx4090" and spec.options == SimOptions(seed=3)
    # Where earlier versions kept the GPU (sim.gpu) still reads, as the trial's gpu.
    legacy = TrialSpec.model_validate({**base, "sim": {"gpu": "l40s", "seed": 3}})
    assert legacy.gpu == "l40s" and legacy.options == spec.options
    with pytest.raises(ValidationError, match="disagree"):
        TrialSpec.model_validate({**base, "gpu": "rtx4090", "sim": {"gpu": "l40s"}})
    # The simulator's options on a real engine, a binary for the simulator: refused.
    with pytest.raises(ValidationError, match="options of the simulated engine"):
        TrialSpec.model_validate({**base, "engine": "vllm", "sim": {"noise": 0.1}})
    assert TrialSpec.model_validate({**base, "engine": "vllm"}).engine == "vllm"
    with pytest.raises(ValidationError, match="engine_binary is for engine: vllm"):
        TrialSpec.model_validate({**base, "engine_binary": "/opt/v/bin/vllm"})


SPECS = FIXTURES / "specs"


def test_a_spec_stored_before_engine_options_loads_into_its_engines_options() -> None:
    # Dumped by the code before the union (sim: {...} and engine_binary on every spec),
    # as the trials table holds them.
    stored = json.loads((SPECS / "sim-before-options.json").read_text())
    assert stored["sim"]["seed"] == 7 and "engine_binary" in stored
    spec = TrialSpec.model_validate(stored)
    assert spec.engine == "sim"
    assert spec.options == SimOptions(seed=7, noise=0.02, time_scale=3)
    assert SimEngine.repeat_spec(spec, 0).options == SimOptions(seed=1007, noise=0.02,
                                                                time_scale=3)
    dumped = spec.model_dump(mode="json")
    assert "sim" not in dumped and "engine_binary" not in dumped
    assert dumped["options"] == stored["sim"]
    assert TrialSpec.model_validate_json(spec.model_dump_json()) == spec

    vllm = TrialSpec.model_validate_json((SPECS / "vllm-before-options.json").read_text())
    assert vllm.engine == "vllm" and vllm.options == VllmOptions(engine_binary="/opt/vllm/bin/vllm")
    assert TrialSpec.model_validate_json(vllm.model_dump_json()) == vllm


def test_options_of_another_engine_are_refused_saying_whose_they_are() -> None:
    base = {"run_id": "t", "model": "m", "workload": Workload(), "slo": SLO(ttft=300)}
    with pytest.raises(ValidationError, match=r"options\.engine_binary: Extra inputs .*"
                       r"engine_binary is for engine: vllm"):
        TrialSpec.model_validate({**base, "options": {"engine_binary": "/v"}})
    with pytest.raises(ValidationError, match=r"SimOptions are the options of the simulated "
                       r"engine .*this trial's engine is vllm"):
        TrialSpec(**base, engine="vllm", options=SimOptions(seed=2))
    with pytest.raises(ValidationError, match="given twice"):
        TrialSpec.model_validate({**base, "sim": {"seed": 1}, "options": {"seed": 2}})
    with pytest.raises(ValidationError, match=r"sim\.noise: Input should be greater"):
        TrialSpec.model_validate({**base, "sim": {"noise": -1}})
    with pytest.raises(ValidationError, match=r"unknown engine 'tgi'; valid: .*sim.*vllm"):
        TrialSpec.model_validate({**base, "engine": "tgi"})
    # Each spelling of an engine's own options reads the same.
    assert TrialSpec.model_validate({**base, "engine": "vllm", "vllm": {
        "engine_binary": "/v"}}).options == VllmOptions(engine_binary="/v")
    assert TrialSpec.model_validate({**base, "engine": "vllm", "options": {
        "engine_binary": "/v"}}).options == VllmOptions(engine_binary="/v")
    assert TrialSpec.model_validate({**base, "options": {"seed": 4}}).options.seed == 4
    # A copy that changes the engine alone is caught by the next validation.
    sim = TrialSpec.model_validate(base)
    with pytest.raises(ValidationError, match="SimOptions are the options of the simulated"):
        TrialSpec.model_validate(dict(sim.model_copy(update={"engine": "vllm"})))
    with pytest.raises(ValueError, match="not the options of engine vllm"):
        options_for("vllm", sim.options, "trial")
    moved = sim.model_copy(update={"options": SimOptions(seed=9)}).for_engine("vllm")
    assert moved.engine == "vllm" and moved.options == VllmOptions()
    # The simulator models a vLLM spec with its own defaults.
    assert moved.options_of(SimOptions) == SimOptions()


def test_a_replica_occupies_tensor_times_pipeline_parallel_devices() -> None:
    spec = TrialSpec(run_id="t", model="m", workload=Workload(), slo=SLO(ttft=300),
                     engine_args={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
    assert spec.gpus == 4 and spec.tensor_parallel_size == 2  # what the coordinator holds
    assert replica_gpus({"tensor_parallel_size": "4"}) == 4  # what the planner counts
    assert replica_gpus({"tensor_parallel_size": "x", "pipeline_parallel_size": None}) == 1


def test_a_data_parallel_replica_occupies_every_rank_and_expert_parallelism_adds_none() -> None:
    spec = TrialSpec(run_id="t", model="m", workload=Workload(), slo=SLO(ttft=300),
                     engine_args={"tensor_parallel_size": 2, "enable_expert_parallel": True},
                     knobs={"data_parallel_size": 4})
    assert spec.gpus == 8  # one vllm serve over 4 ranks of TP 2
    assert replica_gpus({"tensor_parallel_size": 2, "pipeline_parallel_size": 2,
                         "data_parallel_size": 2}) == 8
    assert replica_gpus({"data_parallel_size": 4, "enable_expert_parallel": True}) == 4


def test_a_spec_or_result_written_with_the_old_trial_id_key_loads_as_its_run_id() -> None:
    """Before issue 27 the run's name was ``trial_id``: JSON stored or written then (result
    files, saved reports) still loads, and is written back as ``run_id``."""
    spec = TrialSpec(run_id="s3-t7-a1", model="m", workload=Workload(), slo=SLO(ttft=300))
    old = {("trial_id" if k == "run_id" else k): v for k, v in spec.model_dump().items()}
    assert TrialSpec.model_validate(old) == spec
    assert TrialSpec.model_validate_json(spec.model_dump_json().replace(
        '"run_id"', '"trial_id"')) == spec
    assert '"run_id":"s3-t7-a1"' in spec.model_dump_json() and "trial_id" not in \
        spec.model_dump_json()

    result = TrialResult.model_validate_json(
        '{"trial_id": "optuna-7", "status": "failed", "failure": "oom"}')
    assert result.run_id == "optuna-7" and "run_id" in result.model_dump()
    assert TrialResult.model_validate(result.model_dump()) == result
    # One name at a time: both keys are refused like any extra field; neither is missing.
    with pytest.raises(ValidationError, match="trial_id"):
        TrialResult.model_validate({"run_id": "a", "trial_id": "a", "status": "ok"})
    with pytest.raises(ValidationError, match="run_id"):
        TrialResult.model_validate({"status": "ok"})
