"""LiveStats: the rolling per-model request statistics behind the dashboard, on a fake clock."""

from __future__ import annotations

import json
import math
import threading
import tracemalloc

import numpy as np
import pytest

from service.observability.stats import LiveStats, nearest_rank

T0 = 1_000_000.0  # a multiple of every bucket width used here, so buckets start at T0


class FakeClock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(window_s: float = 60.0, bucket_s: float = 5.0, **kwargs) -> tuple[LiveStats, FakeClock]:
    clock = FakeClock()
    return LiveStats(window_s, bucket_s, clock, **kwargs), clock


def request(stats: LiveStats, ms: float, ok: bool = True, queue_ms: float | None = None, model: str = "m") -> None:
    stats.record_request(model, "1", "v2", ms / 1000, ok, None if queue_ms is None else queue_ms / 1000)


def test_percentiles_are_nearest_rank():
    stats, _ = make()
    for ms in range(100, 0, -1):  # 100 ms .. 1 ms, out of order
        request(stats, ms)
    m = stats.snapshot()["models"]["m"]
    assert (m["p50_ms"], m["p95_ms"], m["p99_ms"]) == pytest.approx((50, 95, 99))


def test_percentiles_of_few_samples():
    stats, _ = make()
    for ms in (30, 10, 20):
        request(stats, ms)
    m = stats.snapshot()["models"]["m"]
    # ranks ceil(0.5*3)=2, ceil(0.95*3)=3, ceil(0.99*3)=3
    assert (m["p50_ms"], m["p95_ms"], m["p99_ms"]) == pytest.approx((20, 30, 30))


@pytest.mark.parametrize("n", [1, 2, 19, 20, 21, 100, 101, 1000])
def test_nearest_rank_matches_its_definition(n):
    values = [float(v) for v in range(n, 0, -1)]
    expected = [float(math.ceil(p * n / 100)) for p in (50, 95, 99)]  # rank ceil(p * n / 100) of 1..n
    assert nearest_rank(values, (50, 95, 99)) == expected
    assert nearest_rank(values, (50, 95, 99), np.full(n, 2.5)) == expected  # uniform weights change nothing
    assert nearest_rank([], (50,)) == [None]


def test_weighted_nearest_rank():
    # 1.0 weighs 3, 2.0 weighs 1: 75% of the weight is at 1.0
    assert nearest_rank([2.0, 1.0], (50, 75, 76), np.array([1.0, 3.0])) == [1.0, 1.0, 2.0]


def test_error_rate_counts_failures_and_times_them_too():
    stats, _ = make()
    for i in range(10):
        request(stats, 1.0 if i < 7 else 100.0, ok=i < 7)
    m = stats.snapshot()["models"]["m"]
    assert (m["requests"], m["errors"], m["error_rate"]) == (10, 3, 0.3)
    assert m["p99_ms"] == pytest.approx(100.0)  # failed requests' latency counts


def test_rps_over_the_span_covered_since_the_first_bucket_with_data():
    stats, clock = make(window_s=60, bucket_s=5)
    clock.now = T0 + 2.0  # inside the bucket starting at T0
    for _ in range(30):
        request(stats, 1.0)
    clock.now = T0 + 12.0
    for _ in range(30):
        request(stats, 1.0)
    m = stats.snapshot()["models"]["m"]
    assert m["span_s"] == 12.0  # from the start of the first bucket with data, T0, to now
    assert m["rps"] == 60 / 12.0


def test_rps_span_is_at_least_one_second():
    stats, clock = make()
    clock.now = T0 + 0.01
    for _ in range(5):
        request(stats, 1.0)
    m = stats.snapshot()["models"]["m"]
    assert (m["span_s"], m["rps"]) == (1.0, 5.0)


def test_rps_span_never_exceeds_the_window():
    stats, clock = make(window_s=60, bucket_s=5)
    for step in range(200):
        clock.now = T0 + step
        request(stats, 1.0)
    m = stats.snapshot()["models"]["m"]
    # the window holds the current bucket (started at T0+195, 4 s old) and the 11 full ones before it
    assert m["span_s"] == 59.0
    assert m["requests"] == 60
    assert m["rps"] == 60 / 59.0


