"""Graceful shutdown of `tensorgate serve`: on SIGTERM readiness fails, the listeners close, every request
already accepted (over REST on kept-alive connections, and over gRPC) finishes with its right answer,
and the process exits 0 within `shutdown_grace_s`; when the grace is shorter than the work, the
process leaves after about the grace and its clients get 503 / UNAVAILABLE, not a hang."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.protocols.grpc.services import INFERENCE_SERVICE, Stub
from service.protocols.proto import grpc_service_pb2 as pb
from tests.service.served_process import FEATURES, ServedProcess, write_slow_model


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shutdown") / "repo"
    root.mkdir()
    write_slow_model(root)
    return root


def _rows(seed: int, rows: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, FEATURES), dtype=np.float32)


class RestCall(threading.Thread):
    """One predict on a connection kept alive by an earlier request, as a pooled client's would be."""

    def __init__(self, url: str, x: np.ndarray):
        super().__init__(daemon=True)
        self.x, self.response, self.error = x, None, None
        self.client = httpx.Client(base_url=url, timeout=60)
        assert self.client.get("/v2/health/live").status_code == 200  # the connection the request reuses

    def run(self) -> None:
        try:
            self.response = self.client.post("/v1/models/slow:predict", json={"instances": self.x.tolist()})
        except Exception as e:  # noqa: BLE001 - the test asserts on it
            self.error = e
        finally:
            self.client.close()


class GrpcCall(threading.Thread):
    def __init__(self, target: str, x: np.ndarray):
        super().__init__(daemon=True)
        self.x, self.response, self.error = x, None, None
        self.target = target

    def run(self) -> None:
        request = pb.ModelInferRequest(model_name="slow")
        request.inputs.add(name="x", datatype="FP32", shape=list(self.x.shape)).contents.fp32_contents.extend(self.x.ravel())
        request.parameters["binary_data_output"].bool_param = False
        with grpc.insecure_channel(self.target) as channel:
            try:
                self.response = Stub(channel, INFERENCE_SERVICE).ModelInfer(request, timeout=60)
            except grpc.RpcError as e:
                self.error = e


