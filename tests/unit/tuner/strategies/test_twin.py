"""The twin: factors, predictions that never read the truth, a fit that learns it, and
the strategy that boots only what the twin cannot rule out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from slotune.tuner.spaces import parse_space
from slotune.tuner.strategies import TwinStrategy, make_strategy, params_key
from slotune.tuner.strategies.twin.factors import TwinFactors
from slotune.tuner.strategies.twin.model import Twin
from slotune.tuner.sweep.request import SweepRequest, resolve
from slotune.workers.contracts import EngineFacts, KnobValue, TrialResult
from slotune.workers.sim.calibration import CALIBRATION_ENV, shipped_calibration
from slotune.workers.trial.virtual import run_virtual_trial
from tests.support.twin_truth import SMALL, TRUTH, small_space, write_truth

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def truth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = write_truth(tmp_path / "truth.json", "l40s", **TRUTH)
    monkeypatch.setenv(CALIBRATION_ENV, str(path))
    return path


def measure(params: dict[str, KnobValue], run_id: str = "t") -> TrialResult:
    """What "the real engine" (the simulated one, on the truth) measures when a sweep's
    search boots it: the space's ranking probes, what the twin predicts."""
    space = small_space()
    spec = space.to_trial_spec(params, run_id, capacity=space.capacity.for_ranking())
    return run_virtual_trial(spec, per_request=False)


def test_factors_scale_their_group_of_the_prior_and_stay_in_bounds() -> None:
    prior = shipped_calibration("l40s")
    moved = TwinFactors(compute=0.5, memory=2.0, overhead=3.0).apply(prior)
    assert moved.gemm_efficiency == pytest.approx(prior.gemm_efficiency * 0.5)
    assert moved.attention_efficiency == pytest.approx(prior.attention_efficiency * 0.5)
    assert moved.kv_efficiency == pytest.approx(prior.kv_efficiency * 2.0)
    assert moved.step_overhead_s == pytest.approx(prior.step_overhead_s * 3.0)
    assert moved.overlap_exponent == prior.overlap_exponent  # not a learned factor
    with pytest.raises(ValueError, match="outside"):
        TwinFactors(compute=10.0)
    assert TwinFactors.from_log([5.0, -5.0, 0.0]).as_tuple() == pytest.approx((3.0, 1 / 3, 1.0))


def test_the_twin_predicts_from_its_prior_whatever_truth_the_engine_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"max_num_seqs": 64, "max_num_batched_tokens": 512}
    blind = Twin(small_space()).predict(config, full=True)
    monkeypatch.setenv(CALIBRATION_ENV, str(write_truth(tmp_path / "t.json", "l40s", **TRUTH)))
    assert Twin(small_space()).predict(config, full=True) == blind
    # ... while the engine itself does run on the truth, and measures something else
    assert measure(config).objective > 1.5 * blind.objective


def test_refused_configurations_are_predicted_refused() -> None:
    # without chunked prefill a step must hold a whole max_model_len prompt: vLLM refuses
    twin = Twin(parse_space({**SMALL, "fixed": {"max_model_len": 2048,
                                                "enable_chunked_prefill": False}}))
    refused = twin.predict({"max_num_seqs": 8, "max_num_batched_tokens": 512})
    assert refused.failure == "invalid_config" and refused.objective == 0


def test_a_fit_on_two_measured_trials_predicts_a_third_it_never_saw(truth: Path) -> None:
    seen = [{"max_num_seqs": 16, "max_num_batched_tokens": 512},
            {"max_num_seqs": 64, "max_num_batched_tokens": 4096}]
    unseen = {"max_num_seqs": 64, "max_num_batched_tokens": 512}
    actual = measure(unseen).objective
    twin = Twin(small_space())
    before = twin.predict(unseen, full=True).objective
    assert abs(before - actual) / actual > 0.3  # the prior is far off this truth
    report = twin.fit([(p, measure(p)) for p in seen])
    assert report is not None and report.probes >= 3 and report.fitted
    after = twin.predict(unseen, full=True).objective
    # within a capacity bracket step of the truth, from ~60% off
    error = abs(after - actual) / actual
    assert error < 0.2 and error < abs(before - actual) / actual / 2, (before, after, report)
    assert twin.factors != TwinFactors()


def drive(strategy: Any, limit: int = 30) -> list[tuple[dict[str, KnobValue], TrialResult]]:
    told = []
    while len(told) < limit:
        proposal = strategy.ask()
        if proposal is None:
            break
        result = proposal.preset or measure(proposal.params, proposal.run_id)
        strategy.tell(proposal, result)
        told.append((proposal.params, result))
    return told