def test_series_has_one_point_per_bucket_on_a_shared_time_axis():
    stats, clock = make(window_s=60, bucket_s=5)
    clock.now = T0 + 1
    request(stats, 2.0, queue_ms=0.5)
    stats.record_batch("m", "1", 4)
    clock.now = T0 + 11  # two buckets later; the one between stays empty
    request(stats, 8.0, ok=False)
    request(stats, 6.0)
    clock.now = T0 + 13
    series = stats.snapshot()["models"]["m"]["series"]
    assert len(series) == 12
    assert [p["t"] for p in series] == [T0 + 10 - 5 * k for k in range(11, -1, -1)]
    first, empty, last = series[-3], series[-2], series[-1]
    assert (first["t"], first["requests"], first["rps"], first["span_s"]) == (T0, 1, 1 / 5, 5.0)
    assert first["p50_ms"] == pytest.approx(2.0) and first["queue_ms"] == pytest.approx(0.5)
    assert (first["batch_size"], first["batch_size_max"]) == (4.0, 4)
    assert empty["requests"] == 0 and empty["rps"] == 0.0 and empty["error_rate"] == 0.0
    assert empty["p50_ms"] is None and empty["queue_ms"] is None and empty["batch_size"] is None
    # the current bucket has run 3 s so far
    assert (last["requests"], last["errors"], last["error_rate"]) == (2, 1, 0.5)
    assert (last["span_s"], last["rps"]) == (3.0, 2 / 3.0)
    assert last["p50_ms"] == pytest.approx(6.0) and last["p99_ms"] == pytest.approx(8.0)


def test_buckets_roll_out_of_the_window():
    stats, clock = make(window_s=60, bucket_s=5)
    request(stats, 100.0)  # bucket T0
    clock.now = T0 + 30
    request(stats, 1.0)  # bucket T0+30
    clock.now = T0 + 59.9  # bucket T0+55: T0 is still the oldest of 12
    assert stats.snapshot()["models"]["m"]["requests"] == 2
    clock.now = T0 + 60.0  # bucket T0+60: T0 has left
    m = stats.snapshot()["models"]["m"]
    assert (m["requests"], m["p99_ms"]) == (1, pytest.approx(1.0))
    assert m["span_s"] == 30.0
    clock.now = T0 + 90.0  # everything has left: the model is no longer shown
    assert stats.snapshot()["models"] == {}


def test_a_reused_slot_starts_empty():
    stats, clock = make(window_s=10, bucket_s=5)
    request(stats, 100.0)
    clock.now = T0 + 10  # same slot as T0 in a ring of two
    request(stats, 1.0)
    m = stats.snapshot()["models"]["m"]
    assert (m["requests"], m["p50_ms"]) == (1, pytest.approx(1.0))


def test_batch_sizes():
    stats, clock = make()
    request(stats, 1.0)
    assert stats.snapshot()["models"]["m"]["batch_size_mean"] is None
    for size in (1, 4, 7):
        stats.record_batch("m", "1", size)
    clock.now = T0 + 5
    stats.record_batch("m", "1", 12)
    m = stats.snapshot()["models"]["m"]
    assert (m["batches"], m["batch_size_mean"], m["batch_size_max"]) == (4, 6.0, 12)
    assert [(p["batch_size"], p["batch_size_max"]) for p in m["series"][-2:]] == [(4.0, 7), (12.0, 12)]


def test_queue_time_only_from_requests_that_report_it():
    stats, _ = make()
    request(stats, 5.0)
    m = stats.snapshot()["models"]["m"]
    assert (m["queue_p50_ms"], m["queue_p95_ms"]) == (None, None)
    for q in range(1, 21):
        request(stats, 5.0, queue_ms=float(q))
    m = stats.snapshot()["models"]["m"]
    assert (m["queue_p50_ms"], m["queue_p95_ms"]) == pytest.approx((10.0, 19.0))


def test_models_versions_and_protocols_are_kept_apart():
    stats, _ = make()
    stats.record_request("a", "1", "v2", 0.001, True)
    stats.record_request("a", "2", "tfserving", 0.001, True)
    stats.record_request("a", "2", "v2", 0.001, True)
    stats.record_request("b", "1", "v2", 0.003, False)
    models = stats.snapshot()["models"]
    assert list(models) == ["a", "b"]
    assert models["a"]["versions"] == {"1": 1, "2": 2}
    assert models["a"]["protocols"] == {"tfserving": 1, "v2": 2}
    assert (models["a"]["error_rate"], models["b"]["error_rate"]) == (0.0, 1.0)


def test_snapshot_is_json_ready():
    stats, _ = make()
    request(stats, 1.0, queue_ms=0.1)
    stats.record_batch("m", "1", 3)
    snapshot = stats.snapshot()
    assert json.loads(json.dumps(snapshot, allow_nan=False)) == snapshot
    assert (snapshot["generated_at"], snapshot["window_s"], snapshot["bucket_s"]) == (T0, 60.0, 5.0)


def test_empty():
    stats, _ = make()
    assert stats.snapshot()["models"] == {}


