"""The step cost model: fidelity to the reference vLLM step times, and physical directions."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict

import pytest

from slotune.workers.sim.calibration import calibrated_gpus, load_calibration
from slotune.workers.sim.catalog import GPUS, get_gpu, get_model
from slotune.workers.sim.cost_model import HardwareSetup, StepShape, UnsupportedSetup
from slotune.workers.sim.cost_registry import COST_MODELS, make_cost_model
from slotune.workers.sim.reference import read_reference, reference_setup, reference_shape
from tests.support.paths import REPO

REFERENCE = REPO / "benchmarks" / "data" / "vllm-step-times.csv"
LLAMA_8B = get_model("meta-llama/Llama-3.1-8B-Instruct")
LLAMA_70B = get_model("meta-llama/Llama-3.1-70B-Instruct")


def step_s(shape: StepShape, model: str = "meta-llama/Llama-3.1-8B-Instruct",
           gpu: str = "h100-sxm", **setup: object) -> float:
    hw = HardwareSetup(model=get_model(model), gpu=get_gpu(gpu), **setup)  # type: ignore[arg-type]
    return make_cost_model("roofline", hw).step_time(shape)


def abs_pct_errors(cost_model: str) -> dict[str, list[float]]:
    """Errors by GPU, by kind and overall ('all'), of a cost model against the in-repo reference."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in read_reference(REFERENCE):
        modelled = make_cost_model(cost_model, reference_setup(row)).step_time(reference_shape(row))
        err = abs(modelled * 1e3 / row.latency_ms - 1.0) * 100.0
        for key in (row.gpu, row.kind, "all"):
            out[key].append(err)
    return out


class TestFidelity:
    def test_reference_rows_resolve_in_the_catalogue(self) -> None:
        rows = read_reference(REFERENCE)
        assert len(rows) > 300
        assert {reference_setup(r).gpu.name for r in rows} == set(calibrated_gpus())

    def test_roofline_meets_the_fidelity_target(self) -> None:
        errors = abs_pct_errors("roofline")
        assert statistics.median(errors["all"]) <= 10.0
        assert max(errors["all"]) <= 30.0
        for kind in ("prefill", "decode", "mixed"):
            assert statistics.median(errors[kind]) <= 15.0, kind
        for gpu in ("h100_sxm", "h200_sxm", "a100_sxm", "l40s"):
            assert statistics.median(errors[gpu]) <= 10.0, gpu

    def test_gpu_without_reference_rows_uses_the_default_entry(self) -> None:
        assert "rtx4090" not in calibrated_gpus()
        assert load_calibration("rtx4090") == load_calibration("no-such-gpu")
        # Same efficiencies, the 4090's own (lower) datasheet peaks: slower than an L40S
        # in compute-bound prefill, faster in bandwidth-bound decode (1008 vs 864 GB/s).
        prefill, decode = StepShape.uniform(4096, 0, 0), StepShape.uniform(0, 8, 1024)
        assert step_s(prefill, gpu="rtx4090") > step_s(prefill, gpu="l40s")
        assert step_s(decode, gpu="rtx4090") < step_s(decode, gpu="l40s")

    def test_efficiencies_are_physical(self) -> None:
        for gpu in [*calibrated_gpus(), "rtx4090"]:
            cal = load_calibration(gpu)
            for name in ("gemm_efficiency", "fp8_gemm_efficiency", "memory_efficiency",
                         "kv_efficiency", "fp8_kv_efficiency", "attention_efficiency"):
                assert 0.0 < getattr(cal, name) <= 1.0, (gpu, name)
            assert cal.step_overhead_s >= 0 and cal.layer_overhead_s >= 0


