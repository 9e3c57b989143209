"""Triton's classification extension: an output asked for with a class count comes back as its top
classes ("<value>:<index>[:<label>]", BYTES, [batch, k] or [k]) through tritonclient over HTTP (JSON and
binary) and gRPC, checked against the model's own values; the ordering, ties and types as Triton's."""

from __future__ import annotations

import numpy as np
import pytest

from service.errors import BadRequest
from service.protocols.classification import classification_count, top_k
from tests.service.conftest import serve_examples

triton_http = pytest.importorskip("tritonclient.http")
triton_grpc = pytest.importorskip("tritonclient.grpc")


def test_top_k_orders_by_value_with_ties_by_index_and_labels():
    values = np.array([[1, 5, 10, 4, 10], [7, 7, 7, 0, 1]], np.int32)
    assert top_k(values, 3, batched=True).tolist() == [[b"10:2", b"10:4", b"5:1"], [b"7:0", b"7:1", b"7:2"]]
    assert top_k(values, 2, batched=False).tolist() == [b"10:2", b"10:4"]  # the whole tensor, flat
    assert top_k(np.array([1.1, 3.3], np.float32), 5, batched=False, labels=["apple"]).tolist() == [
        b"3.300000:1", b"1.100000:0:apple"]  # k past the classes: all of them; a label where there is one


@pytest.mark.parametrize("dtype", [np.float16, np.bool_, object])
def test_types_without_an_order_triton_classifies_by_are_refused(dtype):
    with pytest.raises(BadRequest, match="class result not available for output due to unsupported type"):
        top_k(np.zeros(3, dtype=dtype), 1, batched=False)


@pytest.mark.parametrize("value", [-1, "2", 1.5, True])
def test_a_count_must_be_a_count(value):
    with pytest.raises(BadRequest, match="must be a count of classes"):
        classification_count({"classification": value}, "probabilities")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = serve_examples(tmp_path_factory.mktemp("classify") / "repo", "iris_classifier")
    yield server
    server.stop()


FEATURES = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]], np.float32)


def expected(probabilities: np.ndarray, k: int) -> list[list[tuple[float, int]]]:
    return [[(float(row[i]), int(i)) for i in np.argsort(-row, kind="stable")[:k]] for row in probabilities]


def parsed(classes: np.ndarray) -> list[list[tuple[float, int]]]:
    # JSON BYTES come back as str, binary ones as bytes.
    texts = [[c.decode() if isinstance(c, bytes) else c for c in row] for row in classes]
    return [[(float(t.split(":")[0]), int(t.split(":")[1])) for t in row] for row in texts]


@pytest.mark.parametrize("transport, binary", [("http", False), ("http", True), ("grpc", None)])
def test_tritonclient_gets_the_top_classes(server, transport, binary):
    module = triton_http if transport == "http" else triton_grpc
    target = server.url.removeprefix("http://") if transport == "http" else server.grpc_target
    client = module.InferenceServerClient(target)
    try:
        x = module.InferInput("features", list(FEATURES.shape), "FP32")
        x.set_data_from_numpy(FEATURES)
        plain = client.infer("iris_classifier", [x], outputs=[module.InferRequestedOutput("probabilities")])
        options = {} if binary is None else {"binary_data": binary}
        asked = module.InferRequestedOutput("probabilities", class_count=2, **options)
        classes = client.infer("iris_classifier", [x], outputs=[asked]).as_numpy("probabilities")
    finally:
        client.close()
    assert classes.shape == (3, 2) and classes.dtype == np.object_
    probabilities = plain.as_numpy("probabilities")
    got, want = parsed(classes), expected(probabilities, 2)
    assert [[i for _, i in row] for row in got] == [[i for _, i in row] for row in want]
    np.testing.assert_allclose([[v for v, _ in row] for row in got], [[v for v, _ in row] for row in want], atol=1e-6)
