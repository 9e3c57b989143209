"""Triton model repositories served as they are: `config.pbtxt` beside `<version>/model.graphdef` or
`<version>/model.savedmodel/`, through tritonclient (HTTP and gRPC): a GraphDef, a SavedModel, a batching
classifier with a label file (the classification extension with labels, dynamic batching, statistics) and
Triton's simple_string (string inputs parsed as numbers), beside a model of our own layout; invalid configs
are load errors naming the field."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from service.repository import ModelRepository
from service.repository.config import ConfigError
from tests.golden import FIXTURES
from tests.service.conftest import EXAMPLES, start_server
from tests.service.repository.test_synthetic_warmup import write_simple_string

triton_http = pytest.importorskip("tritonclient.http")
triton_grpc = pytest.importorskip("tritonclient.grpc")

IRIS_LABELS = ["setosa", "versicolor", "virginica"]


def write_triton_repository(root) -> None:
    (root / "half_plus_two_gd" / "1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "half_plus_two" / "1" / "model.pb", root / "half_plus_two_gd" / "1" / "model.graphdef")
    (root / "half_plus_two_gd" / "config.pbtxt").write_text('''
name: "half_plus_two_gd"
platform: "tensorflow_graphdef"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
''')
    shutil.copytree(FIXTURES / "saved_models" / "half_plus_two_serving" / "model", root / "half_plus_two_sm" / "3" / "model.savedmodel")
    (root / "half_plus_two_sm" / "config.pbtxt").write_text('''
platform: "tensorflow_savedmodel"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1, 1 ] } ]
''')
    (root / "iris" / "1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "iris_classifier" / "1" / "model.pb", root / "iris" / "1" / "model.graphdef")
    (root / "iris" / "labels.txt").write_text("\n".join(IRIS_LABELS) + "\n")
    (root / "iris" / "config.pbtxt").write_text('''
name: "iris"
backend: "tensorflow"
max_batch_size: 8
input [ { name: "features" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "probabilities" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" },
         { name: "class_id" data_type: TYPE_INT64 dims: [ ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { kind: KIND_CPU count: 1 } ]
''')
    write_simple_string(root / "simple_string" / "1")
    (root / "simple_string" / "1" / "model.pb").rename(root / "simple_string" / "1" / "model.graphdef")
    (root / "simple_string" / "config.pbtxt").write_text('''
name: "simple_string"
platform: "tensorflow_graphdef"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
''')
    (root / "reshaped" / "1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "half_plus_two" / "1" / "model.pb", root / "reshaped" / "1" / "model.graphdef")
    (root / "reshaped" / "config.pbtxt").write_text('''
platform: "tensorflow_graphdef"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]
''')
    shutil.copytree(EXAMPLES / "half_plus_two", root / "ours")  # our own layout, beside


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton") / "repo"
    write_triton_repository(root)
    server = start_server(root, poll_interval_s=0)
    yield server
    server.stop()


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    module = triton_http if request.param == "http" else triton_grpc
    c = module.InferenceServerClient(server.url.removeprefix("http://") if request.param == "http" else server.grpc_target)
    yield module, c
    c.close()


def test_every_model_of_the_repository_is_ready(server, client):
    _, c = client
    for model in ("half_plus_two_gd", "half_plus_two_sm", "iris", "simple_string", "ours"):
        assert c.is_model_ready(model), model
    assert c.is_model_ready("half_plus_two_sm", "3")


@pytest.mark.parametrize("model, shape", [("half_plus_two_gd", [3]), ("half_plus_two_sm", [3, 1])])
def test_a_graphdef_and_a_savedmodel_answer(client, model, shape):
    module, c = client
    x = np.array([1.0, 2.0, 5.0], np.float32).reshape(shape)
    tensor = module.InferInput("x", shape, "FP32")
    tensor.set_data_from_numpy(x)
    result = c.infer(model, [tensor])
    np.testing.assert_allclose(result.as_numpy("y"), x * 0.5 + 2)


def test_a_classifier_with_labels_batches_and_classifies(client):
    module, c = client
    features = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]], np.float32)
    x = module.InferInput("features", [2, 4], "FP32")
    x.set_data_from_numpy(features)
    plain = c.infer("iris", [x]).as_numpy("probabilities")
    classes = c.infer("iris", [x], outputs=[module.InferRequestedOutput("probabilities", class_count=1)])
    top = [[(e.decode() if isinstance(e, bytes) else e) for e in row] for row in classes.as_numpy("probabilities")]
    for row, probabilities in zip(top, plain):
        value, index, label = row[0].split(":")
        assert int(index) == int(np.argmax(probabilities)) and label == IRIS_LABELS[int(index)]
        assert abs(float(value) - float(probabilities.max())) < 1e-6


def test_simple_string_loads_and_parses_its_inputs(client):
    module, c = client
    a = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[b"1"] * 16], dtype=np.object_)
    inputs = [module.InferInput("INPUT0", [1, 16], "BYTES"), module.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = c.infer("simple_string", inputs)
    assert [int(v) for v in result.as_numpy("OUTPUT0").reshape(-1)] == [i + 1 for i in range(16)]
    assert [int(v) for v in result.as_numpy("OUTPUT1").reshape(-1)] == [i - 1 for i in range(16)]


@pytest.mark.parametrize("config, message", [
    ('platform: "onnxruntime_onnx"', "platform 'onnxruntime_onnx' is not served here"),
    ('platform: "tensorflow_graphdef" sequence_batching { }', "sequence_batching is not supported"),
    ('platform: "tensorflow_graphdef" input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ -1, -1 ] } } ]',
     "'x': reshape needs every size but one known"),
    ('platform: "tensorflow_savedmodel" parameters { key: "TF_SIGNATURE_DEF" value { string_value: "other" } }',
     "TF_SIGNATURE_DEF 'other'"),
    ('name: "elsewhere" platform: "tensorflow_graphdef"', "is not the model's directory name"),
    ('platform: "tensorflow_graphdef" output [ { name: "y" label_filename: "missing.txt" } ]', "cannot be read"),
    ('platform: "tensorflow_graphdef" max_batch_size: "eight"', "Error parsing text-format"),
])
def test_an_invalid_config_pbtxt_is_a_config_error_naming_the_field(tmp_path, config, message):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(config)
    with pytest.raises(ConfigError, match=message) as e:
        ModelRepository(tmp_path).read_config("m")
    assert "m/config.pbtxt" in str(e.value)


def test_the_config_endpoint_gives_the_config_pbtxt(server, client):
    module, c = client
    config = c.get_model_config("iris")
    config = config["config"] if module is triton_grpc and isinstance(config, dict) and "config" in config else config
    if not isinstance(config, dict):  # gRPC without as_json: the message
        from google.protobuf import json_format

        config = json_format.MessageToDict(config.config, preserving_proto_field_name=True)
    assert config["name"] == "iris" and config["backend"] == "tensorflow" and int(config["max_batch_size"]) == 8
    assert config["output"][0]["label_filename"] == "labels.txt"
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 500


def test_reshape_between_the_clients_dims_and_the_graphs_shape(client):
    module, c = client
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    tensor = module.InferInput("x", [2, 2], "FP32")
    tensor.set_data_from_numpy(x)
    y = c.infer("reshaped", [tensor]).as_numpy("y")
    assert y.shape == (2, 2)  # the graph's [4], reshaped to the config's dims
    np.testing.assert_allclose(y, x * 0.5 + 2)
    wrong = module.InferInput("x", [3], "FP32")
    wrong.set_data_from_numpy(np.zeros(3, np.float32))
    with pytest.raises(Exception, match=r"cannot be reshaped to \[4\]"):
        c.infer("reshaped", [wrong])


def test_default_model_filename_and_tf_graph_tag(tmp_path, make_server):
    root = tmp_path / "repo"
    (root / "renamed" / "1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "half_plus_two" / "1" / "model.pb", root / "renamed" / "1" / "frozen.pb")
    (root / "renamed" / "config.pbtxt").write_text('platform: "tensorflow_graphdef" default_model_filename: "frozen.pb"\n'
                                                   'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                                                   'output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')
    for name, tag in (("tagged", "serve"), ("mistagged", "gpu")):
        shutil.copytree(FIXTURES / "saved_models" / "half_plus_two_serving" / "model", root / name / "1" / "model.savedmodel")
        (root / name / "config.pbtxt").write_text(
            f'platform: "tensorflow_savedmodel" parameters {{ key: "TF_GRAPH_TAG" value {{ string_value: "{tag}" }} }}\n')
    server = make_server(root, poll_interval_s=0)
    c = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        x = triton_http.InferInput("x", [2], "FP32")
        x.set_data_from_numpy(np.array([2.0, 4.0], np.float32))
        np.testing.assert_allclose(c.infer("renamed", [x]).as_numpy("y"), [3.0, 4.0])
        assert c.is_model_ready("tagged") and not c.is_model_ready("mistagged")
        status = {m["name"]: m for m in c.get_model_repository_index()}
        assert "gpu" in status["mistagged"]["reason"]  # no MetaGraph tagged gpu: the load error names the tags
    finally:
        c.close()


def test_tf_init_ops_file_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel" parameters { key: "TF_INIT_OPS_FILE" value { string_value: "init.json" } }\n')
    with pytest.raises(ConfigError, match="TF_INIT_OPS_FILE is not supported"):
        ModelRepository(tmp_path).read_config("m")


def test_the_api_does_not_write_a_config_yaml_over_a_config_pbtxt(server):
    import httpx

    response = httpx.put(f"{server.url}/v1/models/iris/labels/stable", json={"version": 1}, timeout=30)
    assert response.status_code == 409 and "config.pbtxt" in response.json()["error"]