class TestPhysicalDirections:
    def test_fp8_weights_speed_up_decode_on_h100(self) -> None:
        shape = StepShape.uniform(0, 32, 1024)
        assert step_s(shape, weight_format="fp8") < 0.8 * step_s(shape)

    def test_fp8_kv_cache_lowers_memory_time_at_long_context(self) -> None:
        hw = HardwareSetup(model=LLAMA_8B, gpu=get_gpu("h100-sxm"))
        hw_fp8 = HardwareSetup(model=LLAMA_8B, gpu=get_gpu("h100-sxm"), kv_cache_dtype="fp8")
        shape = StepShape.uniform(0, 128, 16384)
        bf16_cost = make_cost_model("roofline", hw).step_cost(shape)
        fp8_cost = make_cost_model("roofline", hw_fp8).step_cost(shape)
        assert fp8_cost.memory_s < 0.7 * bf16_cost.memory_s
        assert fp8_cost.total_s < bf16_cost.total_s

    def test_tensor_parallel_adds_communication_but_speeds_up_70b_decode(self) -> None:
        shape = StepShape.uniform(0, 64, 2048)
        model = "meta-llama/Llama-3.1-70B-Instruct"
        one = make_cost_model("roofline", HardwareSetup(LLAMA_70B, get_gpu("h100-sxm")))
        four = make_cost_model(
            "roofline", HardwareSetup(LLAMA_70B, get_gpu("h100-sxm"), tensor_parallel_size=4))
        assert one.step_cost(shape).communication_s == 0.0
        assert four.step_cost(shape).communication_s > 0.0
        assert step_s(shape, model, tensor_parallel_size=4) < 0.5 * step_s(shape, model)

    def test_enforce_eager_adds_overhead(self) -> None:
        shape = StepShape.uniform(0, 16, 512)
        graphs = make_cost_model("roofline", HardwareSetup(LLAMA_8B, get_gpu("h100-sxm")))
        eager = make_cost_model(
            "roofline", HardwareSetup(LLAMA_8B, get_gpu("h100-sxm"), enforce_eager=True))
        assert eager.step_cost(shape).overhead_s > graphs.step_cost(shape).overhead_s
        assert eager.step_time(shape) > graphs.step_time(shape)

    @pytest.mark.parametrize("gpu", sorted(GPUS))
    def test_step_time_is_monotone_in_tokens(self, gpu: str) -> None:
        prefill = [step_s(StepShape.uniform(p, 0, 0), gpu=gpu) for p in (1, 16, 128, 1024, 8192)]
        decode = [step_s(StepShape.uniform(0, d, 1024), gpu=gpu) for d in (1, 8, 64, 256, 1024)]
        context = [step_s(StepShape.uniform(0, 64, c), gpu=gpu) for c in (16, 512, 4096, 32768)]
        mixed = [step_s(StepShape.uniform(p, 64, 1024), gpu=gpu) for p in (0, 64, 512, 4096)]
        for series in (prefill, decode, context, mixed):
            assert all(a < b for a, b in itertools.pairwise(series)), series

    def test_empty_step_costs_nothing(self) -> None:
        assert step_s(StepShape()) == 0.0

    def test_prefill_is_compute_bound_and_small_decode_memory_bound(self) -> None:
        hw = HardwareSetup(LLAMA_8B, get_gpu("h100-sxm"))
        model = make_cost_model("roofline", hw)
        big_prefill = model.step_cost(StepShape.uniform(8192, 0, 0))
        small_decode = model.step_cost(StepShape.uniform(0, 1, 512))
        assert big_prefill.compute_s > big_prefill.memory_s
        assert small_decode.memory_s > small_decode.compute_s


class TestRegistry:
    def test_unknown_cost_model_lists_the_valid_ones(self) -> None:
        hw = HardwareSetup(LLAMA_8B, get_gpu("h100-sxm"))
        with pytest.raises(ValueError, match="valid: aiconfigurator, roofline"):
            make_cost_model("nope", hw)

    def test_aiconfigurator_is_registered(self) -> None:
        assert {"roofline", "aiconfigurator"} <= set(COST_MODELS)

    def test_aiconfigurator_refuses_uncovered_gpu(self) -> None:
        hw = HardwareSetup(LLAMA_8B, get_gpu("rtx4090"))
        with pytest.raises(UnsupportedSetup, match="does not cover"):
            make_cost_model("aiconfigurator", hw)


class TestAIConfigurator:
    """Only where the optional extra is installed."""

    def test_reproduces_the_reference(self) -> None:
        pytest.importorskip("aiconfigurator_core")
        errors = abs_pct_errors("aiconfigurator")
        assert statistics.median(errors["all"]) <= 2.0
        assert max(errors["all"]) <= 10.0

    def test_refuses_a_model_it_does_not_bundle(self) -> None:
        hw = HardwareSetup(get_model("Qwen/Qwen2.5-7B-Instruct"), get_gpu("h100-sxm"))
        with pytest.raises(UnsupportedSetup):
            make_cost_model("aiconfigurator", hw)

    def test_without_the_package_it_says_how_to_install(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        import sys

        from slotune.workers.sim import aiconfigurator_model

        aiconfigurator_model._compiled.cache_clear()
        monkeypatch.setitem(sys.modules, "aiconfigurator_core.sdk.engine", None)
        hw = HardwareSetup(LLAMA_8B, get_gpu("h100-sxm"))
        try:
            with pytest.raises(UnsupportedSetup, match=r"slotune\[aiconfigurator\]"):
                make_cost_model("aiconfigurator", hw)
        finally:
            aiconfigurator_model._compiled.cache_clear()
