"""Strategies: the shared contract for every strategy, then each one's own behaviour."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import optuna
import pytest

from slotune.tuner.spaces import parse_space
from slotune.tuner.strategies import (
    DUPLICATE_ATTR,
    STRATEGIES,
    GridStrategy,
    GuidedStrategy,
    StrategyError,
    TPEStrategy,
    make_strategy,
    params_key,
    rank,
)
from slotune.workers.contracts import TrialResult

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = parse_space({
    "name": "t",
    "model": "Qwen/Qwen2.5-7B-Instruct",
    "gpu": "rtx4090",
    "fixed": {"max_model_len": 4096},
    "knobs": {
        "max_num_seqs": {"type": "values", "values": [64, 128, 256, 512], "default": 256},
        "max_num_batched_tokens": {"type": "values", "values": [256, 1024, 2048, 4096],
                                   "default": 2048},
        "enable_prefix_caching": {"type": "bool", "default": True},
    },
    "workload": {"name": "w", "dataset": {"kind": "random", "input_len": 512,
                                          "output_len": 64},
                 "arrivals": {"request_rate": 3}, "num_prompts": 40},
    "slo": "ttft:300,tpot:50",
})


def synthetic(params: dict[str, Any], wall: str = "prefill") -> TrialResult:
    """A made-up landscape: peaks at max_num_batched_tokens 1024, max_num_seqs 128."""
    tokens, seqs = params["max_num_batched_tokens"], params["max_num_seqs"]
    obj = 10.0 - abs(tokens - 1024) / 512 - abs(seqs - 128) / 128
    return TrialResult(run_id="x", status="ok", objective=max(obj, 0.0), gate_passed=True,
                       headroom=0.8, constraints={"ttft": -0.2},
                       diagnosis={"wall": wall, "label": wall, "reason": "test",
                                  "evidence": {}})


def drive(strategy: Any, evaluate: Callable[[dict[str, Any]], TrialResult],
          limit: int = 100) -> list[TrialResult]:
    told: list[TrialResult] = []
    while len(told) < limit:
        p = strategy.ask()
        if p is None:
            break
        result = p.preset if p.preset is not None else evaluate(p.params)
        strategy.tell(p, result)
        told.append(result)
    return told


@pytest.mark.parametrize("name", list(STRATEGIES))
class TestContract:
    """What every strategy promises (the base class's docstring)."""

    def test_parallel_asks_out_of_order_tells_and_optuna_sees_every_trial(
            self, name: str) -> None:
        s = make_strategy(name, SPACE, seed=0)
        batch = [p for p in (s.ask() for _ in range(3)) if p is not None]
        assert batch, "a fresh strategy proposes something"
        assert len({params_key(p.params) for p in batch}) == len(batch)
        for p in reversed(batch):
            s.tell(p, p.preset or synthetic(p.params))
        with pytest.raises(StrategyError):
            s.tell(batch[0], synthetic(batch[0].params))
        drive(s, synthetic, limit=20)
        states = {t.state for t in s.study.trials}
        assert states <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL}
        measured = [params_key(o.proposal.params) for o in s.history]
        assert len(measured) == len(set(measured)), "no configuration measured twice"

    def test_optuna_holds_each_measurement_once(self, name: str) -> None:
        s = make_strategy(name, SPACE, seed=3)
        drive(s, synthetic, limit=28)  # most of the 32 configurations: the sampler repeats
        complete = [t for t in s.study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert sorted(t.number for t in complete) == sorted(o.proposal.number
                                                            for o in s.history)
        repeats = [t for t in s.study.trials if DUPLICATE_ATTR in t.user_attrs]
        for t in repeats:  # a sampler's repeat: failed, pointing at the one measurement
            assert t.state == optuna.trial.TrialState.FAIL
            first = s.study.trials[t.user_attrs[DUPLICATE_ATTR]]
            assert first.state == optuna.trial.TrialState.COMPLETE and first.params == t.params
        if name in ("random", "tpe"):
            assert repeats, "a sampler over 32 configurations repeats itself within 28"

    def test_rule_breakers_come_preset_infeasible_and_teach_optuna(self, name: str) -> None:
        s = make_strategy(name, SPACE, seed=1)
        results = drive(s, synthetic, limit=64)
        for obs in s.history:
            rule = SPACE.check(obs.proposal.params)
            assert (obs.result.status == "infeasible") == (rule is not None)
            if rule is not None:
                assert obs.proposal.preset is not None and obs.result.violated_rule == rule
                trial = s.study.trials[obs.proposal.number]
                assert trial.value == 0 and trial.constraints["rule"] > 0
        assert results


def test_unknown_strategy_lists_the_valid_ones() -> None:
    with pytest.raises(StrategyError) as err:
        make_strategy("bayes", SPACE)
    assert all(n in str(err.value) for n in STRATEGIES)


def test_one_knob_grid_is_the_seeds_slo_tune() -> None:
    s = GridStrategy(SPACE, knob="max_num_seqs")
    told = drive(s, synthetic)
    swept = [o.proposal.params for o in s.history]
    assert [p["max_num_seqs"] for p in swept] == [64, 128, 256, 512]
    assert all(p["max_num_batched_tokens"] == 2048 for p in swept)
    assert s.done and len(told) == 4


def test_full_grid_walks_every_config_in_order() -> None:
    s = GridStrategy(SPACE)
    drive(s, synthetic, limit=1000)
    assert [o.proposal.params for o in s.history] == list(SPACE.grid())


def test_tpe_tries_the_engine_defaults_first_and_finds_the_peak() -> None:
    s = TPEStrategy(SPACE, seed=0)
    drive(s, synthetic, limit=25)
    assert s.history[0].proposal.params == SPACE.defaults()
    best = max(o.result.objective for o in s.history)
    top = max(synthetic(p).objective for p in SPACE.grid())
    assert best >= 0.9 * top


def test_guided_sweeps_the_knob_of_the_diagnosed_wall_and_writes_cards() -> None:
    s = GuidedStrategy(SPACE)
    drive(s, synthetic)
    first = s.cards[0]
    assert first.variable == "max_num_batched_tokens"  # prefill wall → chunk size first
    assert first.verdict == "supported" and s.incumbent["max_num_batched_tokens"] == 1024
    assert any(c.verdict == "rejected" for c in s.cards)
    assert all(c.hypothesis and c.expected and c.rollback for c in s.cards)
    assert s.done and "plateau" in str(s.stop_reason)
    assert s.incumbent_result is not None
    assert s.incumbent_result.objective == max(synthetic(p).objective for p in SPACE.grid())


def test_guided_separates_rejected_from_inconclusive() -> None:
    # enable_prefix_caching does nothing in this landscape: within noise, one run each —
    # inconclusive; max_num_batched_tokens away from its peak is clearly worse — rejected.
    s = GuidedStrategy(SPACE, seed=0)
    drive(s, synthetic, limit=40)
    verdicts = {(c.variable, c.verdict) for c in s.cards}
    assert ("enable_prefix_caching", "inconclusive") in verdicts
    assert ("enable_prefix_caching", "rejected") not in verdicts
    rejected = [c for c in s.cards if c.verdict == "rejected"]
    assert rejected and all(c.variable == "max_num_batched_tokens" for c in rejected)
    for card in s.cards:  # every value tried, each with its own row, in the card itself
        assert card.values == [r["value"] for r in card.results]
        assert card.rollback["config"][card.variable] == card.baseline_value


def test_guided_line_search_stops_past_the_peak_and_skips_the_far_side() -> None:
    s = GuidedStrategy(SPACE)
    drive(s, synthetic)
    tried = [v["value"] for v in s.cards[0].results]
    # from the default 2048: down (the wider side) gains at 1024, loses at 256 → stop;
    # the peak lies below, so 4096 above is never booted for this step
    assert tried == [1024, 256]
    step = [o.proposal.params for o in s.history if "step 1:" in o.proposal.note]
    assert all(p["max_num_batched_tokens"] != 4096 for p in step)


KV_SPACE = parse_space({
    "name": "kv",
    "model": "Qwen/Qwen2.5-7B-Instruct",
    "gpu": "rtx4090",
    "knobs": {
        "gpu_memory_utilization": {"type": "values", "values": [0.8, 0.85, 0.9, 0.95],
                                   "default": 0.9},
        "max_model_len": {"type": "values", "values": [4096, 8192, 16384], "default": 16384},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"],
                           "default": "auto"},
    },
    "workload": {"name": "w", "dataset": {"kind": "random", "input_len": 2048,
                                          "output_len": 256},
                 "arrivals": {"request_rate": 1}, "num_prompts": 40},
    "slo": "ttft:2000,tpot:60",
})


