"""The morning after a sweep: ``slotune plan --slo`` under an SLO no sweep used.

A real (virtual-time) capacity sweep of the lab space runs as a process into a real
Postgres, then ``slotune plan -w lab --target-rps 20 --slo ttft:500,tpot:30`` answers
from the probes it stored — no new sweep, no new trial — and says so; ``POST
/api/v1/capacity`` gives the same answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.tuner.api.conftest import settings_for
from tests.tuner.db.conftest import PostgresDatabases, postgres_databases  # noqa: F401
from tests.tuner.test_rescore import probe
from tuner.api import create_app
from tuner.db import migrate
from tuner.db.snapshot import load_workload
from tuner.db.store import Store, slo_key
from tuner.planning.frontier import build_frontier
from tuner.planning.planner import plan_capacity
from tuner.planning.rescore import probe_verdict
from workers.contracts import SLO, CapacityProbe, TrialResult, TrialSpec, Workload

SLOTUNE = str(Path(sys.executable).with_name("slotune"))
NEW_SLO = "ttft:500,tpot:30"



def slotune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLOTUNE, *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "250"})


@pytest.fixture
def empty(postgres_databases: PostgresDatabases) -> str:  # noqa: F811
    url = postgres_databases.create()
    migrate.upgrade(url)
    return url


def _stored(store: Store, sweep_id: int, number: int, config: dict[str, Any],
            *probes: CapacityProbe) -> int:
    passed = [p.request_rate for p in probes if p.gate_passed]
    capacity = max(passed) if passed else 0.0
    row = store.start_trial(sweep_id, number=number, params=config, worker="w0")
    store.finish_trial(row.id, TrialResult(run_id=f"t{number}", status="ok",
                                           objective=capacity, capacity=capacity,
                                           gate_passed=True, capacity_probes=probes))
    return row.id


def test_configurations_the_probes_cannot_decide_are_named_for_re_measuring(
        empty: str) -> None:
    """A carries 6 req/s under the new SLO, decided; B passes 4, its probe at 9 stopped
    early on TTFT (looser now, so unknown), it fails at 12: B might beat A, and is named."""
    with Store(empty) as store:
        sweep = store.create_sweep(name="s", workload=Workload(name="fleet"),
                                   slo=SLO(ttft=300, tpot=50), space={}, model="m",
                                   gpu="l40s", strategy="random", mode="capacity")
        a = _stored(store, sweep.id, 0, {"max_num_seqs": 64},
                    probe(4, 100, 20), probe(6, 150, 25), probe(8, 200, 35))
        b = _stored(store, sweep.id, 1, {"max_num_seqs": 256}, probe(4, 100, 18),
                    probe(9, 250, 22, early_abort="ttft broke", early_abort_metric="ttft"),
                    probe(12, 900, 60))
        plan = plan_capacity(load_workload(store, "fleet"), target_rps=20,
                             slo=slo_key(SLO(ttft=500, tpot=30)))
    assert plan.basis == "rescored_probes" and plan.trial_ids == [a]
    assert plan.per_replica_rps == 6 and plan.replicas == 5  # ceil(20 / (6 × 0.8))
    assert plan.confidence is not None and plan.confidence.bracket == (6, 8)
    [again] = plan.remeasure
    assert again.trial_ids == [b] and again.at_least_rps == 4 and again.below_rps == 12
    assert "9 req/s" in again.why and "stopped early" in again.why
    assert [o.trial_ids for o in plan.options] == [[a]]  # one (model, GPU): its best


def test_a_repeat_that_breaks_the_new_slo_at_its_lowest_rate_rules_its_configuration_out(
        empty: str) -> None:
    """A's search run carries 6 under the new SLO, but its confirmation repeat breaks it
    already at 4, its lowest probe: the measurements stand together (the lowest, 0), so
    the plan is B's 4 — as the frontier's capacity grid says too."""
    new = SLO(ttft=500, tpot=30)
    with Store(empty) as store:
        sweep = store.create_sweep(name="s", workload=Workload(name="fleet"),
                                   slo=SLO(ttft=300, tpot=50), space={}, model="m",
                                   gpu="l40s", strategy="random", mode="capacity")
        config = {"max_num_seqs": 64}
        a = _stored(store, sweep.id, 0, config, probe(4, 100, 20), probe(6, 150, 25),
                    probe(8, 200, 35))
        spec = TrialSpec.model_validate({
            "run_id": "r", "engine": "sim", "model": "m", "knobs": config,
            "workload": Workload(name="fleet"), "slo": SLO(ttft=300, tpot=50),
            "gpu": "l40s"})
        store.record_trial(sweep.id, role="repeat", number=0, repeat=1, repeat_of=a,
                           params=config, spec=spec, result=TrialResult(
                               run_id="r", status="ok", objective=4.0, capacity=4.0,
                               gate_passed=True,
                               capacity_probes=(probe(4, 120, 40), probe(5, 150, 45))))
        b = _stored(store, sweep.id, 1, {"max_num_seqs": 256}, probe(4, 100, 18),
                    probe(5, 250, 35))
        plan = plan_capacity(load_workload(store, "fleet"), target_rps=20, slo=slo_key(new))
        grid = build_frontier(load_workload(store, "fleet"), slo=slo_key(new)).capacity
    assert plan.trial_ids == [b] and plan.per_replica_rps == 4
    assert [o.trial_ids for o in plan.options] == [[b]]
    cell = grid.per_gpu[grid.ttft_ms.index(500)][grid.tpot_ms.index(30)]
    assert cell == plan.per_replica_rps


@pytest.fixture(scope="module")
def swept(postgres_databases: PostgresDatabases,  # noqa: F811
          tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated Postgres holding one finished capacity sweep of the lab space."""
    url = postgres_databases.create()
    migrate.upgrade(url)
    run = slotune("sweep", "run", "--executor", "virtual", "--trials", "5",
                  "--database-url", url,
                  "--report-dir", str(tmp_path_factory.mktemp("report")))
    assert run.returncode == 0, run.stdout + run.stderr
    return url