def _in_flight(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tensorgate_in_flight_requests{"))


def _start_all(served: ServedProcess, rest_rows: list[np.ndarray], grpc_rows: np.ndarray):
    """The calls, each accepted by the server (computing or waiting for a thread) when this returns."""
    calls = [RestCall(served.url, x) for x in rest_rows]
    for call in calls:
        call.start()
    _wait_in_flight(served, len(calls))
    # A gRPC request larger than 64 KiB waits for a thread to decode it before it counts as in flight;
    # started after the REST calls, it waits behind their work.
    calls.append(GrpcCall(served.grpc_target, grpc_rows))
    calls[-1].start()
    if grpc_rows.nbytes < 60 * 1024:
        _wait_in_flight(served, len(calls))
    else:
        time.sleep(0.5)
    return calls


def _wait_in_flight(served: ServedProcess, count: int) -> None:
    deadline = time.monotonic() + 10
    while _in_flight(served.url) < count:
        assert time.monotonic() < deadline, "the requests did not all reach the server"
        time.sleep(0.02)


def _health(target: str) -> str:
    with grpc.insecure_channel(target) as channel:
        try:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
            return health_pb2.HealthCheckResponse.ServingStatus.Name(status)
        except grpc.RpcError as e:
            return e.code().name


# Unbatched, requests wait for one of 2 inference threads; batched, in the batch queue (2 requests per batch).
QUEUES = {"threads": {"TENSORGATE_INFERENCE_THREADS": "2"},
          "batch-queue": {"TENSORGATE_BATCHING": "true", "TENSORGATE_BATCHING_MAX_BATCH_SIZE": "512",
                          "TENSORGATE_BATCHING_BATCH_TIMEOUT_MICROS": "1000"}}


@pytest.mark.parametrize("queue", sorted(QUEUES))
def test_sigterm_finishes_every_accepted_request_then_exits_0(repository, queue):
    grace_s = 20.0
    with ServedProcess(repository, TENSORGATE_SHUTDOWN_GRACE_S=str(grace_s), **QUEUES[queue]) as served:
        deadline = time.monotonic() + 5  # gRPC health follows the models' readiness every half second
        while _health(served.grpc_target) != "SERVING":
            assert time.monotonic() < deadline, "gRPC health never said SERVING"
            time.sleep(0.1)
        rest_rows = [_rows(seed, 256) for seed in range(4)]
        calls = _start_all(served, rest_rows, _rows(99, 128))  # under 64 KiB: decoded on the loop, counted at once
        sent = served.terminate()

        # Readiness fails first: 503 while the listener is still open, or the connection refused once it closed
        # (or reset, when it reached the listener as it closed: a loaded machine can be that slow).
        try:
            assert httpx.get(f"{served.url}/v2/health/ready", timeout=5).status_code == 503
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            pass
        # NOT_SERVING, or the call refused by a server already stopping (UNAVAILABLE; CANCELLED when it
        # arrives as gRPC's stop begins): anything but SERVING.
        assert _health(served.grpc_target) in ("NOT_SERVING", "UNAVAILABLE", "CANCELLED")
        # The listeners close while the requests in flight still run: new connections are refused.
        time.sleep(0.3)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{served.url}/v2/health/live", timeout=5)
        with grpc.insecure_channel(served.grpc_target) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                Stub(channel, INFERENCE_SERVICE).ServerLive(pb.ServerLiveRequest(), timeout=2)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert served.proc.poll() is None, "the server left before its requests finished"
        assert sum(c.is_alive() for c in calls) > 0, "the requests finished before the listeners were checked"

        assert served.proc.wait(timeout=grace_s) == 0, served.log()
        exited = time.monotonic() - sent
        for call in calls:
            call.join(timeout=5)
        for call in calls[:-1]:
            assert call.error is None and call.response.status_code == 200, (call.error, call.response)
            # The kept-alive connection is told to go, after its answer rather than under it.
            assert call.response.headers["connection"] == "close"
            np.testing.assert_allclose(call.response.json()["predictions"], call.x.sum(axis=1), rtol=1e-5)
        grpc_call = calls[-1]
        assert grpc_call.error is None, grpc_call.error
        np.testing.assert_allclose(grpc_call.response.outputs[0].contents.fp32_contents, grpc_call.x.sum(axis=1), rtol=1e-5)
    assert exited < grace_s
    log = served.log()
    assert "Application shutdown complete" in log and "grace period" not in log


def test_a_grace_shorter_than_the_work_exits_after_the_grace_with_errors_for_the_clients(repository):
    grace_s = 1.0
    with ServedProcess(repository, TENSORGATE_SHUTDOWN_GRACE_S=str(grace_s), TENSORGATE_INFERENCE_THREADS="1") as served:
        # One request computing and two waiting for the only thread, each sized from a warm request's time
        # to outlast the grace on its own: a faster machine or kernel must not let them all finish in time.
        for _ in range(2):  # the first request also compiles the plan
            started = time.monotonic()
            httpx.post(f"{served.url}/v1/models/slow:predict", json={"instances": _rows(0, 1024).tolist()}, timeout=60)
            one_request_s = time.monotonic() - started
        rows = int(np.clip(1024 * 1.5 * grace_s / one_request_s, 1024, 16384))
        one_request_s *= rows / 1024
        calls = _start_all(served, [_rows(seed, rows) for seed in range(2)], _rows(9, rows))
        sent = served.terminate()
        code = served.proc.wait(timeout=grace_s + 10)
        exited = time.monotonic() - sent
        for call in calls:
            call.join(timeout=5)
            assert not call.is_alive(), "a client hangs after the server left"
    assert one_request_s > grace_s, "the work must outlast the grace for this test to mean anything"
    assert exited < grace_s + 2.0, served.log()
    assert code == 1  # some requests were cut off
    # A request that finished within the grace has its answer; the others a 503 that says why.
    for call in calls[:-1]:
        assert call.error is None and call.response.status_code in (200, 503), (call.error, call.response)
        if call.response.status_code == 200:
            np.testing.assert_allclose(call.response.json()["predictions"], call.x.sum(axis=1), rtol=1e-5)
        else:
            assert "grace period" in call.response.json()["error"]
    assert any(call.response.status_code == 503 for call in calls[:-1])
    assert calls[-1].error is not None and calls[-1].error.code() == grpc.StatusCode.UNAVAILABLE
    assert "grace period" in served.log()


def test_busy_keep_alive_connections_end_after_an_answer_not_under_a_request(repository):
    """Clients sending request after request on kept-alive connections (hey, a pooled client) when SIGTERM comes:
    each connection is told `Connection: close` with an answer and ends there; none is closed under a request
    the client was sending (a reset, which is what a rolling update on Kubernetes showed before: 4 of 169,038)."""
    with ServedProcess(repository, TENSORGATE_SHUTDOWN_GRACE_S="10") as served:
        outcomes: list[list[str]] = [[] for _ in range(4)]
        stop = threading.Event()

        def client(log: list[str]) -> None:
            with httpx.Client(base_url=served.url, timeout=30) as http:
                while not stop.is_set():
                    try:
                        r = http.post("/v1/models/slow:predict", json={"instances": _rows(1, 1).tolist()})
                    except httpx.TransportError as e:
                        log.append(type(e).__name__)
                        return
                    log.append(str(r.status_code))
                    if r.headers.get("connection") == "close":
                        # Told to go: its next connection would reach another replica (the Service no longer
                        # lists this one); a new one to this server would race its closing listener.
                        log.append("close")
                        return

        threads = [threading.Thread(target=client, args=(log,), daemon=True) for log in outcomes]
        for t in threads:
            t.start()
        time.sleep(1.0)
        served.terminate()
        for t in threads:
            t.join(timeout=20)
        stop.set()
        assert served.proc.wait(timeout=20) == 0
    for log in outcomes:
        assert len(log) > 2 and set(log[:-1]) == {"200"} and log[-1] == "close", log[-5:]  # no reset, no error