def test_invalid_window():
    with pytest.raises(ValueError):
        LiveStats(window_s=1, bucket_s=5)
    with pytest.raises(ValueError):
        LiveStats(bucket_s=0)


def test_concurrent_recording_loses_nothing():
    stats, _ = make(max_samples=64)
    threads, per_thread = 8, 5000

    def work(k: int) -> None:
        for i in range(per_thread):
            stats.record_request("m", str(k % 2), "v2", 0.001, ok=i % 10 != 0, queue_s=0.0001)
            if i % 5 == 0:
                stats.record_batch("m", "1", 2)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    m = stats.snapshot()["models"]["m"]
    assert m["requests"] == threads * per_thread
    assert m["errors"] == threads * per_thread // 10
    assert m["batches"] == threads * per_thread // 5
    assert m["versions"] == {"0": threads // 2 * per_thread, "1": threads // 2 * per_thread}


def test_sampling_beyond_the_cap_keeps_percentiles_close():
    stats, _ = make(max_samples=512, seed=7)
    for i in range(20_000):
        request(stats, (i % 1000) + 1.0)  # uniform over 1..1000 ms
    m = stats.snapshot()["models"]["m"]
    assert m["requests"] == 20_000
    assert m["p50_ms"] == pytest.approx(500, abs=60)
    assert m["p95_ms"] == pytest.approx(950, abs=40)


def test_a_busy_bucket_weighs_its_traffic_not_its_sample():
    stats, clock = make(max_samples=100, seed=1)
    for _ in range(1000):
        request(stats, 1.0)  # 1000 requests, 100 of them kept
    clock.now = T0 + 5
    for _ in range(50):
        request(stats, 100.0)
    m = stats.snapshot()["models"]["m"]
    # of 1050 requests, 1000 took 1 ms: p95 (rank 998) is 1 ms, p99 (rank 1040) is 100 ms
    assert (m["p95_ms"], m["p99_ms"]) == pytest.approx((1.0, 100.0))


def test_memory_stays_bounded_under_sustained_traffic():
    stats, clock = make(window_s=20, bucket_s=1, max_samples=256)

    def traffic(seconds: int) -> None:
        for _ in range(seconds):
            for i in range(1000):
                request(stats, 1.0 + i % 7, queue_ms=0.1)
            clock.now += 1

    tracemalloc.start()
    try:
        traffic(25)  # the ring is full: every bucket is at its sample cap
        full = tracemalloc.get_traced_memory()[0]
        traffic(100)  # 100k more requests
        later = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert later < full * 1.2 + 64_000  # the window bounds the buckets
    # and the cap bounds each bucket: 20 buckets of 256 durations and 256 queue times, 8 bytes each,
    # plus bookkeeping; keeping all 1000 a bucket would take some 340 kB
    assert later < 20 * 2 * 256 * 8 * 1.5
    # the clock has just moved into an empty bucket: the window holds it and the 19 full ones before it
    assert stats.snapshot()["models"]["m"]["requests"] == 19_000


def test_the_number_of_models_is_bounded():
    stats, clock = make(max_models=50)
    for i in range(500):
        clock.now = T0 + i * 0.01
        stats.record_request(f"model{i}", "1", "v2", 0.001, True)
    models = stats.snapshot()["models"]
    assert len(models) == 50
    assert "model499" in models  # the most recently seen are kept


def test_a_models_signatures_are_summarised_apart_and_together():
    stats, clock = make()
    for i in range(1, 101):
        stats.record_request("m", "1", "v2", i / 1000, True, signature="serving_default")
    for _ in range(10):
        stats.record_request("m", "1", "v1", 0.5, False, signature="classify")
    stats.record_request("m", "1", "v1", 0.001, False)  # failed before its signature was resolved
    clock.now += 1
    model = stats.snapshot()["models"]["m"]
    signatures = model["signatures"]
    assert set(signatures) == {"serving_default", "classify", ""}
    assert signatures["serving_default"]["requests"] == 100 and signatures["serving_default"]["errors"] == 0
    assert signatures["serving_default"]["p50_ms"] == pytest.approx(50.0)
    assert signatures["serving_default"]["p99_ms"] == pytest.approx(99.0)
    assert signatures["classify"]["error_rate"] == 1.0 and signatures["classify"]["p50_ms"] == pytest.approx(500.0)
    # The model's percentiles are over all of its requests: 111 of them, the 10 slow ones at the top.
    assert model["requests"] == 111 and model["p50_ms"] == pytest.approx(55.0) and model["p95_ms"] == pytest.approx(500.0)
    assert model["series"][-1]["p99_ms"] == pytest.approx(500.0)  # the bucket holding them all
