"""/metrics parsing, summaries, and the decision tree on hand-built metric series."""

from __future__ import annotations

from slotune.workers.contracts import SLO
from slotune.workers.loadgen.client import RequestRecord, RequestTimings
from slotune.workers.loadgen.diagnose.diagnosis import diagnose
from slotune.workers.loadgen.score.scoring import Score, score
from slotune.workers.loadgen.scrape import ScrapeSummary, Snapshot, parse_metrics, summarise

LABELS = 'model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"'

PAGE = f"""# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{LABELS}}} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{LABELS}}} 0.5
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{{{LABELS}}} 2.0
vllm:num_preemptions_created{{{LABELS}}} 1.7e9
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{{{LABELS},le="0.1"}} 4.0
vllm:request_prefill_time_seconds_bucket{{{LABELS},le="+Inf"}} 5.0
vllm:request_prefill_time_seconds_count{{{LABELS}}} 5.0
vllm:request_prefill_time_seconds_sum{{{LABELS}}} 0.9
"""


def test_parse_sums_over_labels_and_keeps_buckets() -> None:
    snap = parse_metrics(PAGE + PAGE.replace('engine="0"', 'engine="1"').split("\n", 2)[2])
    assert snap[("vllm:num_requests_waiting", "")] == 6.0
    assert snap[("vllm:num_preemptions_total", "")] == 4.0
    assert snap[("vllm:request_prefill_time_seconds_bucket", "+Inf")] == 10.0
    assert snap[("vllm:request_prefill_time_seconds_sum", "")] == 1.8


def test_old_gauge_name_is_aliased() -> None:
    snap = parse_metrics("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.7\n")
    assert snap[("vllm:kv_cache_usage_perc", "")] == 0.7


def snap(**values: float) -> Snapshot:
    return {(k.replace("__", ":"), ""): v for k, v in values.items()}


def test_summary_deltas_and_series() -> None:
    snaps = [
        (0.0, snap(vllm__num_requests_waiting=0, vllm__num_preemptions_total=5,
                   vllm__request_queue_time_seconds_count=10,
                   vllm__request_queue_time_seconds_sum=1.0)),
        (1.0, snap(vllm__num_requests_waiting=4, vllm__num_preemptions_total=8,
                   vllm__request_queue_time_seconds_count=30,
                   vllm__request_queue_time_seconds_sum=5.0)),
    ]
    s = summarise(snaps, time_scale=10.0)
    assert s.gauges["vllm:num_requests_waiting"] == [(0.0, 0.0), (10.0, 4.0)]
    assert s.counters["vllm:num_preemptions_total"] == 3.0
    hist = s.histograms["vllm:request_queue_time_seconds"]
    assert (hist.count, hist.sum, hist.mean) == (20.0, 4.0, 0.2)
    assert not summarise([]).available


def _score(ttft_ms: float, tpot_ms: float, slo: SLO) -> Score:
    chunks = (ttft_ms / 1000, ttft_ms / 1000 + tpot_ms / 1000)
    r = RequestRecord(0, 10, 2, RequestTimings(0.0, 0.0, 0.0, chunks, chunks[-1]), 2)
    return score([r], 1.0, slo)


def _summary(waiting: list[float], kv: list[float], preemptions: float = 0.0,
             queue_s: float = 0.01, prefill_s: float = 0.05, running: float = 8) -> ScrapeSummary:
    t = [float(i) for i in range(len(waiting))]
    s = ScrapeSummary(available=True, scrapes=len(t))
    s.gauges = {"vllm:num_requests_waiting": list(zip(t, waiting, strict=True)),
                "vllm:kv_cache_usage_perc": list(zip(t, kv, strict=True)),
                "vllm:num_requests_running": [(x, running) for x in t]}
    s.counters = {"vllm:num_preemptions_total": preemptions}
    from slotune.workers.loadgen.scrape import HistogramDelta
    s.histograms = {
        "vllm:request_queue_time_seconds": HistogramDelta(10, 10 * queue_s),
        "vllm:request_prefill_time_seconds": HistogramDelta(10, 10 * prefill_s),
        "vllm:time_to_first_token_seconds": HistogramDelta(10, 10 * (queue_s + prefill_s)),
    }
    return s


SLO_ = SLO(ttft=300, tpot=50)


def test_kv_bound_even_with_a_queue() -> None:
    d = diagnose(_summary([0, 5, 10, 20], [0.6, 0.97, 0.99, 1.0], preemptions=12),
                 _score(900, 40, SLO_), SLO_)
    assert d is not None and d.wall == "kv" and d.label == "KV-bound"
    assert d.evidence["preemptions"] == 12 and d.evidence["kv_usage_max"] == 1.0
    assert any("gpu-memory-utilization" in k for k in d.knobs)


def test_queue_bound_when_waiting_grows_and_kv_has_room() -> None:
    d = diagnose(_summary([0, 4, 12, 30, 60, 90], [0.3] * 6, queue_s=2.0),
                 _score(2000, 30, SLO_), SLO_)
    assert d is not None and d.wall == "queue"
    assert d.evidence["waiting_growth"] is not None and d.evidence["waiting_growth"] > 0
    assert d.evidence["queue_share_of_ttft"] is not None
    assert any("replicas" in k for k in d.knobs)


def test_prefill_bound() -> None:
    d = diagnose(_summary([0, 0, 1, 0], [0.3] * 4, queue_s=0.02, prefill_s=0.25),
                 _score(280, 20, SLO_), SLO_)
    assert d is not None and d.wall == "prefill"
    assert any("max-num-batched-tokens" in k for k in d.knobs)


def test_decode_bound() -> None:
    d = diagnose(_summary([0, 0, 0, 0], [0.3] * 4), _score(100, 48, SLO_), SLO_)
    assert d is not None and d.wall == "decode"
    assert any("max-num-seqs" in k for k in d.knobs)


def test_at_the_limit_and_no_metrics() -> None:
    d = diagnose(_summary([0, 0, 0, 0], [0.3] * 4), _score(100, 10, SLO_), SLO_)
    assert d is not None and d.wall == "limit"
    assert diagnose(ScrapeSummary(available=False, error="404"), _score(1, 1, SLO_)) is None
