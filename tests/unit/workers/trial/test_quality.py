"""The quality gate: agreement, the user's command, and a lossy trial on the live engine.

The golden check's live-vs-virtual agreement is in the parity suite; the real-vLLM run in
``tests/e2e/vllm/test_real_vllm.py``.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from slotune.workers.contracts import (
    SLO,
    CommandCheck,
    GoldenCheck,
    QualityGate,
    TrialSpec,
    Workload,
)
from slotune.workers.engines.sim import SimOptions
from slotune.workers.sim.numerics import FLIP_RATES, flip_rate
from slotune.workers.sim.tokenizer import encode
from slotune.workers.trial.live import run_trial
from slotune.workers.trial.quality import QualityUnavailable, agreement, run_command
from slotune.workers.trial.virtual import engine_config, golden_answers, run_virtual_trial
from tests.support.procscan import engine_pids

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"


# --- agreement ---------------------------------------------------------------------------


def test_agreement_counts_equal_positions_and_where_answers_end() -> None:
    reference = [(1, 2, 3, 4), (5, 6)]
    assert agreement(reference, reference, 4) == 1.0
    # one token changed, then diverged: positions 2 and 3 of the first answer differ
    assert agreement(reference, [(1, 2, 9, 9), (5, 6)], 4) == pytest.approx(6 / 8)
    # an answer that stops early disagrees where the other goes on; both ended agree
    assert agreement(reference, [(1, 2), (5, 6)], 4) == pytest.approx(6 / 8)
    # only the first max_tokens positions count
    assert agreement(reference, [(1, 2, 3, 0), (5, 6)], 3) == 1.0
    with pytest.raises(ValueError, match="one candidate answer per reference"):
        agreement(reference, [(1,)], 4)


def test_the_simulator_flips_more_tokens_the_fewer_bits_it_keeps() -> None:
    gate = GoldenCheck()
    spec = _spec({})
    lossless = golden_answers(engine_config(spec), gate)
    shares = {}
    for knobs in ({"quantization": "fp8"}, {"kv_cache_dtype": "fp8"},
                  {"kv_cache_dtype": "fp8_e5m2"}, {"quantization": "awq"}):
        config = engine_config(_spec(knobs))
        assert config.flip_rate == flip_rate(config.quantization, config.kv_cache_dtype) > 0
        shares[next(iter(knobs.values()))] = agreement(lossless, golden_answers(config, gate),
                                                       gate.max_tokens)
    assert all(0 < share < 1 for share in shares.values()), shares
    assert shares["awq"] < 0.9 < min(shares["fp8"], shares["fp8_e5m2"])
    # the flips are the weights', not the engine seed's: a repeat answers the same
    reseeded = engine_config(_spec({"quantization": "awq"}, seed=7))
    reseeded_lossless = golden_answers(engine_config(_spec({}, seed=7)), gate)
    assert agreement(reseeded_lossless, golden_answers(reseeded, gate),
                     gate.max_tokens) == shares["awq"]
    assert set(FLIP_RATES["quantization"]) >= {"fp8", "awq", "gptq"}
    # lossless numerics say exactly the prompt's answer, the tokenizer's ids
    assert all(len(answer) == gate.max_tokens for answer in lossless)
    assert encode("w1", 152064)  # the answer words tokenize as the server does


# --- the user's command ------------------------------------------------------------------


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / f"check_{uuid.uuid4().hex[:6]}.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_command_gets_the_url_and_model_and_its_last_number_is_the_score(
        tmp_path: Path) -> None:
    script = _script(tmp_path, """
        import os, sys
        assert sys.argv[1] == os.environ["SLOTUNE_BASE_URL"] == "http://h:1"
        assert sys.argv[2] == os.environ["SLOTUNE_MODEL"] == "m"
        print("accuracy on 3 tasks:")
        print("0.25 then 0.75")
    """)
    check = CommandCheck(argv=(sys.executable, script, "{base_url}", "{model}"), min_score=0.5)
    assert asyncio.run(run_command(check, "http://h:1", "m")) == 0.75


@pytest.mark.parametrize(("body", "argv0", "message"), [
    ("import sys; sys.exit(4)", None, "exited 4"),
    ("print('no score here')", None, "printed no score"),
    ("import time; time.sleep(30)", None, "ran past"),
    ("", "/no/such/evaluator", "could not start"),
])
def test_a_command_that_cannot_score_says_why(tmp_path: Path, body: str, argv0: str | None,
                                              message: str) -> None:
    argv = (argv0,) if argv0 else (sys.executable, _script(tmp_path, body))
    check = CommandCheck(argv=argv, min_score=0.5, timeout_s=1.0)
    with pytest.raises(QualityUnavailable, match=message):
        asyncio.run(run_command(check, "http://h:1", "m"))


def test_a_gate_needs_exactly_one_check() -> None:
    with pytest.raises(ValueError, match="exactly one check"):
        QualityGate(lossy=("quantization=fp8",), baseline={"quantization": None})
    with pytest.raises(ValueError, match="exactly one check"):
        QualityGate(lossy=("quantization=fp8",), baseline={"quantization": None},
                    golden=GoldenCheck(), command=CommandCheck(argv=("x",), min_score=1))


# --- a lossy trial on the live simulated engine --------------------------------------------


def _spec(knobs: dict[str, object], *, seed: int = 0, quality: QualityGate | None = None,
          prompts: int = 30) -> TrialSpec:
    return TrialSpec(
        run_id=f"quality-{uuid.uuid4().hex[:8]}", engine="sim", model=QWEN7B,
        knobs=knobs, engine_args={"max_model_len": 4096}, gpu="rtx4090",
        workload=Workload(name="q", dataset={"kind": "random", "input_len": 256,
                                             "output_len": 32},
                          arrivals={"request_rate": 2}, num_prompts=prompts),
        slo=SLO.parse("ttft:500,tpot:60"), sim=SimOptions(seed=seed, time_scale=2),
        quality=quality)


def _command_gate(tmp_path: Path, min_score: float) -> QualityGate:
    # An evaluator as a user writes one: it asks the served engine something and scores.
    script = _script(tmp_path, """
        import json, sys, urllib.request
        base, model = sys.argv[1], sys.argv[2]
        body = json.dumps({"model": model, "prompt": "2 + 2 =", "max_tokens": 4,
                           "temperature": 0}).encode()
        request = urllib.request.Request(base + "/v1/completions", body,
                                         {"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(request, timeout=30))
        print("score", 0.8 if answer["choices"][0]["text"].strip() else 0.0)
    """)
    return QualityGate(lossy=("quantization=fp8",), baseline={"quantization": None},
                       command=CommandCheck(argv=(sys.executable, script, "{base_url}",
                                                  "{model}"), min_score=min_score))


@pytest.mark.slow
def test_a_command_check_runs_against_the_booted_engine(tmp_path: Path) -> None:
    passed = run_trial(_spec({"quantization": "fp8"}, quality=_command_gate(tmp_path, 0.5)))
    assert passed.status == "ok" and passed.quality is not None
    assert (passed.quality.method, passed.quality.score, passed.quality.passed) == (
        "command", 0.8, True)
    assert passed.objective > 0 and passed.constraints["quality"] < 0

    failed = run_trial(_spec({"quantization": "fp8"}, quality=_command_gate(tmp_path, 0.9)))
    assert failed.quality is not None and failed.quality.passed is False
    assert failed.objective == 0.0 and failed.constraints["quality"] > 0
    assert "below 0.9" in (failed.quality.detail or "")
    assert engine_pids(passed.run_id) == engine_pids(failed.run_id) == []


def test_allowed_lossy_values_score_unchecked_and_say_so() -> None:
    gate = QualityGate(lossy=("quantization=awq",), baseline={"quantization": None},
                       golden=GoldenCheck(), allow_lossy=True)
    result = run_virtual_trial(_spec({"quantization": "awq"}, quality=gate))
    assert result.objective > 0  # AWQ fails the golden check, but it was not run
    assert result.quality is not None
    assert (result.quality.checked, result.quality.passed) == (False, None)
    assert "--allow-lossy" in (result.quality.detail or "")
    assert result.constraints["quality"] == 0.0


def test_a_baseline_that_cannot_boot_fails_the_check_with_the_reason() -> None:
    # Weights in fp8 fit where bf16 does not: the baseline cannot boot, so nothing vouches
    # for the lossy answers, and the configuration does not score.
    gate = QualityGate(lossy=("quantization=fp8",), baseline={"quantization": None},
                       golden=GoldenCheck())
    spec = _spec({"quantization": "fp8"}, quality=gate).model_copy(update={
        "model": "Qwen/Qwen2.5-32B-Instruct", "gpu": "l40s"})
    result = run_virtual_trial(spec)
    assert result.status == "ok" and result.objective == 0.0
    assert result.quality is not None and result.quality.passed is False
    assert not result.quality.checked
    assert "baseline" in (result.quality.detail or "")
    assert result.constraints["quality"] == 1.0


def test_a_configuration_that_passed_its_check_then_failed_under_load_keeps_its_verdict(
        ) -> None:
    gate = QualityGate(lossy=("quantization=fp8",), baseline={"quantization": None},
                       golden=GoldenCheck())
    spec = _spec({"quantization": "fp8"}, quality=gate, prompts=20)
    spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={
        "dataset": spec.workload.dataset.model_copy(update={"input_len": 5000})})})
    result = run_virtual_trial(spec)  # every prompt past max_model_len: refused requests
    assert (result.status, result.failure) == ("failed", "benchmark_errors")
    assert result.quality is not None and result.quality.passed is True
