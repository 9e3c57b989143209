"""Load shedding: past `max_queued_requests` requests waiting for an inference thread, the server refuses
at once with 503 and Retry-After (gRPC: UNAVAILABLE with a retry pushback) instead of queueing requests
into timeouts. Driven at 4x its sustainable rate from another process, it sheds in milliseconds, the
requests it accepts keep a bounded latency, nothing fails with a 500, and it stays healthy."""

from __future__ import annotations

import contextvars
import json
import math
import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from service.inference.admission import AdmissionPool, Overloaded
from service.protocols.grpc.services import INFERENCE_SERVICE, Stub
from service.protocols.proto import grpc_service_pb2 as pb
from tests.service.served_process import FEATURES, ServedProcess, write_slow_model

LOAD = Path(__file__).with_name("open_loop_load.py")
THREADS, MAX_QUEUED = 1, 4


def _body(rows: int, seed: int = 0) -> dict:
    return {"instances": np.random.default_rng(seed).random((rows, FEATURES), dtype=np.float32).tolist()}


def _load(url: str, body: Path, *args: str) -> list[dict]:
    done = subprocess.run([sys.executable, str(LOAD), url, str(body), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _histogram_quantile(metrics: str, name: str, q: float) -> float:
    """The upper edge of the bucket holding quantile `q` of a histogram of the served model: a value
    that at least a fraction q of the observations do not exceed."""
    buckets = [(float(line.split('le="')[1].split('"')[0]), float(line.rsplit(" ", 1)[1]))
               for line in metrics.splitlines() if line.startswith(f"{name}_bucket{{") and 'model="slow"' in line]
    total = buckets[-1][1]
    return next(edge for edge, count in buckets if count >= q * total)


def test_four_times_the_sustainable_rate_is_shed_fast_and_accepted_latency_stays_bounded(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    write_slow_model(root, width=1024, depth=16)  # 16 rows: tens of milliseconds
    body = tmp_path / "body.json"
    body.write_text(json.dumps(_body(16)))
    # BLAS on one core: the computation is the bottleneck, the other core serves the event loop and the load.
    with ServedProcess(root, grpc=False, TENSORGATE_INFERENCE_THREADS=str(THREADS),
                       TENSORGATE_MAX_QUEUED_REQUESTS=str(MAX_QUEUED), OPENBLAS_NUM_THREADS="1") as served:
        url = f"{served.url}/v1/models/slow:predict"
        alone = _load(url, body, "--sequential", "30")[5:]  # after warm-up
        assert all(r["status"] == 200 for r in alone), alone
        latency = float(np.median([r["latency_s"] for r in alone]))
        rate = 4 * THREADS / latency
        results = _load(url, body, "--rate", f"{rate:.1f}", "--seconds", "4")

        statuses = {r["status"] for r in results}
        assert statuses <= {200, 503}, statuses  # no 500s, no transport errors, no timeouts
        accepted = [r["latency_s"] for r in results if r["status"] == 200]
        shed = [r for r in results if r["status"] == 503]
        assert accepted and len(shed) > len(results) / 4, (len(accepted), len(shed))
        assert {r["retry_after"] for r in shed} == {"1"}

        metrics = httpx.get(f"{served.url}/metrics").text
        compute_p99 = _histogram_quantile(metrics, "tensorgate_compute_duration_seconds", 0.99)
        # Shedding costs no computation: a shed request is answered well within one computation (p90: on a
        # busy machine a few answers of any kind wait for a core).
        shed_latency = [r["latency_s"] for r in shed]
        assert np.median(shed_latency) < compute_p99 / 4 and np.percentile(shed_latency, 90) < compute_p99, (
            np.median(shed_latency), np.percentile(shed_latency, 90), compute_p99)
        # An accepted request finds at most MAX_QUEUED requests waiting and THREADS computing: it waits at
        # most ceil(MAX_QUEUED / THREADS) computations, then its own; the rest of its path (HTTP, the event
        # loop, decoding) is what a shed request's whole latency is. Computations measured by the server,
        # under this load.
        bound = (math.ceil(MAX_QUEUED / THREADS) + 1) * compute_p99 + float(np.percentile(shed_latency, 99))
        assert np.percentile(accepted, 99) <= bound, (np.percentile(accepted, 99), bound, compute_p99)
        # Without the bound the queue would grow by 3/4 of the offered requests for 4 s, the last ones waiting
        # about 3 x 4 s: the bound must be far below that for the test to mean anything.
        assert bound < 2.0, bound

        rejected = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                       if line.startswith("tensorgate_requests_total{") and 'outcome="rejected"' in line)
        assert rejected == len(shed)
        assert httpx.get(f"{served.url}/v2/health/live").status_code == 200
        assert httpx.get(f"{served.url}/v2/health/ready").status_code == 200
        assert httpx.post(url, json=_body(2, seed=5), timeout=10).status_code == 200


def test_a_full_queue_refuses_rest_and_grpc_at_once_with_a_retry_hint(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    write_slow_model(root, depth=64)  # 256 rows: two to three seconds each with BLAS on one core
    # BLAS on one core: the other serves the event loop, so /metrics and the refusal answer while a
    # computation runs; computations of seconds leave the window in which one computes and the other
    # waits wide open on a loaded machine (at half a second each it could close before the refusal).
    with ServedProcess(root, TENSORGATE_INFERENCE_THREADS="1", TENSORGATE_MAX_QUEUED_REQUESTS="1",
                       OPENBLAS_NUM_THREADS="1") as served:
        url = f"{served.url}/v1/models/slow:predict"
        metrics_url = f"{served.url}/metrics"
        answers: list[httpx.Response] = []

        def in_flight(count: int) -> None:
            deadline = time.monotonic() + 10
            while f'tensorgate_in_flight_requests{{protocol="v1"}} {count}.0' not in httpx.get(metrics_url).text:
                assert time.monotonic() < deadline, f"{count} requests never were in flight at once"
                time.sleep(0.02)

        busy = [threading.Thread(target=lambda: answers.append(httpx.post(url, json=_body(256), timeout=60)))
                for _ in range(2)]  # one computing, one waiting: the queue is full
        # One after the other: sent together, the second could find the first's task still in the queue
        # (not yet picked up by the thread) and be shed itself, rightly.
        busy[0].start()
        in_flight(1)
        time.sleep(0.3)  # its body decoded: it computes
        busy[1].start()
        in_flight(2)
        time.sleep(0.1)  # the second request's work waits for the one thread

        started = time.monotonic()
        refused = httpx.post(url, json=_body(256, seed=1), timeout=10)
        assert time.monotonic() - started < 0.5
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "overloaded" in refused.json()["error"] and "max_queued_requests=1" in refused.json()["error"]

        request = pb.ModelInferRequest(model_name="slow")
        x = np.ones((2, FEATURES), np.float32)
        request.inputs.add(name="x", datatype="FP32", shape=[2, FEATURES]).contents.fp32_contents.extend(x.ravel())
        with grpc.insecure_channel(served.grpc_target) as channel:
            with pytest.raises(grpc.RpcError) as raised:
                Stub(channel, INFERENCE_SERVICE).ModelInfer(request, timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE and "overloaded" in raised.value.details()
        assert ("grpc-retry-pushback-ms", "1000") in tuple(raised.value.trailing_metadata())

        for t in busy:
            t.join(timeout=30)
        assert [a.status_code for a in answers] == [200, 200]  # what was accepted still finishes


def test_a_request_cancelled_while_it_waits_gives_its_place_back():
    pool = AdmissionPool(threads=1, max_queued=1)
    gate = threading.Event()

    def submit(fn, *args):  # each call a request of its own (a request is admitted once, in its own context)
        return contextvars.Context().run(pool.submit, fn, *args)

    try:
        running = submit(gate.wait, 10)
        waiting = submit(lambda: "never")
        deadline = time.monotonic() + 5
        while pool.running != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(Overloaded) as raised:
            submit(lambda: "shed")
        assert raised.value.status == 503 and raised.value.headers == {"Retry-After": "1"}
        assert waiting.cancel() and pool.queued == 0
        admitted = submit(lambda: "ran")
        gate.set()
        assert admitted.result(timeout=5) == "ran" and running.result(timeout=5) is True
        with pytest.raises(CancelledError):
            waiting.result()
        assert (pool.queued, pool.running) == (0, 0)
    finally:
        gate.set()
        pool.shutdown()
