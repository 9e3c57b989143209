"""KServe v2 over gRPC with Triton's own client (`tritonclient.grpc`): every golden model fixture inferred
with raw tensors against TensorFlow's numbers, typed contents, metadata, readiness, config, the repository
extension, the streaming API, and failures with their codes; deadlines and cancellation through the batch
queue; health, reflection, message limits and TLS."""

from __future__ import annotations

import queue
import shutil
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import numpy as np
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from engine.graph.tensors import from_array
from service.protocols.codecs.v2_tensors import datatype_of
from service.protocols.grpc.services import INFERENCE_SERVICE, PREDICTION_SERVICE, Stub
from service.protocols.proto import grpc_service_pb2 as pb
from service.protocols.proto import predict_pb2
from tests.golden import assert_matches, load_case
from tests.service.conftest import EXAMPLES, alias, model_cases, start_server, write_fixture_model
from tests.service.inference.test_batching import gated_server, metric, wait_until

triton = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

CASES = model_cases()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("kserve") / "repo"
    root.mkdir()
    for case_dir in CASES:
        write_fixture_model(root, case_dir)
    shutil.copytree(EXAMPLES / "half_plus_two", root / "half_plus_two")
    server = start_server(root, poll_interval_s=0)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server):
    c = triton.InferenceServerClient(server.grpc_target)
    yield c
    c.close()


def half_input(values, datatype="FP32") -> "triton.InferInput":
    array = np.asarray(values, np.float32)
    i = triton.InferInput("x", list(array.shape), datatype)
    i.set_data_from_numpy(array)
    return i


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_tritonclient_grpc_matches_tensorflow(client, case_dir):
    case = load_case(case_dir)
    inputs = []
    for tensor, value in case.feeds.items():
        i = triton.InferInput(alias(tensor), list(value.shape), datatype_of(value.dtype))
        i.set_data_from_numpy(value)
        inputs.append(i)
    outputs = [triton.InferRequestedOutput(alias(t)) for t in case.fetches]
    result = client.infer(case_dir.name, inputs, outputs=outputs, request_id="7")
    response = result.get_response()
    assert response.model_version == "1" and response.id == "7" and response.raw_output_contents
    for tensor, want in case.fetches.items():
        assert_matches(tensor, result.as_numpy(alias(tensor)), want, case.rtol, case.atol)


