"""Realistic measurements for the API tests: trials stored through the store's own calls."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from slotune.tuner.db.store import Store
from slotune.workers.contracts import CapacityProbe, PhaseTimings, TrialResult
from tests.support.sweep_data import LAB_4RPS

TOKEN = "write-token-for-tests-7f3a"
READ_TOKEN = "read-token-for-tests-91c2"
WRITE = {"Authorization": f"Bearer {TOKEN}"}


async def queue(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """Queue a sweep through the API (default: the shipped ``lab`` space, in goodput mode
    at 4 req/s)."""
    body = {"mode": "goodput", "workload": LAB_4RPS, **body}
    response = await client.post("/api/v1/sweeps", json=body, headers=WRITE)
    assert response.status_code == 201, response.text
    sweep: dict[str, Any] = response.json()
    return sweep


def result(objective: float, *, capacity: float | None = None, rate: float = 4.0,
           gate: bool = True) -> TrialResult:
    """What a finished trial reports: goodput at the workload's rate, percentiles, and for
    capacity mode the probes of the rate search."""
    ttft, tpot = (180.0, 32.0) if gate else (900.0, 75.0)
    probes: tuple[CapacityProbe, ...] = ()
    if capacity is not None:
        probes = (CapacityProbe(request_rate=capacity, gate_passed=True,
                                request_goodput=capacity * 0.99, ratios={"ttft": 0.9}),
                  CapacityProbe(request_rate=capacity * 1.1, gate_passed=False,
                                request_goodput=capacity * 0.8, ratios={"ttft": 1.4}))
    now = datetime.now(UTC)
    return TrialResult(
        run_id="t", status="ok", objective=objective,
        request_goodput=objective if gate else rate * 0.4, gate_passed=gate,
        constraints={"ttft": ttft / 300 - 1, "tpot": tpot / 50 - 1},
        slo_margins={"ttft": 1 - ttft / 300, "tpot": 1 - tpot / 50},
        headroom=min(1 - ttft / 300, 1 - tpot / 50),
        metrics={"request_throughput": rate * 0.995, "request_goodput": objective,
                 "output_throughput": rate * 127.0, "p50_ttft_ms": ttft * 0.4,
                 "p90_ttft_ms": ttft * 0.8, "p99_ttft_ms": ttft, "p50_tpot_ms": tpot * 0.6,
                 "p90_tpot_ms": tpot * 0.9, "p99_tpot_ms": tpot, "p99_itl_ms": tpot * 1.5,
                 "p99_e2el_ms": ttft + 127 * tpot, "completed": 200, "mean_ttft_ms": ttft / 2},
        diagnosis={"binding": "decode", "hint": "max_num_seqs"},
        capacity=capacity, capacity_probes=probes,
        timings=PhaseTimings(boot_s=21.5, warmup_s=2.0, measure_s=50.1, teardown_s=1.2,
                             total_s=74.8, started_at=now, finished_at=now),
    )


def measure(store: Store, sweep_id: int, number: int, config: dict[str, Any],
            objective: float, *, capacity: float | None = None, confirmed: bool = False,
            gate: bool = True) -> int:
    """Record one finished trial the way the coordinator does; its id."""
    trial = store.start_trial(sweep_id, number=number, params=config, worker="w0")
    store.finish_trial(trial.id, result(objective, capacity=capacity, gate=gate))
    if confirmed:
        store.mark_confirmed(trial.id)
    return trial.id