def test_the_twin_strategy_reaches_the_optimum_of_a_truth_it_does_not_know(
        truth: Path) -> None:
    space = small_space()
    grid = {params_key(p): measure(p).objective for p in space.grid()}
    optimum = max(grid.values())
    strategy = make_strategy("twin", space, seed=0)
    assert isinstance(strategy, TwinStrategy)
    told = drive(strategy)
    best = max(result.objective for _, result in told)
    assert best >= 0.98 * optimum
    assert len(told) < len([v for v in grid.values() if v > 0])  # not the whole grid
    assert strategy.stop_reason is not None
    assert strategy.stop_reason.startswith("the twin rules out the other ")
    summary = strategy.summary()
    assert summary["booted"] == len(told) and summary["screened"] == summary["candidates"] == 15
    calls = summary["calls"]
    assert [c["measured"] for c in calls] == pytest.approx([r.objective for _, r in told],
                                                           abs=1e-3)
    assert all(c["predicted"] is not None for c in calls)
    assert summary["fit"]["trials"] and summary["factors"] != TwinFactors().as_dict()
    # what it never booted, ranked by its prediction
    booted = {params_key(p) for p, _ in told}
    assert all(params_key(r["params"]) not in booted for r in summary["ranking"])


def test_a_warm_start_from_another_engine_version_starts_afresh() -> None:
    strategy = TwinStrategy(small_space(), seed=0, factors={"compute": 0.5},
                            warm_start="sweep 1's calibration", engine_version="0.31.0")
    assert strategy.twin.factors.compute == 0.5
    proposal = strategy.ask()
    assert proposal is not None
    result = TrialResult(run_id=proposal.run_id, status="failed", failure="crashed",
                         engine=EngineFacts(engine_version="0.32.0"))
    strategy.tell(proposal, result)
    assert strategy.twin.factors == TwinFactors()
    assert strategy.warm_start is None
    assert any("differs from the warm start's 0.31.0" in n for n in strategy.notes)


TINY_QWEN3 = {"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 3072, "vocab_size": 151936,
              "max_position_embeddings": 8192, "tie_word_embeddings": True}


def test_the_twin_models_a_vllm_space_of_a_model_outside_the_catalogue(
        tmp_path: Path) -> None:
    model = tmp_path / "tiny-qwen3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_QWEN3))
    data = {**SMALL, "engine": "vllm", "model": str(model), "gpu": "h100-sxm"}
    space, _, _ = resolve(SweepRequest(space=data, strategy="twin"))
    prediction = Twin(space).predict({"max_num_seqs": 64, "max_num_batched_tokens": 512})
    assert prediction.failure is None and prediction.objective > 0
    # vLLM's CPU build (gpu: cpu) is a device the twin models too, far slower
    on_cpu, _, _ = resolve(SweepRequest(space={**data, "gpu": "cpu"}, strategy="twin"))
    cpu = Twin(on_cpu).predict({"max_num_seqs": 64, "max_num_batched_tokens": 512})
    assert cpu.failure is None and cpu.objective < prediction.objective / 10
    # a config.json the twin cannot model: the sweep is refused, naming the field
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps(
        {k: v for k, v in TINY_QWEN3.items() if k != "intermediate_size"}))
    with pytest.raises(ValueError, match="lacks 'intermediate_size'"):
        resolve(SweepRequest(space={**data, "model": str(broken)}, strategy="twin"))


def test_the_twin_screens_conversations_and_sees_what_prefix_caching_is_worth() -> None:
    # Long conversations: without a prefix cache every turn prefills the whole of it.
    workload = {"name": "talk", "num_prompts": 80, "arrivals": {"request_rate": 8},
                "dataset": {"kind": "multi_turn", "min_turns": 4, "max_turns": 4,
                            "system_prompt_len": 512, "input_len": 300, "output_len": 32,
                            "think_time_s": 0.2}}
    space = parse_space({**SMALL, "workload": workload, "mode": "capacity",
                         "knobs": {"enable_prefix_caching": {"type": "bool", "default": True}}})
    twin = Twin(space)
    cached, uncached = (twin.predict({"enable_prefix_caching": on}) for on in (True, False))
    assert cached.capacity is not None and uncached.capacity is not None
    assert cached.capacity > 1.5 * uncached.capacity


def test_the_twin_predicts_mixture_of_experts_layouts_per_gpu() -> None:
    # The shipped MoE space as a real-engine sweep would run it: the twin reads the same
    # model facts and layout as the simulated engine, once.
    space, _, _ = resolve(SweepRequest(space="moe-h100", strategy="twin"))
    twin = Twin(space)
    single = twin.predict({"tensor_parallel_size": 1, "data_parallel_size": 1,
                           "enable_expert_parallel": False}, full=True)
    wide = twin.predict({"tensor_parallel_size": 1, "data_parallel_size": 4,
                         "enable_expert_parallel": True}, full=True)
    assert single.failure is None and wide.failure is None
    # per GPU: four ranks share one read of the experts per step
    assert wide.objective > single.objective > 0
    assert twin.spec({"tensor_parallel_size": 1, "data_parallel_size": 4,
                      "enable_expert_parallel": True}).gpus == 4