def test_typed_contents_in_and_out(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = Stub(channel, INFERENCE_SERVICE)
        request = pb.ModelInferRequest(model_name="half_plus_two", id="a")
        request.inputs.add(name="x", datatype="FP32", shape=[3]).contents.fp32_contents.extend([1, 2, 3])
        request.parameters["binary_data_output"].bool_param = False
        response = stub.ModelInfer(request)
        assert not response.raw_output_contents and list(response.outputs[0].contents.fp32_contents) == [2.5, 3, 3.5]
        request.inputs[0].contents.fp32_contents.append(4)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ModelInfer(request)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "shape [3] holds 3 elements but fp32_contents has 4" in raised.value.details()


def test_health_metadata_config_and_index(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("half_plus_two") and client.is_model_ready("half_plus_two", "1")
    metadata = client.get_server_metadata()
    assert metadata.name == "tensorgate" and "model_repository" in metadata.extensions
    model = client.get_model_metadata("half_plus_two")
    assert model.versions == ["1"] and model.inputs[0].name == "x" and model.inputs[0].datatype == "FP32"
    config = client.get_model_config("half_plus_two").config
    assert config.name == "half_plus_two" and config.input[0].data_type == triton.model_config_pb2.TYPE_FP32
    assert config.instance_group[0].kind == triton.model_config_pb2.ModelInstanceGroup.KIND_CPU
    index = client.get_model_repository_index()
    assert {"name": "half_plus_two", "version": "1", "state": "READY"} in [
        {"name": m.name, "version": m.version, "state": m.state} for m in index.models]


def test_errors_have_their_codes(client):
    for call, text in ((lambda: client.infer("nope", [half_input([1.0])]), "Request for unknown model: 'nope' is not found"),
                       (lambda: client.infer("half_plus_two", [half_input([[1.0]])]), "expects shape [?]"),
                       (lambda: client.infer("half_plus_two", [half_input([1.0])], model_version="x"), "invalid version"),
                       (lambda: client.get_model_metadata("half_plus_two", "9"), "has no version 9"),
                       (lambda: client.is_model_ready("nope"), "nope")):
        with pytest.raises(InferenceServerException) as raised:
            call()
        assert text in raised.value.message()
        assert raised.value.status() in ("StatusCode.NOT_FOUND", "StatusCode.INVALID_ARGUMENT")


def test_streaming_answers_every_request_and_reports_errors_in_the_stream(server):
    c = triton.InferenceServerClient(server.grpc_target)
    answers: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(8):
            c.async_stream_infer("half_plus_two", [half_input([float(i)])], request_id=str(i))
        c.async_stream_infer("half_plus_two", [half_input([[1.0]])], request_id="bad")
        got = [answers.get(timeout=30) for _ in range(9)]
    finally:
        c.stop_stream()
        c.close()
    results = {r.get_response().id: r.as_numpy("y") for r, e in got if e is None}
    assert {k: v.tolist() for k, v in results.items()} == {str(i): [i / 2 + 2] for i in range(8)}
    (error,) = [e for _, e in got if e is not None]
    assert "expects shape [?]" in error.message()


def test_repository_load_and_unload_need_the_admin_token(tmp_path, make_server):
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", root / "half_plus_two")
    server = make_server(root, admin_token="secret", api_token="reader")
    c = triton.InferenceServerClient(server.grpc_target)
    try:
        assert c.is_server_live()  # health stays open
        with pytest.raises(InferenceServerException) as raised:
            c.is_model_ready("half_plus_two")
        assert raised.value.status() == "StatusCode.UNAUTHENTICATED"
        reader, admin = {"authorization": "Bearer reader"}, {"authorization": "Bearer secret"}
        with pytest.raises(InferenceServerException) as raised:
            c.unload_model("half_plus_two", headers=reader)
        assert raised.value.status() == "StatusCode.PERMISSION_DENIED"
        c.unload_model("half_plus_two", headers=admin)
        assert not c.is_model_ready("half_plus_two", headers=reader)
        c.load_model("half_plus_two", headers=admin)
        assert c.is_model_ready("half_plus_two", headers=reader)
        graph = (EXAMPLES / "half_plus_two" / "1" / "model.pb").read_bytes()
        c.load_model("uploaded", files={"file:1/model.pb": graph}, headers=admin)
        result = c.infer("uploaded", [half_input([2.0])], headers=reader)
        assert result.as_numpy("y").tolist() == [3.0]
    finally:
        c.close()


# --- deadlines, cancellation and full queues, through the batch queue ---------------------------------


def test_deadline_cancel_and_full_queue(tmp_path, make_server):
    server, gate = gated_server(tmp_path, make_server, max_enqueued_batches=1)
    c = triton.InferenceServerClient(server.grpc_target)
    http = httpx.Client(base_url=server.url)
    try:
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(c.infer, "half_plus_two", [half_input([1.0] * 4)])
            wait_until(lambda: gate.calls == 1)  # computing, held at the gate
            # A call whose deadline passes while it waits in the queue: DEADLINE_EXCEEDED, never computed.
            with pytest.raises(InferenceServerException) as raised:
                c.infer("half_plus_two", [half_input([1.0] * 4)], client_timeout=0.3)
            assert raised.value.status() == "StatusCode.DEADLINE_EXCEEDED"
            # A call the client cancels leaves the queue too.
            cancelled = c.async_infer("half_plus_two", [half_input([1.0] * 4)], lambda result, error: None)
            time.sleep(0.3)
            cancelled.cancel()
            wait_until(lambda: metric(http, "tensorgate_requests_total", outcome="cancelled") == 1)
            queued = pool.submit(c.infer, "half_plus_two", [half_input([1.0] * 4)])  # fills the queue
            wait_until(lambda: metric(http, "tensorgate_in_flight_requests", protocol="grpc") >= 2)
            with pytest.raises(InferenceServerException) as raised:
                c.infer("half_plus_two", [half_input([1.0])])
            assert raised.value.status() == "StatusCode.RESOURCE_EXHAUSTED" and "queue is full" in raised.value.message()
            with grpc.insecure_channel(server.grpc_target) as channel:  # TensorFlow Serving says UNAVAILABLE
                request = predict_pb2.PredictRequest(model_spec={"name": "half_plus_two"})
                request.inputs["x"].CopyFrom(from_array(np.ones(1, np.float32)))
                with pytest.raises(grpc.RpcError) as rpc_error:
                    Stub(channel, PREDICTION_SERVICE).Predict(request)
                assert rpc_error.value.code() == grpc.StatusCode.UNAVAILABLE
            gate.event.set()
            assert running.result().as_numpy("y").tolist() == [2.5] * 4
            assert queued.result().as_numpy("y").tolist() == [2.5] * 4
        assert gate.calls == 2  # the timed-out and the cancelled requests never ran
        assert metric(http, "tensorgate_requests_total", protocol="grpc", outcome="timeout") == 1
    finally:
        c.close()
        http.close()


# --- health, reflection, limits, TLS ---------------------------------------------------------------


def test_health_service_reports_readiness(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", INFERENCE_SERVICE, PREDICTION_SERVICE):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_services_under_their_real_names(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [reflection_pb2.ServerReflectionRequest(list_services=""),
                    reflection_pb2.ServerReflectionRequest(file_containing_symbol="tensorflow.serving.PredictRequest")]
        replies = list(stub.ServerReflectionInfo(iter(requests)))
    names = {s.name for s in replies[0].list_services_response.service}
    assert {"tensorflow.serving.PredictionService", "tensorflow.serving.ModelService", "inference.GRPCInferenceService",
            "grpc.health.v1.Health"} <= names
    assert replies[1].file_descriptor_response.file_descriptor_proto


def test_messages_over_the_request_limit_are_resource_exhausted(tmp_path, make_server):
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", root / "half_plus_two")
    server = make_server(root, max_request_bytes=4096)
    c = triton.InferenceServerClient(server.grpc_target)
    try:
        with pytest.raises(InferenceServerException) as raised:
            c.infer("half_plus_two", [half_input(np.ones(4096))])
        assert raised.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert c.infer("half_plus_two", [half_input([1.0])]).as_numpy("y").tolist() == [2.5]
    finally:
        c.close()


def test_tls_for_grpc_and_https_with_client_certificates(tmp_path, make_server):
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("client@example.com")
    paths = {}
    for name, blob in (("cert", server_cert.cert_chain_pems[0].bytes()), ("key", server_cert.private_key_pem.bytes()),
                       ("ca", ca.cert_pem.bytes())):
        paths[name] = tmp_path / f"{name}.pem"
        paths[name].write_bytes(blob)
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", root / "half_plus_two")
    server = make_server(root, grpc_tls_cert=paths["cert"], grpc_tls_key=paths["key"], grpc_tls_ca=paths["ca"],
                         tls_cert=paths["cert"], tls_key=paths["key"])
    assert server.url.startswith("https://")
    context = ssl.create_default_context()
    ca.configure_trust(context)
    assert httpx.get(f"{server.url}/v2/health/ready", verify=context).status_code == 200
    credentials = grpc.ssl_channel_credentials(ca.cert_pem.bytes(), client_cert.private_key_pem.bytes(),
                                               client_cert.cert_chain_pems[0].bytes())
    with grpc.secure_channel(server.grpc_target, credentials) as channel:
        reply = Stub(channel, INFERENCE_SERVICE).ServerLive(pb.ServerLiveRequest(), timeout=10)
        assert reply.live
    # Without a client certificate, or in plain text, no call gets through.
    for channel in (grpc.secure_channel(server.grpc_target, grpc.ssl_channel_credentials(ca.cert_pem.bytes())),
                    grpc.insecure_channel(server.grpc_target)):
        with channel, pytest.raises(grpc.RpcError) as raised:
            Stub(channel, INFERENCE_SERVICE).ServerLive(pb.ServerLiveRequest(), timeout=5)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE


def test_grpc_can_be_turned_off(tmp_path, make_server):
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", root / "half_plus_two")
    server = make_server(root, grpc_port=0)
    assert server.grpc_target == "" and server.app.state.grpc_port is None


def test_streams_do_not_block_each_other(server):
    # Two streams at once, each with requests in flight: both complete.
    clients = [triton.InferenceServerClient(server.grpc_target) for _ in range(2)]
    answers: queue.Queue = queue.Queue()
    try:
        for c in clients:
            c.start_stream(callback=lambda result, error: answers.put(error))
        barrier = threading.Barrier(2)

        def send(c):
            barrier.wait()
            for i in range(16):
                c.async_stream_infer("half_plus_two", [half_input([float(i)])])

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(send, clients))
        assert [answers.get(timeout=30) for _ in range(32)] == [None] * 32
    finally:
        for c in clients:
            c.stop_stream()
            c.close()
