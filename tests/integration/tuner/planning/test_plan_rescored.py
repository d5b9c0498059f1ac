"""The morning after a sweep: ``slotune plan --slo`` under an SLO no sweep used.

A real (virtual-time) capacity sweep of the lab space runs as a process into a real
Postgres, then ``slotune plan -w lab --target-rps 20 --slo ttft:500,tpot:30`` answers
from the probes it stored — no new sweep, no new trial — and says so; ``POST
/api/v1/capacity`` gives the same answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from slotune.tuner.db import migrate
from slotune.tuner.db.snapshot import load_workload
from slotune.tuner.db.store import Store, slo_key
from slotune.tuner.planning.frontier import build_frontier
from slotune.tuner.planning.planner import plan_capacity
from slotune.workers.contracts import SLO, CapacityProbe, TrialResult, TrialSpec, Workload
from tests.support.postgres import PostgresDatabases
from tests.support.rescored import probe


@pytest.fixture
def empty(postgres_databases: PostgresDatabases) -> str:
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
