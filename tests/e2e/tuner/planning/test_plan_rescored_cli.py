"""The morning after a real sweep: ``slotune plan --slo`` under an SLO no sweep used.

A real (virtual-time) capacity sweep of the lab space runs as a process into a real
Postgres (the ``swept`` fixture, :mod:`tests.support.rescored`), then ``slotune plan -w lab
--target-rps 20 --slo ttft:500,tpot:30`` answers from the probes it stored — no new sweep,
no new trial — and says so; ``POST /api/v1/capacity`` gives the same answer.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from slotune.tuner.api import create_app
from slotune.tuner.db.store import Store
from slotune.tuner.planning.rescore import probe_verdict
from slotune.workers.contracts import SLO, TrialResult
from tests.support.api import settings_for
from tests.support.rescored import slotune

NEW_SLO = "ttft:500,tpot:30"


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
