"""A real, compiled vLLM boot reuses what an earlier boot of its configuration compiled on
the node, and a configuration that compiles differently gets its own entry.

The CPU build serving the tiny model (``tests/realvllm.py``), without ``--enforce-eager``:
vLLM 0.32 compiles the model with ``torch.compile`` at start-up (its CPU default, no CUDA
graphs), which is the part of the boot a shared cache saves. Three trials in a row,
through ``run_trial`` as a worker runs them, each with two short requests: the first
compiles cold, its repeat boots from the first's entry, and one with another
``max_num_batched_tokens`` (in vLLM's compile hash) compiles an entry of its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests import realvllm
from tests.workers.engines.test_adapters import real_spec
from workers.contracts import SLO, Arrivals, RandomDataset, TrialResult, TrialSpec, Workload
from workers.engines.shared_cache import ENGINE_CACHE_ENV
from workers.trial import run_trial

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

COMPILED_ARGS = {k: v for k, v in realvllm.SERVE_ARGS.items() if k != "enforce_eager"}
TWO_SHORT_REQUESTS = Workload(dataset=RandomDataset(input_len=16, output_len=4),
                              arrivals=Arrivals(request_rate=4), num_prompts=2)


def compiled_spec(name: str, **knobs: object) -> TrialSpec:
    return real_spec(trial_id=f"cache-{name}-{uuid.uuid4().hex[:6]}", engine_args=COMPILED_ARGS,
                     knobs={"max_num_seqs": 8, **knobs}, workload=TWO_SHORT_REQUESTS,
                     slo=SLO(ttft=60_000), early_abort=False)


def init_engine_s(result: TrialResult) -> float:
    """vLLM's own figure for the part of its boot that compiles: ``init engine (profile,
    create kv cache, warmup model) took … s``."""
    assert result.status == "ok", (result.failure, result.failure_message, result.log_tail)
    return result.engine.startup_phases_s["init_engine"]


def test_a_repeat_boots_from_the_first_boots_compile_cache_and_another_configuration_compiles_its_own(  # noqa: E501
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "engine-cache"
    monkeypatch.setenv(ENGINE_CACHE_ENV, str(shared))
    for name in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)

    first = run_trial(compiled_spec("first"), workdir=tmp_path / "first")
    repeat = run_trial(compiled_spec("repeat"), workdir=tmp_path / "repeat")
    other = run_trial(compiled_spec("other", max_num_batched_tokens=1024),
                      workdir=tmp_path / "other")
    cold, warm, other_cold = init_engine_s(first), init_engine_s(repeat), init_engine_s(other)
    boots = [r.timings.boot_s for r in (first, repeat, other)]
    print(f"init engine: cold {cold:.1f} s, repeat {warm:.1f} s, other {other_cold:.1f} s; "
          f"boot to /health: {', '.join(f'{b:.1f}' for b in boots if b is not None)} s")

    assert warm < 0.5 * cold, (cold, warm)
    assert other_cold > 2 * warm, (other_cold, warm)  # nothing of the first fitted it
    # One compiled entry per configuration: vLLM's hash directories are the parents of
    # its per-rank folders (torch_aot_compile/<hash>/rank_0_0 with PyTorch ≥ 2.10).
    compile_cache = shared / "vllm" / "vllm" / "torch_compile_cache"
    entries = {rank.parent for rank in compile_cache.rglob("rank_*")}
    assert len(entries) == 2, sorted(str(e) for e in entries)
    # Nothing compiled into the trials' own directories.
    assert not any((tmp_path / t / "vllm-cache").exists() for t in ("first", "repeat", "other"))
