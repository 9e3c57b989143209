"""Triton's raw binary request (binary data extension, `Inference-Header-Content-Length: 0`): the body is
the one input's bytes, its shape deduced from the model's (batch 1, the variable dimension from the byte
count), every output answered as binary data; what cannot be deduced is a 400 saying why."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.service.conftest import serve_examples

RAW = {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = serve_examples(tmp_path_factory.mktemp("raw") / "repo", "half_plus_two", "iris_classifier")
    yield server
    server.stop()


def split(response) -> tuple[dict, bytes]:
    length = int(response.headers["Inference-Header-Content-Length"])
    return json.loads(response.content[:length]), response.content[length:]


def test_the_body_is_the_one_inputs_bytes_and_outputs_come_back_binary(server, client):
    x = np.array([1.0, 2.0, 5.0], np.float32)
    response = client(server).post("/v2/models/half_plus_two/infer", content=x.tobytes(), headers=RAW)
    assert response.status_code == 200, response.text
    header, data = split(response)
    (output,) = header["outputs"]
    assert output["shape"] == [3] and output["datatype"] == "FP32"
    assert output["parameters"]["binary_data_size"] == len(data) == 12
    assert np.frombuffer(data, np.float32).tolist() == [2.5, 3.0, 4.5]


def test_a_batching_model_gets_a_batch_of_one(server, client):
    features = np.array([5.1, 3.5, 1.4, 0.2], np.float32)  # the input is [-1, 4]: a batch of one row
    response = client(server).post("/v2/models/iris_classifier/infer", content=features.tobytes(), headers=RAW)
    assert response.status_code == 200, response.text
    header, data = split(response)
    shapes = {o["name"]: o["shape"] for o in header["outputs"]}
    assert shapes["probabilities"] == [1, 3]
    offset, probabilities = 0, None
    for o in header["outputs"]:
        size = o["parameters"]["binary_data_size"]
        if o["name"] == "probabilities":
            probabilities = np.frombuffer(data[offset:offset + size], np.float32)
        offset += size
    assert probabilities is not None and abs(float(probabilities.sum()) - 1.0) < 1e-5


@pytest.mark.parametrize("model, body, message", [
    ("iris_classifier", b"\x00" * 12, "does not fill input 'features' (FP32, shape [-1, 4])"),
    ("half_plus_two", b"\x00" * 6, "does not fill input 'x'"),
])
def test_a_body_that_does_not_fill_the_input_is_a_bad_request(server, client, model, body, message):
    response = client(server).post(f"/v2/models/{model}/infer", content=body, headers=RAW)
    assert response.status_code == 400 and message in response.json()["error"]


def test_a_model_with_several_inputs_is_refused_in_tritons_words(tmp_path, make_server, client):
    from tests.service.repository.test_synthetic_warmup import write_simple_string

    root = tmp_path / "repo"
    write_simple_string(root / "pair" / "1")
    (root / "pair" / "config.yaml").write_text(
        "signatures:\n  serving_default:\n    inputs: {INPUT0: 'INPUT0:0', INPUT1: 'INPUT1:0'}\n"
        "    outputs: {OUTPUT0: 'OUTPUT0:0'}\n")
    server = make_server(root, poll_interval_s=0)
    response = client(server).post("/v2/models/pair/infer", content=b"12", headers=RAW)
    assert response.status_code == 400
    assert "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'pair'" in response.json()["error"]
