"""The client and runner against the known-timing stub (first chunk at 100 ms, then 20 ms)."""

from __future__ import annotations

import itertools

import pytest

from slotune.workers.contracts import SLO, Arrivals, RandomDataset, Workload
from slotune.workers.loadgen.runner import ServerUnreachable, run_benchmark_sync
from slotune.workers.loadgen.score.scoring import score
from tests.support.loadgen_procs import ITL_MS, TTFT_MS, free_port

TOL = 0.10  # stated tolerance: 10 %
OUT = 10


def workload(n: int = 20, rate: float = 20.0, **kw: object) -> Workload:
    return Workload.model_validate({
        "name": "t", "dataset": RandomDataset(input_len=16, output_len=OUT),
        "arrivals": Arrivals(request_rate=rate), "num_prompts": n, "warmup_requests": 2,
        "seed": 1, **kw,
    })


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_known_timing_metrics(stub_url: str, endpoint: str) -> None:
    run = run_benchmark_sync(stub_url, "m", workload(), endpoint=endpoint)  # type: ignore[arg-type]
    s = score(run.records, run.duration_s)
    assert s.completed == 20 and s.failed == 0 and len(run.warmup_records) == 2
    assert s.total_output_tokens == 20 * OUT  # from usage.completion_tokens
    assert s.summaries["ttft"].median == pytest.approx(TTFT_MS, rel=TOL)
    assert s.summaries["tpot"].mean == pytest.approx(ITL_MS, rel=TOL)
    assert s.summaries["itl"].median == pytest.approx(ITL_MS, rel=TOL)
    assert s.summaries["e2el"].median == pytest.approx(TTFT_MS + (OUT - 1) * ITL_MS, rel=TOL)
    assert all(len(r.timings.chunks) == OUT for r in run.records)
    assert not run.send_lag.client_bound and run.send_lag.p99_ms < 5.0
    assert run.scrape.available and run.scrape.scrapes >= 2
    assert run.scrape.counters["vllm:generation_tokens_total"] == 20 * OUT


def test_time_scale_stretches_measurements_and_compresses_arrivals(stub_url: str) -> None:
    k = 3.0
    w = workload(n=10, rate=20.0 / k, warmup_requests=0)
    w = w.model_copy(update={"arrivals": Arrivals(process="constant", request_rate=20.0 / k)})
    run = run_benchmark_sync(stub_url, "m", w, time_scale=k, scrape_metrics=False)
    s = score(run.records, run.duration_s)
    assert s.summaries["ttft"].median == pytest.approx(k * TTFT_MS, rel=TOL)
    assert s.summaries["itl"].median == pytest.approx(k * ITL_MS, rel=TOL)
    # 10 arrivals every 1/(20/3) engine s = 0.15 s → 1.35 s engine + one E2EL (3 × 280 ms)
    assert run.duration_s == pytest.approx(1.35 + k * 0.28, rel=TOL)
    starts = [r.timings.start for r in run.records]
    assert starts[-1] - starts[0] == pytest.approx(1.35, rel=TOL)


def test_max_concurrency_caps_in_flight(stub_url: str) -> None:
    w = workload(n=8, rate=float("inf"), warmup_requests=0)
    w = w.model_copy(update={"arrivals": Arrivals(max_concurrency=2)})
    run = run_benchmark_sync(stub_url, "m", w, scrape_metrics=False)
    assert len(run.records) == 8
    events = sorted([(r.timings.start, 1) for r in run.records]
                    + [(r.timings.end or 0.0, -1) for r in run.records])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 2
    # 4 waves of 280 ms
    assert run.duration_s == pytest.approx(4 * (TTFT_MS + (OUT - 1) * ITL_MS) / 1000, rel=TOL)
    assert run.send_lag.p99_ms < 5.0  # waiting for a slot is not send lag


def test_early_abort_stops_and_scores_zero(stub_url: str) -> None:
    slo = SLO(ttft=50)  # every request breaks it: TTFT is 100 ms
    w = workload(n=100, rate=20.0)
    run = run_benchmark_sync(stub_url, "m", w, slo, early_abort=True)
    assert run.early_abort is not None
    assert run.early_abort.allowed == 1 and run.early_abort.violations == 2
    assert len(run.records) < 10 and run.duration_s < 1.5
    s = score(run.records, run.duration_s, slo, aborted=run.early_abort.reason)
    assert s.objective == 0.0 and "can no longer hold" in s.gate_reason


def test_failed_requests_are_rows(stub_url: str) -> None:
    run = run_benchmark_sync(stub_url, "broken", workload(n=3, warmup_requests=0))
    assert len(run.records) == 3
    assert all(r.error is not None and r.error.startswith("HTTP 500") for r in run.records)
    s = score(run.records, run.duration_s, SLO(ttft=300))
    assert s.completed == 0 and s.objective == 0.0


def test_deadline_marks_request_failed(stub_url: str) -> None:
    w = workload(n=2, warmup_requests=0, request_timeout_s=0.15)  # E2EL is 280 ms
    run = run_benchmark_sync(stub_url, "m", w, scrape_metrics=False)
    assert all(r.error and r.error.startswith("deadline exceeded") for r in run.records)


def test_no_metrics_endpoint_gives_no_diagnosis(stub_url_no_metrics: str) -> None:
    from slotune.workers.loadgen.diagnose.diagnosis import diagnose

    run = run_benchmark_sync(stub_url_no_metrics, "m", workload(n=3, warmup_requests=0))
    assert not run.scrape.available and "404" in (run.scrape.error or "")
    assert diagnose(run.scrape, score(run.records, run.duration_s)) is None


def test_unreachable_server() -> None:
    with pytest.raises(ServerUnreachable, match="cannot reach"):
        run_benchmark_sync(f"http://127.0.0.1:{free_port()}", "m", workload(n=1))


def test_a_large_metrics_page_does_not_bunch_the_streams(stub_url_big_metrics: str) -> None:
    # Scraping a real vLLM's page while streams run must not stall the loop that stamps
    # them: inter-token gaps stay the server's 20 ms, not zeros after a stall.
    run = run_benchmark_sync(stub_url_big_metrics, "m", workload(n=30, rate=10.0),
                             scrape_interval_s=0.1)
    s = score(run.records, run.duration_s)
    assert run.scrape.available and run.scrape.scrapes >= 5
    itls = sorted(g for r in run.records
                  for g in (b - a for a, b in itertools.pairwise(r.timings.chunks)))
    assert s.summaries["itl"].median == pytest.approx(ITL_MS, rel=TOL)
    # the 10th percentile: no bulk of zeros (parsing the page in the loop gave 0.02 ms)
    assert itls[len(itls) // 10] * 1000 > ITL_MS / 4