def kv_pool(params: dict[str, Any]) -> TrialResult:
    """A KV-bound landscape: capacity grows with the pool (memory, bytes per token) only."""
    pool = params["gpu_memory_utilization"] * (2.0 if params["kv_cache_dtype"] == "fp8" else 1)
    return TrialResult(run_id="x", status="ok", objective=pool, gate_passed=True,
                       headroom=0.9, diagnosis={"wall": "kv", "label": "KV-bound",
                                                "reason": "test", "evidence": {}})


def test_guided_on_a_full_kv_pool_grows_it_before_touching_max_model_len() -> None:
    s = GuidedStrategy(KV_SPACE)
    drive(s, kv_pool)
    first, second = s.cards[0], s.cards[1]
    assert (first.variable, first.values, first.verdict) == (
        "gpu_memory_utilization", [0.95], "supported")  # a full pool needs more, not less
    assert (second.variable, second.verdict) == ("kv_cache_dtype", "supported")
    assert [o.proposal.params["max_model_len"] for o in s.history[:3]] == [16384] * 3
    assert s.incumbent_result is not None and s.incumbent_result.objective == pytest.approx(1.9)


def test_guided_stops_at_a_queue_wall_saying_add_replicas() -> None:
    s = GuidedStrategy(SPACE)
    told = drive(s, lambda p: synthetic(p, wall="queue"))
    assert len(told) == 1 and s.done and "add replicas" in str(s.stop_reason)


def test_ranking_prefers_headroom_within_noise() -> None:
    def res(obj: float, head: float) -> TrialResult:
        return TrialResult(run_id="r", status="ok", objective=obj, headroom=head)

    results = [res(10.0, 0.9), res(9.9, 0.5), res(8.0, 0.1)]
    assert rank(results) == [1, 0, 2]


def test_a_tell_retried_after_the_storage_failed_mid_tell_writes_each_constraint_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The outbox retries a tell whose storage went away after the constraints were
    # written and before the trial was finished (a Postgres restart): the retry must
    # neither fail nor make Optuna warn that a constraint is "already set".
    s = make_strategy("random", SPACE, seed=0)
    proposal = s.ask()
    assert proposal is not None
    result = proposal.preset or synthetic(proposal.params)
    finish = s.study.tell
    calls = {"n": 0}

    def storage_gone_once(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("the database went away")
        return finish(*args, **kwargs)

    monkeypatch.setattr(s.study, "tell", storage_gone_once)
    with pytest.raises(ConnectionError):
        s.tell(proposal, result)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.tell(proposal, result)
    trial = s.study.trials[proposal.number]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.constraints and trial.value == result.objective
    assert [o.proposal.number for o in s.history] == [proposal.number]
