"""SLOTUNE_SIM_CALIBRATION: the simulated engine's own truth, which the twin never reads."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from slotune.workers.contracts import SLO, TrialSpec
from slotune.workers.loadgen.generate.workload_files import load_workload
from slotune.workers.sim.calibration import (
    CALIBRATION_ENV,
    CalibrationFileError,
    load_calibration,
    shipped_calibration,
)
from slotune.workers.sim.catalog import get_gpu, get_model
from slotune.workers.sim.cost_model import HardwareSetup, RooflineCostModel, StepShape
from slotune.workers.trial.virtual import run_virtual_trial

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
GPU = "rtx4090"


def write_truth(path: Path, gpu: str = GPU, **scale: float) -> Path:
    """A truth file: the shipped factors of ``gpu`` with some multiplied by ``scale``."""
    factors = asdict(shipped_calibration(gpu))
    for name, factor in scale.items():
        factors[name] *= factor
    path.write_text(json.dumps({"gpus": {gpu: factors}}))
    return path


def capacity_spec() -> TrialSpec:
    workload, _ = load_workload("lab")
    workload = workload.model_copy(update={"num_prompts": 60, "warmup_requests": 0})
    return TrialSpec.model_validate(dict(
        run_id="t", engine="sim", model="Qwen/Qwen2.5-7B-Instruct", knobs={},
        engine_args={"max_model_len": 4096}, workload=workload, slo=SLO(ttft=300, tpot=25),
        gpu=GPU, mode="capacity",
        capacity={"min_rate": 0.5, "max_rate": 64, "max_probes": 8}))


def test_the_engine_runs_on_the_truth_file_and_the_shipped_fit_stays_the_prior(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = shipped_calibration(GPU)
    truth = write_truth(tmp_path / "truth.json", memory_efficiency=0.5, kv_efficiency=0.5)
    monkeypatch.setenv(CALIBRATION_ENV, str(truth))
    assert load_calibration(GPU).memory_efficiency == pytest.approx(
        shipped.memory_efficiency * 0.5)
    assert shipped_calibration(GPU) == shipped  # the twin's prior does not move
    # a decode step (memory-bound) slows down on the truth, not on the prior
    setup = HardwareSetup(get_model("Qwen/Qwen2.5-7B-Instruct"), get_gpu(GPU))
    decode = StepShape.uniform(prefill_tokens=0, decode_seqs=64, context_len=1024)
    on_truth = RooflineCostModel(setup).step_time(decode)
    on_prior = RooflineCostModel(setup, shipped).step_time(decode)
    assert on_truth > 1.5 * on_prior


def test_a_virtual_trial_measures_the_truth_unless_given_the_twins_factors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = capacity_spec()
    plain = run_virtual_trial(spec, per_request=False)
    monkeypatch.setenv(CALIBRATION_ENV, str(write_truth(
        tmp_path / "truth.json", memory_efficiency=0.5, kv_efficiency=0.5,
        step_overhead_s=3.0, layer_overhead_s=3.0)))
    slower = run_virtual_trial(spec, per_request=False)
    assert plain.capacity is not None and slower.capacity is not None
    assert slower.capacity < 0.8 * plain.capacity
    # the twin passes its own factors: the environment's truth is not read
    twin = run_virtual_trial(spec, per_request=False, calibration=shipped_calibration(GPU))
    assert twin.capacity == plain.capacity
    faster = replace(shipped_calibration(GPU), memory_efficiency=0.98, kv_efficiency=0.98)
    assert run_virtual_trial(spec, per_request=False, calibration=faster).capacity \
        >= plain.capacity  # type: ignore[operator]


@pytest.mark.parametrize(("content", "words"), [
    ("not json", "not JSON"),
    ('{"gpus": {}}', "needs a 'gpus' object"),
    ('{"gpus": {"rtx4090": {"gemm_eficiency": 0.5}}}', "not a roofline factor"),
    ('{"gpus": {"rtx4090": {"gemm_efficiency": -1}}}', "must be a number >= 0"),
])
def test_a_bad_truth_file_is_refused_naming_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, words: str) -> None:
    path = tmp_path / "truth.json"
    path.write_text(content)
    monkeypatch.setenv(CALIBRATION_ENV, str(path))
    with pytest.raises(CalibrationFileError, match=words) as caught:
        load_calibration(GPU)
    assert str(path) in str(caught.value)


def test_the_engine_process_reads_the_truth_file(tmp_path: Path) -> None:
    truth = write_truth(tmp_path / "truth.json", gemm_efficiency=0.25)
    argv = [SLOTUNE, "sim", "step-time", "Qwen/Qwen2.5-7B-Instruct", "--sim-gpu", GPU,
            "--prefill-tokens", "4096"]
    prior = subprocess.run(argv, capture_output=True, text=True, check=True,
                           env={"PATH": "/usr/bin:/bin"})
    slowed = subprocess.run(argv, capture_output=True, text=True, check=True,
                            env={"PATH": "/usr/bin:/bin", CALIBRATION_ENV: str(truth)})
    assert prior.stdout != slowed.stdout
    missing = subprocess.run(argv, capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin",
                                  CALIBRATION_ENV: str(tmp_path / "nope.json")})
    assert missing.returncode != 0
    assert CALIBRATION_ENV in missing.stderr and "Traceback" not in missing.stderr


def test_the_cpu_prior_pays_the_cpu_builds_overheads() -> None:
    cpu, gpu = shipped_calibration("cpu"), shipped_calibration("no-such-gpu")  # default entry
    assert cpu.step_overhead_s > 10 * gpu.step_overhead_s
    assert cpu.per_seq_overhead_s > 10 * gpu.per_seq_overhead_s
    assert (cpu.gemm_efficiency, cpu.memory_efficiency) == (gpu.gemm_efficiency,
                                                            gpu.memory_efficiency)