def _counts(url: str) -> tuple[int, int]:
    with Store(url) as store:
        sweeps = store.list_sweeps(limit=None).data
        return len(sweeps), sum(len(store.list_trials(s.id, role="any", limit=None).data)
                                for s in sweeps)


@pytest.mark.slow
def test_plan_under_a_new_slo_answers_from_the_stored_probes(swept: str) -> None:
    before = _counts(swept)
    run = slotune("plan", "-w", "lab", "--target-rps", "20", "--slo", NEW_SLO,
                  "--database-url", swept)
    assert run.returncode == 0, run.stderr
    assert "from the stored probes (no sweep measured this SLO)" in run.stdout
    assert "No sweep measured the SLO p99 ttft ≤ 500 ms, tpot ≤ 30 ms: answered from the " \
        "probes stored under p99 ttft ≤ 300 ms, tpot ≤ 50 ms, without a new " \
        "measurement." in run.stdout
    assert "confidence: " in run.stdout

    as_json = slotune("plan", "-w", "lab", "--target-rps", "20", "--slo", NEW_SLO, "--json",
                      "--database-url", swept)
    plan: dict[str, Any] = json.loads(as_json.stdout)
    assert plan["basis"] == "rescored_probes" and plan["confidence"] is not None
    assert json.loads(plan["slo"]) == {"percentile": 99.0, "ttft": 500.0, "tpot": 30.0}
    assert _counts(swept) == before  # nothing was measured to answer

    # The rate sized on is a probe of the plan's trial that holds the new SLO, read off
    # the percentiles it stored; every probe of that trial above it does not.
    with Store(swept) as store:
        trial = store.get_trial(plan["trial_ids"][0])
        sweep = store.get_sweep(trial.sweep_id)
    assert trial.result is not None
    probes = TrialResult.model_validate(trial.result).capacity_probes
    new = SLO.parse(NEW_SLO)
    at = next(p for p in probes if p.request_rate == plan["per_replica_rps"])
    tpot, ttft = at.percentiles_ms["tpot"]["p99"], at.percentiles_ms["ttft"]["p99"]
    assert tpot is not None and ttft is not None and tpot <= 30 and ttft <= 500
    above = [probe_verdict(p, new, own_slo=SLO.model_validate(sweep.slo),
                           max_error_rate=0.05).verdict
             for p in probes if p.request_rate > at.request_rate]
    assert "pass" not in above[:1]
    assert plan["replicas"] * plan["per_replica_rps"] * (1 - plan["headroom"]) >= 20

    # Under the sweep's own SLO the planner still answers from measured capacity.
    own = json.loads(slotune("plan", "-w", "lab", "--target-rps", "20", "--slo",
                             "ttft:300,tpot:50", "--json", "--database-url", swept).stdout)
    assert own["basis"] == "capacity" and own["confidence"] is None and own["remeasure"] == []


@pytest.mark.slow
async def test_the_api_gives_the_same_rescored_answer(swept: str) -> None:
    with Store(swept) as store:
        app = create_app(settings_for(swept), store=store)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answer = await client.post("/api/v1/capacity", json={
                "workload": "lab", "target_rps": 20, "slo": NEW_SLO})
            impossible = await client.post("/api/v1/capacity", json={
                "workload": "lab", "target_rps": 20, "slo": "ttft:1,tpot:1"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    cli = json.loads(slotune("plan", "-w", "lab", "--target-rps", "20", "--slo", NEW_SLO,
                             "--json", "--database-url", swept).stdout)
    assert body == cli
    # No probe holds 1 ms: a clear 422 that says which SLO and on what it rests.
    assert impossible.status_code == 422, impossible.text
    assert "no configuration holds SLO" in impossible.text
