"""Golden fixtures: small TensorFlow graphs with the outputs real TensorFlow computes for them.

A fixture is a directory holding `model.pb` (or `model.pbtxt`), `case.json` (feeds, fetches,
tolerances) and `data.npz` (feed arrays and TensorFlow's outputs); tests/fixtures/README.md describes
the format. TensorFlow is a tool here, never a dependency of tensorgate: run this file with the
TensorFlow venv, by hand, and commit what it writes under tests/fixtures/.

    /work/tfvenv/bin/python tools/make_fixtures.py                 # every golden fixture
    /work/tfvenv/bin/python tools/make_fixtures.py --only ops/conv  # cases whose path contains it
    /work/tfvenv/bin/python tools/make_fixtures.py --bench          # large models -> bench/models/
    /work/tfvenv/bin/python tools/make_fixtures.py --only saved_models/   # SavedModels (and bundles/)

Expected outputs come from importing the very GraphDef written to disk into a fresh graph and running
it in a v1 Session with Grappler turned off, so they are the outputs of the saved graph, op for op.
After each fixture, GraphDefs written by tensorgate's own writer (engine.save_graph) are imported back
into TensorFlow and must give the same outputs; that check is skipped, with a warning, while the
engine cannot be imported.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from tensorflow.core.framework import node_def_pb2, types_pb2  # noqa: E402
from tensorflow.python.framework.convert_to_constants import (  # noqa: E402
    convert_variables_to_constants_v2,
)

import keras  # noqa: E402

tf1 = tf.compat.v1
raw = tf.raw_ops

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
BENCH = ROOT / "bench" / "models"
ENGINE_PYTHON = ROOT / ".venv" / "bin" / "python"

# numpy cannot store bfloat16 or variable-length strings in an .npz without pickling: such arrays are
# stored as uint16 bit patterns / fixed-width bytes and case.json names their real dtype.
STORED_AS = {"bfloat16": np.uint16, "string": np.bytes_}


# --- what a case is --------------------------------------------------------------------------------------


@dataclass
class Fixture:
    """One graph, one signature: what to feed, what to fetch, and how close is close enough."""

    graph_def: tf1.GraphDef
    feeds: list[tuple[str, np.ndarray]]
    fetches: list[str]
    description: str
    rtol: float = 1e-5
    atol: float = 1e-5
    as_text: bool = False


@dataclass
class Spec:
    path: str
    make: Callable[[], Fixture]
    may_skip: str | None = None  # why TensorFlow itself may be unable to run it


CASES: dict[str, Spec] = {}


class Builder:
    """Collects placeholders and their feed values while a TF1-style graph is being built."""

    def __init__(self, path: str):
        self.rng = np.random.default_rng(zlib.crc32(path.encode()))
        self.feeds: list[tuple[str, np.ndarray]] = []

    def feed(self, value, name: str, shape=None) -> tf.Tensor:
        value = np.asarray(value)
        dtype = tf.as_dtype(value.dtype)
        t = tf1.placeholder(dtype, value.shape if shape is None else shape, name=name)
        self.feeds.append((t.name, value))
        return t

    def randn(self, *shape, scale=1.0, dtype=np.float32) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(dtype)

    def uniform(self, lo, hi, *shape, dtype=np.float32) -> np.ndarray:
        return self.rng.uniform(lo, hi, shape).astype(dtype)

    def ints(self, lo, hi, *shape, dtype=np.int32) -> np.ndarray:
        return self.rng.integers(lo, hi, shape).astype(dtype)


def tf1_case(path, description, *, rtol=1e-5, atol=1e-5, as_text=False, may_skip=None):
    """Register `fn(builder) -> tensor | [tensors]`, built in a fresh tf.Graph; the result is fetched."""

    def register(fn):
        def make() -> Fixture:
            b = Builder(path)
            graph = tf.Graph()
            with graph.as_default():
                outs = fn(b)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            return Fixture(graph.as_graph_def(), b.feeds, [t.name for t in outs], description,
                           rtol, atol, as_text)

        CASES[path] = Spec(path, make, may_skip)
        return fn

    return register


def op_case(path, description, fn, **kw):
    tf1_case(path, description, **kw)(fn)


def call_raw(op: str, *inputs, **attrs):
    """tf.raw_ops.<op> with its leading inputs given positionally (raw ops take keywords only)."""
    fn = getattr(raw, op)
    names = list(inspect.signature(fn).parameters)
    return fn(**dict(zip(names, inputs)), **attrs)


# --- running TensorFlow on a GraphDef --------------------------------------------------------------------


def session_config() -> tf1.ConfigProto:
    # NOTE: Grappler off, so TensorFlow runs exactly the ops of the saved graph (no folding/fusing).
    config = tf1.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=1)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def run_graph_def(graph_def, feeds, fetches) -> list[np.ndarray]:
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
        dtypes = [graph.get_tensor_by_name(name).dtype for name in fetches]
    with tf1.Session(graph=graph, config=session_config()) as sess:
        values = sess.run(list(fetches), feed_dict=dict(feeds))
    out = []
    for value, dtype in zip(values, dtypes):
        if dtype == tf.string:
            out.append(np.array(value, dtype=object))
        else:
            out.append(np.asarray(value, dtype=dtype.as_numpy_dtype))
    return out


def read_graph_def(path: Path) -> tf1.GraphDef:
    graph_def = tf1.GraphDef()
    if path.suffix == ".pbtxt":
        text_format.Parse(path.read_text(), graph_def)
    else:
        graph_def.ParseFromString(path.read_bytes())
    return graph_def


def write_graph_def(graph_def, path: Path) -> None:
    if path.suffix == ".pbtxt":
        path.write_text(text_format.MessageToString(graph_def))
    else:
        # NOTE: deterministic, so that map fields (attrs) are written in one order, run after run
        path.write_bytes(graph_def.SerializeToString(deterministic=True))


# --- writing a fixture -----------------------------------------------------------------------------------


def dtype_name(array: np.ndarray) -> str:
    if array.dtype == object:
        return "string"
    return tf.as_dtype(array.dtype).name


def to_storage(array: np.ndarray) -> np.ndarray:
    name = dtype_name(array)
    if name == "bfloat16":
        return array.view(np.uint16)
    if name == "string":
        return array.astype(np.bytes_)
    return array


def tensor_entry(name: str, key: str, array: np.ndarray) -> dict:
    entry = {"name": name, "key": key}
    if dtype_name(array) in STORED_AS:
        entry["dtype"] = dtype_name(array)
    return entry


def tolerances(fixture: Fixture, outputs) -> tuple[float, float]:
    """Half-precision outputs cannot meet float32 tolerances; widen them per dtype."""
    rtol, atol = fixture.rtol, fixture.atol
    if rtol == atol == 0.0:  # exact cases (casts, constants) pin rounding, whatever the dtype
        return rtol, atol
    names = {dtype_name(o) for o in outputs}
    if "float16" in names:
        rtol, atol = max(rtol, 1e-3), max(atol, 1e-3)
    if "bfloat16" in names:
        rtol, atol = max(rtol, 1e-2), max(atol, 1e-2)
    return rtol, atol


def write_fixture(path: str, fixture: Fixture) -> list[np.ndarray]:
    out_dir = FIXTURES / path
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    model = out_dir / ("model.pbtxt" if fixture.as_text else "model.pb")
    write_graph_def(fixture.graph_def, model)
    fetches = list(fixture.fetches)
    outputs = run_graph_def(read_graph_def(model), fixture.feeds, fetches)

    arrays = {}
    feeds = []
    for i, (name, value) in enumerate(fixture.feeds):
        feeds.append(tensor_entry(name, f"feed_{i}", value))
        arrays[f"feed_{i}"] = to_storage(value)
    fetch_entries = []
    for i, (name, value) in enumerate(zip(fetches, outputs)):
        fetch_entries.append(tensor_entry(name, f"fetch_{i}", value))
        arrays[f"fetch_{i}"] = to_storage(value)
    rtol, atol = tolerances(fixture, outputs)
    case = {"description": fixture.description, "feeds": feeds, "fetches": fetch_entries,
            "targets": [], "rtol": rtol, "atol": atol}
    (out_dir / "case.json").write_text(json.dumps(case, indent=2) + "\n")
    np.savez_compressed(out_dir / "data.npz", **arrays)
    return outputs


# --- round trip through tensorgate's writer --------------------------------------------------------------

_ROUND_TRIP = ("import engine,sys; "
               "engine.save_graph(engine.load_graph(sys.argv[1]), sys.argv[2]); "
               "engine.save_graph(engine.load_graph(sys.argv[1]), sys.argv[3], as_text=True)")
# While kernels are missing, load_graph refuses the graph; the writer is still checked on the parsed proto.
_ROUND_TRIP_PARSED = _ROUND_TRIP.replace("engine.load_graph", "engine.parse_graph_def")
_engine_state: dict[str, bool] = {}


def engine_writer_available() -> bool:
    if "ok" not in _engine_state:
        probe = subprocess.run(
            [str(ENGINE_PYTHON), "-c", "import engine; engine.load_graph; engine.save_graph"],
            cwd=ROOT, capture_output=True, text=True)
        _engine_state["ok"] = probe.returncode == 0
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            print(f"WARNING: engine not importable ({last}); skipping the writer round trip")
    return _engine_state["ok"]


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == object:
        return a.tolist() == b.tolist()
    if a.dtype.kind in "fc" or dtype_name(a) == "bfloat16":
        return np.array_equal(a.astype(np.complex128), b.astype(np.complex128), equal_nan=True)
    return np.array_equal(a, b)


def check_round_trip(path: str, fixture: Fixture, expected: list[np.ndarray]) -> str:
    """Re-run the graph as engine.save_graph writes it (binary and text); 'ok', 'skipped' or why not."""
    if not engine_writer_available():
        return "skipped"
    model = next((FIXTURES / path).glob("model.pb*"))
    with tempfile.TemporaryDirectory() as tmp:
        out_pb, out_txt = Path(tmp, "out.pb"), Path(tmp, "out.pbtxt")
        args = [str(model), str(out_pb), str(out_txt)]
        proc = subprocess.run([str(ENGINE_PYTHON), "-c", _ROUND_TRIP, *args], cwd=ROOT, capture_output=True,
                              text=True)
        how = "ok"
        if proc.returncode != 0 and "UnsupportedOpError" in proc.stderr:
            how = "ok (via parse_graph_def: load_graph lacks kernels)"
            proc = subprocess.run([str(ENGINE_PYTHON), "-c", _ROUND_TRIP_PARSED, *args], cwd=ROOT,
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            return "engine failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
        for written in (out_pb, out_txt):
            try:
                again = run_graph_def(read_graph_def(written), fixture.feeds, fixture.fetches)
            except Exception as e:  # noqa: BLE001  (TF's parse and run errors are all worth reporting)
                return f"TF cannot run {written.name}: {str(e).splitlines()[0][:200]}"
            for name, a, b in zip(fixture.fetches, expected, again):
                if not same_values(a, b):
                    return f"{written.name}: output {name} changed"
    return how


# --- Keras models, frozen ----------------------------------------------------------------------------------


def freeze_function(function, specs: list[tf.TensorSpec], lower_control_flow: bool = True):
    """Freeze a tf.function the TF2 way: concrete function, variables folded into Const nodes.

    With `lower_control_flow` (TensorFlow's default) If/While become v1 dataflow control flow
    (Switch/Merge/Enter/Exit/NextIteration/LoopCond); without it they stay functional ops calling
    functions in the GraphDef's library.
    """
    concrete = function.get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=lower_control_flow)
    graph_def = frozen.graph.as_graph_def()
    return graph_def, [t.name for t in frozen.inputs], [t.name for t in frozen.outputs]


def freeze_keras(model, specs: list[tf.TensorSpec], lower_control_flow: bool = True):
    """Freeze a Keras 3 model the TF2 way: concrete function, variables folded into Const nodes."""

    @tf.function
    def serve(*args):
        return model(args[0] if len(args) == 1 else list(args), training=False)

    return freeze_function(serve, specs, lower_control_flow)


def randomize_batch_norm(model, rng) -> None:
    """Fresh BatchNormalization layers are identities; give them statistics worth testing."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, variance = (w.shape for w in layer.get_weights())
            layer.set_weights([rng.uniform(0.5, 1.5, gamma).astype(np.float32),
                               (rng.standard_normal(beta) * 0.2).astype(np.float32),
                               (rng.standard_normal(mean) * 0.3).astype(np.float32),
                               rng.uniform(0.5, 2.0, variance).astype(np.float32)])


def keras_case(path, description, *, rtol=1e-5, atol=1e-5):
    """Register `fn(rng) -> (model, [(TensorSpec, feed array)])`, frozen and fed."""

    def register(fn):
        def make() -> Fixture:
            seed = zlib.crc32(path.encode()) % (2**31)
            keras.utils.set_random_seed(seed)
            rng = np.random.default_rng(seed)
            model, inputs = fn(rng)
            randomize_batch_norm(model, rng)
            graph_def, feed_names, fetch_names = freeze_keras(model, [spec for spec, _ in inputs])
            feeds = [(name, value) for name, (_, value) in zip(feed_names, inputs)]
            return Fixture(graph_def, feeds, fetch_names, description, rtol, atol)

        CASES[path] = Spec(path, make)
        return fn

    return register


# === models ==================================================================================================


@keras_case("models/mlp", "Keras MLP 20-32-16-10, relu and softmax")
def _mlp(rng):
    inp = keras.Input((20,), name="x")
    h = keras.layers.Dense(32, activation="relu")(inp)
    h = keras.layers.Dense(16, activation="relu")(h)
    out = keras.layers.Dense(10, activation="softmax")(h)
    x = rng.standard_normal((3, 20)).astype(np.float32)
    return keras.Model(inp, out), [(tf.TensorSpec([None, 20], tf.float32, name="x"), x)]


@tf1_case("models/cnn_fused_bn", "TF1 CNN: Conv2D+BiasAdd, FusedBatchNormV3 (inference), Relu, "
          "MaxPool/AvgPool SAME stride 2 on odd sizes, Mean, MatMul, Softmax", rtol=1e-4, atol=1e-5)
def _cnn_fused_bn(b):
    x = b.feed(b.randn(2, 15, 15, 3), "images", shape=[None, 15, 15, 3])

    def conv_bn(h, cin, cout, padding, name):
        with tf.name_scope(name):
            h = tf.nn.conv2d(h, b.randn(3, 3, cin, cout, scale=0.4), strides=1, padding=padding)
            h = tf.nn.bias_add(h, b.randn(cout, scale=0.1))
            h, _, _ = tf1.nn.fused_batch_norm(
                h, b.uniform(0.5, 1.5, cout), b.randn(cout, scale=0.1), b.randn(cout, scale=0.2),
                b.uniform(0.5, 2.0, cout), epsilon=1e-3, is_training=False)
            return tf.nn.relu(h)

    h = conv_bn(x, 3, 8, "SAME", "block1")
    h = tf.nn.max_pool2d(h, 3, 2, "SAME")           # 15 -> 8
    h = conv_bn(h, 8, 12, "VALID", "block2")        # 8 -> 6
    h = tf.nn.avg_pool2d(h, 3, 2, "SAME")           # 6 -> 3, edge windows partly padded
    h = tf.reduce_mean(h, axis=[1, 2])
    logits = tf.matmul(h, b.randn(12, 5, scale=0.3)) + b.randn(5, scale=0.1)
    return tf.nn.softmax(logits, name="probs")


@keras_case("models/cnn_keras_bn", "Keras CNN with BatchNormalization (frozen to Mul/Sub/Rsqrt/AddV2), "
            "MaxPooling2D/AveragePooling2D SAME, GlobalAveragePooling2D", rtol=1e-4)
def _cnn_keras_bn(rng):
    L = keras.layers
    inp = keras.Input((13, 13, 3), name="images")
    h = L.Conv2D(8, 3, strides=2, padding="same")(inp)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.MaxPooling2D(2, padding="same")(h)
    h = L.Conv2D(12, 3, padding="valid", use_bias=False)(h)
    h = L.BatchNormalization(epsilon=1e-3)(h)
    h = L.ReLU()(h)
    h = L.AveragePooling2D(3, strides=2, padding="same")(h)
    h = L.GlobalAveragePooling2D()(h)
    out = L.Dense(6)(h)
    x = rng.standard_normal((2, 13, 13, 3)).astype(np.float32)
    return keras.Model(inp, out), [(tf.TensorSpec([None, 13, 13, 3], tf.float32, name="images"), x)]


def _inverted_residual(h, expand, out_ch, stride):
    L = keras.layers
    cin = h.shape[-1]
    y = L.Conv2D(expand, 1, use_bias=False)(h)
    y = L.BatchNormalization()(y)
    y = L.ReLU(6.0)(y)
    if stride == 2:
        y = L.ZeroPadding2D(((0, 1), (0, 1)))(y)  # as MobileNetV2 does: Pad then VALID
    y = L.DepthwiseConv2D(3, strides=stride, padding="valid" if stride == 2 else "same", use_bias=False)(y)
    y = L.BatchNormalization()(y)
    y = L.ReLU(6.0)(y)
    y = L.Conv2D(out_ch, 1, use_bias=False)(y)
    y = L.BatchNormalization()(y)
    return L.Add()([h, y]) if stride == 1 and cin == out_ch else y


@keras_case("models/mobilenet_block", "MobileNetV2-style net: DepthwiseConv2dNative, Relu6, Pad + "
            "stride-2 depthwise, inverted residual with Add", rtol=1e-4)
def _mobilenet(rng):
    L = keras.layers
    inp = keras.Input((16, 16, 3), name="images")
    h = L.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(inp)
    h = L.BatchNormalization()(h)
    h = L.ReLU(6.0)(h)
    h = _inverted_residual(h, 16, 8, 1)
    h = _inverted_residual(h, 24, 12, 2)
    h = _inverted_residual(h, 24, 12, 1)
    h = L.GlobalAveragePooling2D()(h)
    out = L.Dense(5, activation="softmax")(h)
    x = rng.standard_normal((2, 16, 16, 3)).astype(np.float32)
    return keras.Model(inp, out), [(tf.TensorSpec([None, 16, 16, 3], tf.float32, name="images"), x)]


def _res_block(h, ch, stride):
    L = keras.layers
    y = L.Conv2D(ch, 3, strides=stride, padding="same", use_bias=False)(h)
    y = L.BatchNormalization()(y)
    y = L.ReLU()(y)
    y = L.Conv2D(ch, 3, padding="same", use_bias=False)(y)
    y = L.BatchNormalization()(y)
    shortcut = h
    if stride != 1 or h.shape[-1] != ch:
        shortcut = L.Conv2D(ch, 1, strides=stride, use_bias=False)(h)
        shortcut = L.BatchNormalization()(shortcut)
    return L.ReLU()(L.Add()([shortcut, y]))


@keras_case("models/resnet_block", "ResNet-style net: residual Adds, projection shortcut with stride 2",
            rtol=1e-4)
def _resnet(rng):
    L = keras.layers
    inp = keras.Input((12, 12, 3), name="images")
    h = L.Conv2D(8, 3, padding="same")(inp)
    h = L.ReLU()(h)
    h = _res_block(h, 8, 1)
    h = _res_block(h, 12, 2)
    h = L.GlobalAveragePooling2D()(h)
    out = L.Dense(4)(h)
    x = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)
    return keras.Model(inp, out), [(tf.TensorSpec([None, 12, 12, 3], tf.float32, name="images"), x)]


def keras_gelu(t):
    """Keras' exact GELU; TensorFlow writes it with Erfc."""
    return keras.activations.gelu(t, approximate=False)


def bert_gelu(t):
    """Exact GELU as BERT writes it, with Erf (tf2onnx converts Erf but not Erfc)."""
    return 0.5 * t * (1.0 + tf.math.erf(t / np.float32(np.sqrt(2.0))))


def _encoder_layer(h, heads, key_dim, ff, name, gelu=keras_gelu):
    L = keras.layers
    att = L.MultiHeadAttention(num_heads=heads, key_dim=key_dim, name=f"{name}_mha")(h, h)
    h = L.LayerNormalization(epsilon=1e-6, name=f"{name}_ln1")(L.Add()([h, att]))
    f = L.Dense(ff, activation=gelu, name=f"{name}_ff1")(h)
    f = L.Dense(h.shape[-1], name=f"{name}_ff2")(f)
    return L.LayerNormalization(epsilon=1e-6, name=f"{name}_ln2")(L.Add()([h, f]))


@keras_case("models/transformer_block", "Keras MultiHeadAttention encoder block: Einsum, Softmax, "
            "exact GELU (Erfc), LayerNormalization", rtol=1e-4)
def _transformer(rng):
    inp = keras.Input((8, 32), name="tokens")
    out = _encoder_layer(inp, 4, 8, 64, "enc")
    x = rng.standard_normal((2, 8, 32)).astype(np.float32)
    return keras.Model(inp, out), [(tf.TensorSpec([None, 8, 32], tf.float32, name="tokens"), x)]


@tf1_case("models/tensor_ops", "raw tensor ops in one graph: StridedSlice, GatherV2 batch_dims, "
          "ConcatV2, keep_dims reductions, Cast, Where, TopKV2, OneHot, Tile, MirrorPad, SplitV, Unpack")
def _tensor_ops(b):
    x = b.feed(b.randn(2, 6, 5), "x")
    idx = b.feed(b.ints(0, 6, 2, 3), "idx")
    sl = x[..., ::-1][:, tf.newaxis, 1:5, 2]                      # [2,1,4]
    gathered = tf.gather(x, idx, axis=1, batch_dims=1)            # [2,3,5]
    cat = tf.concat([gathered, x[:, :2]], axis=-2)                # [2,5,5]
    red = tf.reduce_max(cat, axis=[-1], keepdims=True)            # [2,5,1]
    ints = tf.cast(cat * 3.0, tf.int32)
    where = tf.where(ints > 1)
    top_v, top_i = tf.math.top_k(tf.reshape(cat, [2, 25]), k=4)
    hot = tf.one_hot(top_i % 5, depth=5, dtype=tf.float32)
    tiled = tf.tile(red, [1, 1, 3])
    padded = tf.pad(sl, [[0, 0], [0, 0], [2, 1]], mode="REFLECT")
    parts = tf.split(padded, [3, -1, 2], axis=-1)
    rows = tf.unstack(tiled, axis=1)
    return [sl, red, where, top_v, hot, tiled, parts[1], rows[4],
            tf.reduce_sum(hot, axis=-2, keepdims=False, name="hot_sum")]


def _scoped_graph(b, feed_default: bool):
    x = b.feed(b.randn(3, 6), "input/x", shape=[None, 6])
    with tf.name_scope("encoder"):
        with tf.name_scope("dense"):
            h = tf.nn.relu(tf.matmul(x, b.randn(6, 8, scale=0.5), name="matmul") + b.randn(8, scale=0.1))
        default = tf.constant(np.full([8], 0.5, np.float32), name="default_scale")
        scale = tf1.placeholder_with_default(default, [8], name="scale")
        if feed_default:
            b.feeds.append((scale.name, b.uniform(0.1, 2.0, 8)))
        h = tf.multiply(h, scale, name="scaled")
    with tf.name_scope("head"):
        logits = tf.matmul(h, b.randn(8, 4, scale=0.5), name="logits")
        return tf.nn.softmax(logits, name="probs")


tf1_case("models/tf1_scopes_default", "TF1 graph with name scopes; the PlaceholderWithDefault is not "
         "fed, so its default flows (text format)", as_text=True)(lambda b: _scoped_graph(b, False))
tf1_case("models/tf1_scopes_fed", "TF1 graph with name scopes; the PlaceholderWithDefault is fed")(
    lambda b: _scoped_graph(b, True))


@tf1_case("models/feed_intermediate", "feeds an intermediate tensor (hidden/Relu:0), not the placeholder; "
          "fetches two tensors downstream of it")
def _feed_intermediate(b):
    x = tf1.placeholder(tf.float32, [None, 4], name="x")  # never fed: pruning must cut above the feed
    with tf.name_scope("hidden"):
        h = tf.nn.relu(tf.matmul(x, b.randn(4, 6)))
    b.feeds.append((h.name, b.uniform(0.0, 2.0, 3, 6)))
    out_a = tf.matmul(h, b.randn(6, 2), name="out_a")
    out_b = tf.reduce_sum(tf.square(h), axis=1, name="out_b")
    return [out_a, out_b]


# === per-op cases ============================================================================================

UNARY_DOMAINS = {  # op -> (lo, hi, extra values worth pinning)
    "Abs": (-3, 3, [0.0, -0.0]), "Neg": (-3, 3, [0.0]), "Exp": (-5, 5, [0.0]),
    "Expm1": (-3, 3, [1e-6, 0.0]), "Log": (0.05, 10, [1.0]), "Log1p": (-0.9, 5, [1e-7]),
    "Sqrt": (0, 10, [0.0, 4.0]), "Rsqrt": (0.05, 10, [1.0, 4.0]), "Reciprocal": (0.2, 4, [-0.5, -3.0]),
    "Square": (-3, 3, []), "Sin": (-4, 4, []), "Cos": (-4, 4, []), "Tan": (-1.4, 1.4, []),
    "Asin": (-0.99, 0.99, [1.0, -1.0]), "Acos": (-0.99, 0.99, [1.0]), "Atan": (-5, 5, []),
    "Sinh": (-3, 3, []), "Cosh": (-3, 3, []), "Tanh": (-4, 4, [20.0, -20.0]),
    "Asinh": (-5, 5, []), "Acosh": (1, 5, [1.0]), "Atanh": (-0.95, 0.95, [0.0]),
    "Sigmoid": (-8, 8, [40.0, -40.0]), "Relu": (-3, 3, [0.0]), "Relu6": (-3, 9, [6.0, 0.0]),
    "Elu": (-4, 3, [0.0]), "Selu": (-4, 3, [0.0]), "Softplus": (-5, 5, [30.0, -30.0, 0.0]),
    "Softsign": (-5, 5, []), "Erf": (-3, 3, [0.0, 5.0]), "Erfc": (-3, 3, [0.0, 5.0, -5.0]),
    "Floor": (-3, 3, [-0.0, -1.0, 2.0]), "Ceil": (-3, 3, [-0.5, 1.0]),
    "Round": (-3, 3, [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]), "Rint": (-3, 3, [-2.5, -0.5, 0.5, 1.5]),
    "Sign": (-3, 3, [0.0, -0.0]), "IsNan": (-3, 3, [np.nan, np.inf]), "IsInf": (-3, 3, [np.inf, -np.inf, np.nan]),
    "IsFinite": (-3, 3, [np.nan, np.inf]),
}


def _unary_input(b, lo, hi, extra):
    values = np.concatenate([b.uniform(lo, hi, 20 - len(extra)), np.asarray(extra, np.float32)])
    return values.astype(np.float32).reshape(4, 5)


for _op, (_lo, _hi, _extra) in UNARY_DOMAINS.items():
    op_case(f"ops/unary/{_op.lower()}", f"{_op} on float32, including edge values {_extra}",
            lambda b, op=_op, lo=_lo, hi=_hi, ex=_extra: call_raw(op, b.feed(_unary_input(b, lo, hi, ex), "x")))

op_case("ops/unary/leaky_relu", "LeakyRelu alpha=0.2",
        lambda b: raw.LeakyRelu(features=b.feed(b.randn(4, 5), "x"), alpha=0.2))
op_case("ops/unary/logical_not", "LogicalNot on bool",
        lambda b: raw.LogicalNot(x=b.feed(b.rng.random((3, 4)) > 0.5, "x")))
for _op in ("Abs", "Neg", "Sign", "Square"):
    op_case(f"ops/unary/{_op.lower()}_int32", f"{_op} on int32 including 0 and negatives",
            lambda b, op=_op: call_raw(op, b.feed(np.array([-7, -1, 0, 1, 5, 46340], np.int32), "x")))

# --- binary, broadcasting --------------------------------------------------------------------------------

BINARY_FLOAT = ["Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "SquaredDifference",
                "FloorDiv", "FloorMod", "Atan2"]
for _op in BINARY_FLOAT:
    op_case(f"ops/binary/{_op.lower()}", f"{_op} float32, [2,3,4] with [3,1] broadcasting",
            lambda b, op=_op: call_raw(op, b.feed(b.randn(2, 3, 4, scale=3), "x"),
                                       b.feed(np.where(np.abs(r := b.randn(3, 1, scale=2)) < 0.3, 1.5, r), "y")))
op_case("ops/binary/pow", "Pow float32 with positive base, broadcasting a row of exponents",
        lambda b: raw.Pow(x=b.feed(b.uniform(0.1, 3, 3, 4), "x"), y=b.feed(b.uniform(-2, 3, 4), "y")))
op_case("ops/binary/div_no_nan", "DivNoNan: zero divisor gives 0",
        lambda b: raw.DivNoNan(x=b.feed(b.randn(2, 4), "x"),
                               y=b.feed(np.array([2.0, 0.0, -0.5, 0.0], np.float32), "y")))

INT_NUM = np.array([-7, 7, -7, 7, 0, -1, 6, -6, 5], np.int64)
INT_DEN = np.array([2, 2, -2, -2, 3, 3, -3, 4, 7], np.int64)
for _op in ("Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod"):
    for _dt in (np.int32, np.int64):
        op_case(f"ops/binary/{_op.lower()}_{np.dtype(_dt).name}",
                f"{_op} on {np.dtype(_dt).name} with negative operands",
                lambda b, op=_op, dt=_dt: call_raw(op, b.feed(INT_NUM.astype(dt), "x"),
                                                   b.feed(INT_DEN.astype(dt), "y")))
op_case("ops/binary/floormod_int32_broadcast", "FloorMod int32 [3,4] by [4] with negative divisors",
        lambda b: raw.FloorMod(x=b.feed(b.ints(-20, 20, 3, 4), "x"),
                               y=b.feed(np.array([3, -3, 5, -7], np.int32), "y")))

for _op in ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"):
    op_case(f"ops/compare/{_op.lower()}", f"{_op} float32 [3,4] vs [4] with ties",
            lambda b, op=_op: call_raw(op, b.feed(np.round(b.randn(3, 4)), "x"),
                                       b.feed(np.array([0.0, 1.0, -1.0, 0.0], np.float32), "y")))
op_case("ops/compare/equal_int32", "Equal on int32 with broadcasting",
        lambda b: raw.Equal(x=b.feed(b.ints(0, 3, 2, 3), "x"), y=b.feed(np.array([[1], [2]], np.int32), "y")))
op_case("ops/compare/logical_and_or", "LogicalAnd / LogicalOr with broadcasting",
        lambda b: [raw.LogicalAnd(x=(p := b.feed(b.rng.random((3, 4)) > 0.5, "p")),
                                  y=(q := b.feed(np.array([True, False, True, False]), "q"))),
                   raw.LogicalOr(x=p, y=q)])
op_case("ops/select/select_vector_cond", "Select (v1): a [n] condition picks whole rows",
        lambda b: raw.Select(condition=b.feed(np.array([True, False, True]), "cond"),
                             x=b.feed(b.randn(3, 4), "x"), y=b.feed(b.randn(3, 4), "y")))
op_case("ops/select/select_same_shape", "Select (v1) with an elementwise condition",
        lambda b: raw.Select(condition=b.feed(b.rng.random((3, 4)) > 0.5, "cond"),
                             x=b.feed(b.randn(3, 4), "x"), y=b.feed(b.randn(3, 4), "y")))
op_case("ops/select/selectv2_broadcast", "SelectV2 broadcasting cond [3,1], x [1,4], y scalar",
        lambda b: raw.SelectV2(condition=b.feed(np.array([[True], [False], [True]]), "cond"),
                               t=b.feed(b.randn(1, 4), "x"), e=b.feed(np.float32(-9.0), "y")))
op_case("ops/bias_add/nhwc", "BiasAdd NHWC",
        lambda b: raw.BiasAdd(value=b.feed(b.randn(2, 3, 3, 4), "x"), bias=b.feed(b.randn(4), "bias")))
op_case("ops/bias_add/nchw", "BiasAdd NCHW (bias on axis 1)",
        lambda b: raw.BiasAdd(value=b.feed(b.randn(2, 4, 3, 3), "x"), bias=b.feed(b.randn(4), "bias"),
                              data_format="NCHW"))
op_case("ops/add_n", "AddN of three tensors",
        lambda b: raw.AddN(inputs=[b.feed(b.randn(2, 5), f"x{i}") for i in range(3)]))

# --- matmul family -----------------------------------------------------------------------------------------

for _ta in (False, True):
    for _tb in (False, True):
        op_case(f"ops/matmul/matmul_ta{int(_ta)}_tb{int(_tb)}", f"MatMul transpose_a={_ta} transpose_b={_tb}",
                lambda b, ta=_ta, tb=_tb: raw.MatMul(
                    a=b.feed(b.randn(*((5, 3) if ta else (3, 5))), "a"),
                    b=b.feed(b.randn(*((4, 5) if tb else (5, 4))), "b"), transpose_a=ta, transpose_b=tb))
op_case("ops/matmul/batch_matmul_v2_broadcast", "BatchMatMulV2 [2,1,3,4] x [3,4,5] -> [2,3,3,5]",
        lambda b: raw.BatchMatMulV2(x=b.feed(b.randn(2, 1, 3, 4), "x"), y=b.feed(b.randn(3, 4, 5), "y")))
op_case("ops/matmul/batch_matmul_v2_adj_x", "BatchMatMulV2 adj_x: [2,4,3]^T x [4,5] (rank broadcast)",
        lambda b: raw.BatchMatMulV2(x=b.feed(b.randn(2, 4, 3), "x"), y=b.feed(b.randn(4, 5), "y"), adj_x=True))
op_case("ops/matmul/batch_matmul_v2_adj_y", "BatchMatMulV2 adj_y: [2,3,4] x [2,5,4]^T",
        lambda b: raw.BatchMatMulV2(x=b.feed(b.randn(2, 3, 4), "x"), y=b.feed(b.randn(2, 5, 4), "y"), adj_y=True))
op_case("ops/matmul/batch_matmul_v2_complex_adj", "BatchMatMulV2 complex64 adj_x conjugates",
        lambda b: raw.BatchMatMulV2(x=b.feed((b.randn(2, 3, 2) + 1j * b.randn(2, 3, 2)).astype(np.complex64), "x"),
                                    y=b.feed((b.randn(2, 3, 4) + 1j * b.randn(2, 3, 4)).astype(np.complex64), "y"),
                                    adj_x=True))
EINSUMS = {
    "matmul": ("ij,jk->ik", [(3, 4), (4, 5)]), "batched": ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    "mha_project": ("abc,cde->abde", [(2, 6, 8), (8, 2, 4)]),
    "mha_scores": ("aecd,abcd->acbe", [(2, 5, 3, 4), (2, 6, 3, 4)]),
    "bnts": ("BTNH,BSNH->BNTS", [(2, 5, 3, 4), (2, 6, 3, 4)]),
    "transpose": ("ij->ji", [(3, 4)]), "sum_all": ("ij->", [(3, 4)]), "dot_rows": ("bi,bi->b", [(3, 4), (3, 4)]),
    "outer": ("i,j->ij", [(3,), (4,)]),
}
for _name, (_eq, _shapes) in EINSUMS.items():
    op_case(f"ops/einsum/{_name}", f"Einsum '{_eq}'",
            lambda b, eq=_eq, shapes=_shapes: raw.Einsum(
                inputs=[b.feed(b.randn(*s), f"in{i}") for i, s in enumerate(shapes)], equation=eq))

# --- convolution and pooling -------------------------------------------------------------------------------

CONV2D = {  # name -> (input NHWC, filter HWIO, strides, padding, dilations, explicit, data_format)
    "same_stride2_odd": ((1, 9, 9, 4), (3, 3, 4, 6), 2, "SAME", 1, None, "NHWC"),
    "same_k4_stride2_even": ((1, 10, 10, 3), (4, 4, 3, 5), 2, "SAME", 1, None, "NHWC"),
    "same_k2_stride1": ((2, 7, 6, 3), (2, 2, 3, 4), 1, "SAME", 1, None, "NHWC"),
    "valid_stride1": ((2, 8, 8, 3), (3, 3, 3, 5), 1, "VALID", 1, None, "NHWC"),
    "valid_k4_stride2": ((1, 10, 11, 3), (4, 4, 3, 4), 2, "VALID", 1, None, "NHWC"),
    "same_dilation2": ((1, 11, 11, 2), (3, 3, 2, 4), 1, "SAME", 2, None, "NHWC"),
    "valid_dilation2": ((1, 11, 10, 2), (3, 3, 2, 4), 1, "VALID", 2, None, "NHWC"),
    "explicit_padding": ((1, 8, 8, 3), (3, 3, 3, 4), 2, "EXPLICIT", 1, [0, 0, 1, 2, 2, 0, 0, 0], "NHWC"),
    "pointwise_1x1": ((2, 5, 5, 6), (1, 1, 6, 8), 1, "VALID", 1, None, "NHWC"),
    "nchw_same_stride2": ((1, 4, 9, 9), (3, 3, 4, 6), 2, "SAME", 1, None, "NCHW"),
}


def _spatial(v, data_format):
    return [1, 1, v, v] if data_format == "NCHW" else [1, v, v, 1]


for _name, (_x, _w, _s, _p, _d, _exp, _fmt) in CONV2D.items():
    op_case(f"ops/conv2d/{_name}", f"Conv2D {_p} stride {_s} dilation {_d} {_fmt} input {_x} filter {_w}",
            lambda b, x=_x, w=_w, s=_s, p=_p, d=_d, exp=_exp, fmt=_fmt: raw.Conv2D(
                input=b.feed(b.randn(*x), "x"), filter=b.feed(b.randn(*w, scale=0.3), "w"),
                strides=_spatial(s, fmt), padding=p, dilations=_spatial(d, fmt),
                explicit_paddings=exp or [], data_format=fmt),
            may_skip="TF CPU runs NCHW convolutions only through oneDNN" if _fmt == "NCHW" else None)

DEPTHWISE = {
    "mult2_stride2_same": ((1, 9, 9, 4), (3, 3, 4, 2), 2, "SAME", 1, "NHWC"),
    "mult1_dilation2_valid": ((1, 11, 11, 3), (3, 3, 3, 1), 1, "VALID", 2, "NHWC"),
    "mult1_stride1_same": ((2, 6, 6, 5), (3, 3, 5, 1), 1, "SAME", 1, "NHWC"),
    "mult3_stride2_valid": ((1, 10, 9, 2), (3, 3, 2, 3), 2, "VALID", 1, "NHWC"),
    "nchw_mult2_stride2_same": ((1, 4, 9, 9), (3, 3, 4, 2), 2, "SAME", 1, "NCHW"),
}
for _name, (_x, _w, _s, _p, _d, _fmt) in DEPTHWISE.items():
    op_case(f"ops/depthwise/{_name}", f"DepthwiseConv2dNative {_p} stride {_s} dilation {_d} {_fmt} "
            f"filter {_w} (output channel = c*multiplier + m)",
            lambda b, x=_x, w=_w, s=_s, p=_p, d=_d, fmt=_fmt: raw.DepthwiseConv2dNative(
                input=b.feed(b.randn(*x), "x"), filter=b.feed(b.randn(*w, scale=0.3), "w"),
                strides=_spatial(s, fmt), padding=p, dilations=_spatial(d, fmt), data_format=fmt),
            may_skip="TF CPU runs NCHW convolutions only through oneDNN" if _fmt == "NCHW" else None)

BACKPROP_INPUT = {  # name -> (input_sizes, filter, out_backprop shape, stride, padding)
    "same_stride2": ([1, 9, 9, 4], (3, 3, 4, 6), (1, 5, 5, 6), 2, "SAME"),
    "valid_stride2": ([1, 9, 9, 4], (3, 3, 4, 6), (1, 4, 4, 6), 2, "VALID"),
    "valid_stride2_extra_row": ([2, 10, 8, 3], (3, 3, 3, 5), (2, 4, 3, 5), 2, "VALID"),
    "same_k4_stride2_even": ([1, 8, 8, 3], (4, 4, 3, 2), (1, 4, 4, 2), 2, "SAME"),
    "same_stride1": ([1, 6, 6, 2], (3, 3, 2, 3), (1, 6, 6, 3), 1, "SAME"),
}
for _name, (_sizes, _w, _g, _s, _p) in BACKPROP_INPUT.items():
    op_case(f"ops/conv2d_backprop_input/{_name}", f"Conv2DBackpropInput {_p} stride {_s}, input_sizes {_sizes}",
            lambda b, sizes=_sizes, w=_w, g=_g, s=_s, p=_p: raw.Conv2DBackpropInput(
                input_sizes=tf.constant(sizes, tf.int32, name="input_sizes"),
                filter=b.feed(b.randn(*w, scale=0.3), "w"), out_backprop=b.feed(b.randn(*g), "dy"),
                strides=[1, s, s, 1], padding=p))

POOLS = {  # name -> (input, ksize, stride, padding)
    "same_k3_s2_odd": ((1, 9, 9, 3), 3, 2, "SAME"), "valid_k3_s2_odd": ((2, 9, 9, 3), 3, 2, "VALID"),
    "same_k2_s2_odd": ((1, 7, 7, 2), 2, 2, "SAME"), "same_k3_s1": ((1, 6, 5, 2), 3, 1, "SAME"),
    "valid_k2_s2_even": ((1, 8, 8, 2), 2, 2, "VALID"),
}
for _op in ("MaxPool", "AvgPool"):
    for _name, (_x, _k, _s, _p) in POOLS.items():
        op_case(f"ops/pool/{_op.lower()}_{_name}", f"{_op} {_p} ksize {_k} stride {_s} on {_x}"
                + (" (SAME divides by non-padded cells)" if _op == "AvgPool" and _p == "SAME" else ""),
                lambda b, op=_op, x=_x, k=_k, s=_s, p=_p: call_raw(
                    op, b.feed(b.randn(*x), "x"), ksize=[1, k, k, 1], strides=[1, s, s, 1], padding=p))
op_case("ops/pool/maxpool_nchw_same_k3_s2", "MaxPool NCHW SAME",
        lambda b: raw.MaxPool(input=b.feed(b.randn(1, 3, 9, 9), "x"), ksize=[1, 1, 3, 3], strides=[1, 1, 2, 2],
                              padding="SAME", data_format="NCHW"),
        may_skip="TF CPU runs NCHW pooling only through oneDNN")
op_case("ops/pool/avgpool_nchw_same_k3_s2", "AvgPool NCHW SAME",
        lambda b: raw.AvgPool(value=b.feed(b.randn(1, 3, 9, 9), "x"), ksize=[1, 1, 3, 3], strides=[1, 1, 2, 2],
                              padding="SAME", data_format="NCHW"),
        may_skip="TF CPU runs NCHW pooling only through oneDNN")
op_case("ops/pool/maxpool_v2", "MaxPoolV2: ksize and strides as inputs",
        lambda b: raw.MaxPoolV2(input=b.feed(b.randn(1, 9, 9, 2), "x"), ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1],
                                padding="SAME"))
op_case("ops/pool/maxpool_rect_k", "MaxPool with a 2x3 window and strides 1x2, VALID",
        lambda b: raw.MaxPool(input=b.feed(b.randn(1, 7, 9, 2), "x"), ksize=[1, 2, 3, 1], strides=[1, 1, 2, 1],
                              padding="VALID"))


def _fused_bn(b, fmt, op="FusedBatchNormV3"):
    c = 4
    shape = (2, c, 5, 5) if fmt == "NCHW" else (2, 5, 5, c)
    return call_raw(op, b.feed(b.randn(*shape, scale=2.0), "x"), b.feed(b.uniform(0.5, 1.5, c), "scale"),
                    b.feed(b.randn(c), "offset"), b.feed(b.randn(c), "mean"), b.feed(b.uniform(0.2, 3, c), "variance"),
                    epsilon=0.001, is_training=False, data_format=fmt)[0]


op_case("ops/fused_batch_norm/v3_nhwc", "FusedBatchNormV3 inference NHWC, epsilon 1e-3",
        lambda b: _fused_bn(b, "NHWC"))
op_case("ops/fused_batch_norm/v3_nchw", "FusedBatchNormV3 inference NCHW", lambda b: _fused_bn(b, "NCHW"))
op_case("ops/fused_batch_norm/v1_nhwc", "FusedBatchNorm (v1) inference NHWC",
        lambda b: _fused_bn(b, "NHWC", "FusedBatchNorm"))

op_case("ops/softmax/softmax_2d", "Softmax with large logits (must be shifted)",
        lambda b: raw.Softmax(logits=b.feed(np.concatenate([b.randn(2, 7), [[1000, 999, 0, -5, 3, 1000, 1]]])
                                            .astype(np.float32), "x")))
op_case("ops/softmax/softmax_3d", "Softmax over the last axis of a 3-D tensor",
        lambda b: raw.Softmax(logits=b.feed(b.randn(2, 3, 5, scale=3), "x")))
op_case("ops/softmax/log_softmax", "LogSoftmax with large logits",
        lambda b: raw.LogSoftmax(logits=b.feed(np.concatenate([b.randn(2, 6), [[500, -500, 0, 1, 2, 3]]])
                                               .astype(np.float32), "x")))

# --- reductions --------------------------------------------------------------------------------------------

REDUCTIONS = {  # name -> (op, input maker, axes, keep_dims)
    "sum_axes_0_2": ("Sum", lambda b: b.randn(2, 3, 4), [0, 2], False),
    "sum_all_keep": ("Sum", lambda b: b.randn(2, 3, 4), [0, 1, 2], True),
    "sum_no_axes": ("Sum", lambda b: b.randn(2, 3), np.zeros([0], np.int32), False),
    "sum_int32_neg_axis": ("Sum", lambda b: b.ints(-5, 5, 3, 4), -1, False),
    "mean_neg_axis_keep": ("Mean", lambda b: b.randn(2, 3, 4), [-1], True),
    "mean_int32_truncates": ("Mean", lambda b: np.array([[1, 2], [-3, -4], [5, 8]], np.int32), 1, False),
    "max_scalar_axis": ("Max", lambda b: b.randn(2, 3, 4), -2, False),
    "min_axes_keep": ("Min", lambda b: b.randn(2, 3, 4), [0, -1], True),
    "prod_axis1": ("Prod", lambda b: b.uniform(0.5, 1.5, 3, 4), [1], False),
    "all_axis1_keep": ("All", lambda b: b.rng.random((3, 4)) > 0.3, [1], True),
    "any_axis0": ("Any", lambda b: b.rng.random((3, 4)) > 0.8, [0], False),
    "sum_empty": ("Sum", lambda b: np.zeros((0, 3), np.float32), [0], False),
    "prod_empty": ("Prod", lambda b: np.zeros((0, 3), np.float32), [0], False),
    "max_empty": ("Max", lambda b: np.zeros((0, 3), np.float32), [0], False),
    "min_empty_int32": ("Min", lambda b: np.zeros((0, 3), np.int32), [0], False),
    "mean_empty": ("Mean", lambda b: np.zeros((2, 0), np.float32), [1], True),
    "all_empty": ("All", lambda b: np.zeros((0, 2), bool), [0], False),
    "any_empty": ("Any", lambda b: np.zeros((0, 2), bool), [0], False),
    "sum_of_empty_dim_other_axis": ("Sum", lambda b: np.zeros((2, 0, 3), np.float32), [2], False),
}
for _name, (_op, _make, _axes, _keep) in REDUCTIONS.items():
    op_case(f"ops/reduce/{_name}", f"{_op} axes={np.asarray(_axes).tolist()} keep_dims={_keep}",
            lambda b, op=_op, make=_make, axes=_axes, keep=_keep: call_raw(
                op, b.feed(make(b), "x"), tf.constant(axes, tf.int32, name="axes"), keep_dims=keep))
op_case("ops/reduce/argmax_ties", "ArgMax axis 1 (int64 output); ties take the first index",
        lambda b: raw.ArgMax(input=b.feed(np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-1, -5, 0, 0]], np.float32), "x"),
                             dimension=tf.constant(1)))
op_case("ops/reduce/argmin_int32_out", "ArgMin axis -1, output_type int32",
        lambda b: raw.ArgMin(input=b.feed(b.randn(2, 3, 5), "x"), dimension=tf.constant(-1), output_type=tf.int32))
op_case("ops/reduce/argmax_axis0", "ArgMax axis 0 on int32",
        lambda b: raw.ArgMax(input=b.feed(b.ints(0, 4, 4, 3), "x"), dimension=tf.constant(0)))

# --- shape and data movement --------------------------------------------------------------------------------

op_case("ops/shape/shape_int32_int64", "Shape (int32 and int64), Size, Rank",
        lambda b: [raw.Shape(input=(x := b.feed(b.randn(2, 3, 4), "x", shape=[None, 3, None]))),
                   raw.Shape(input=x, out_type=tf.int64), raw.Size(input=x), raw.Rank(input=x)])
op_case("ops/shape/reshape_minus1", "Reshape with -1",
        lambda b: raw.Reshape(tensor=b.feed(b.randn(2, 3, 4), "x"), shape=tf.constant([-1, 6])))
op_case("ops/shape/reshape_zero_size", "Reshape where 0 is a real size (empty tensor [2,0,3] -> [5,0,2])",
        lambda b: raw.Reshape(tensor=b.feed(np.zeros((2, 0, 3), np.float32), "x"), shape=tf.constant([5, 0, 2])))
op_case("ops/shape/reshape_dynamic_shape", "Reshape with a shape computed from Shape/StridedSlice/Pack",
        lambda b: tf.reshape(x := b.feed(b.randn(2, 3, 4), "x", shape=[None, 3, 4]), [tf.shape(x)[0], -1]))
op_case("ops/shape/squeeze", "Squeeze all size-1 dims, and one given axis",
        lambda b: [raw.Squeeze(input=(x := b.feed(b.randn(1, 3, 1, 2), "x"))), raw.Squeeze(input=x, axis=[-2])])
op_case("ops/shape/expand_dims", "ExpandDims with axis 0 and -1",
        lambda b: [raw.ExpandDims(input=(x := b.feed(b.randn(2, 3), "x")), axis=tf.constant(0)),
                   raw.ExpandDims(input=x, axis=tf.constant(-1))])
op_case("ops/shape/transpose", "Transpose with perm [2,0,1]",
        lambda b: raw.Transpose(x=b.feed(b.randn(2, 3, 4), "x"), perm=tf.constant([2, 0, 1])))
op_case("ops/shape/pack_unpack", "Pack on axis 1 and Unpack on axis -1",
        lambda b: [raw.Pack(values=[b.feed(b.randn(2, 3), f"x{i}") for i in range(3)], axis=1),
                   *raw.Unpack(value=b.feed(b.randn(2, 3), "y"), num=3, axis=-1)])
op_case("ops/shape/fill", "Fill with fed dims and value",
        lambda b: raw.Fill(dims=b.feed(np.array([2, 3], np.int32), "dims"), value=b.feed(np.float32(1.5), "value")))
op_case("ops/shape/range", "Range int32, float32 and with negative delta",
        lambda b: [raw.Range(start=b.feed(np.int32(2), "start"), limit=tf.constant(11), delta=tf.constant(3)),
                   raw.Range(start=tf.constant(0.5), limit=tf.constant(2.0), delta=tf.constant(0.25)),
                   raw.Range(start=tf.constant(10), limit=tf.constant(1), delta=tf.constant(-2))])
op_case("ops/shape/broadcast_to", "BroadcastTo [3,1] -> [2,3,4]",
        lambda b: raw.BroadcastTo(input=b.feed(b.randn(3, 1), "x"), shape=tf.constant([2, 3, 4])))
for _ex in (False, True):
    for _rev in (False, True):
        op_case(f"ops/shape/cumsum_ex{int(_ex)}_rev{int(_rev)}", f"Cumsum axis 1 exclusive={_ex} reverse={_rev}",
                lambda b, ex=_ex, rev=_rev: raw.Cumsum(x=b.feed(b.randn(2, 5, 3), "x"), axis=tf.constant(1),
                                                        exclusive=ex, reverse=rev))
op_case("ops/shape/cumsum_int32_neg_axis", "Cumsum int32 axis -1",
        lambda b: raw.Cumsum(x=b.feed(b.ints(-5, 5, 3, 4), "x"), axis=tf.constant(-1)))
op_case("ops/shape/cumprod_exclusive", "Cumprod exclusive axis 0",
        lambda b: raw.Cumprod(x=b.feed(b.uniform(0.5, 2, 4, 3), "x"), axis=tf.constant(0), exclusive=True))
op_case("ops/shape/clip_by_value", "ClipByValue with scalar bounds and with elementwise bounds",
        lambda b: [raw.ClipByValue(t=(x := b.feed(b.randn(3, 4, scale=2), "x")), clip_value_min=tf.constant(-0.5),
                                   clip_value_max=tf.constant(1.0)),
                   raw.ClipByValue(t=x, clip_value_min=b.feed(b.uniform(-2, 0, 3, 4), "lo"),
                                   clip_value_max=b.feed(b.uniform(0, 2, 3, 4), "hi"))])
for _op in ("ResizeBilinear", "ResizeNearestNeighbor"):
    for _ac, _hp in ((False, False), (True, False), (False, True)):
        for _size, _dir in (([8, 9], "up"), ([3, 4], "down")):
            op_case(f"ops/resize/{_op.lower()}_{_dir}_ac{int(_ac)}_hpc{int(_hp)}",
                    f"{_op} 5x6 -> {_size[0]}x{_size[1]} align_corners={_ac} half_pixel_centers={_hp}",
                    lambda b, op=_op, ac=_ac, hp=_hp, size=_size: call_raw(
                        op, b.feed(b.randn(2, 5, 6, 3), "images"), tf.constant(size, tf.int32),
                        align_corners=ac, half_pixel_centers=hp))

op_case("ops/data/concat_v2", "ConcatV2 on the last axis (axis is the last input) and on axis 0",
        lambda b: [raw.ConcatV2(values=[(x := b.feed(b.randn(2, 3), "x")), b.feed(b.randn(2, 1), "y")],
                                axis=tf.constant(-1)),
                   raw.ConcatV2(values=[x, b.feed(b.randn(1, 3), "z"), x], axis=tf.constant(0))])
op_case("ops/data/slice", "Slice with size -1",
        lambda b: raw.Slice(input=b.feed(b.randn(3, 4, 5), "x"), begin=tf.constant([1, 0, 2]), size=tf.constant([2, -1, 2])))
op_case("ops/data/tile", "Tile [2,1,3]",
        lambda b: raw.Tile(input=b.feed(b.randn(2, 3, 2), "x"), multiples=tf.constant([2, 1, 3])))
op_case("ops/data/pad", "Pad, PadV2 with constant_values, MirrorPad REFLECT and SYMMETRIC",
        lambda b: [raw.Pad(input=(x := b.feed(b.randn(3, 4), "x")), paddings=tf.constant([[1, 2], [0, 1]])),
                   raw.PadV2(input=x, paddings=tf.constant([[0, 1], [2, 0]]), constant_values=tf.constant(-3.0)),
                   raw.MirrorPad(input=x, paddings=tf.constant([[2, 1], [3, 0]]), mode="REFLECT"),
                   raw.MirrorPad(input=x, paddings=tf.constant([[2, 3], [1, 4]]), mode="SYMMETRIC")])
op_case("ops/data/split", "Split into 3 on axis 1, SplitV with a -1 size on axis -1",
        lambda b: [*raw.Split(axis=tf.constant(1), value=(x := b.feed(b.randn(2, 6, 5), "x")), num_split=3),
                   *raw.SplitV(value=x, size_splits=tf.constant([2, -1, 1]), axis=tf.constant(-1), num_split=3)])
op_case("ops/data/gather_v2", "GatherV2 axis 0 with 2-D indices, and axis -1",
        lambda b: [raw.GatherV2(params=(x := b.feed(b.randn(5, 3), "x")), indices=b.feed(b.ints(0, 5, 2, 2), "i"),
                                axis=tf.constant(0)),
                   raw.GatherV2(params=x, indices=tf.constant([2, 0, 0]), axis=tf.constant(-1))])
op_case("ops/data/gather_v2_batch_dims", "GatherV2 batch_dims=1 on axis 1 and axis 2",
        lambda b: [raw.GatherV2(params=(x := b.feed(b.randn(2, 3, 5), "x")), indices=b.feed(b.ints(0, 3, 2, 4), "i"),
                                axis=tf.constant(1), batch_dims=1),
                   raw.GatherV2(params=x, indices=b.feed(b.ints(0, 5, 2, 2), "j"), axis=tf.constant(2), batch_dims=1)])
op_case("ops/data/gather_nd", "GatherNd of elements and of rows",
        lambda b: [raw.GatherNd(params=(x := b.feed(b.randn(3, 4, 2), "x")),
                                indices=tf.constant([[0, 1], [2, 3], [1, 0]])),
                   raw.GatherNd(params=x, indices=tf.constant([[2], [0]]))])
op_case("ops/data/one_hot", "OneHot with out-of-range indices (-1, depth) giving off rows; axis 0 with int32",
        lambda b: [raw.OneHot(indices=(i := b.feed(np.array([0, 2, -1, 3, 1], np.int32), "i")), depth=tf.constant(3),
                              on_value=tf.constant(1.0), off_value=tf.constant(0.0)),
                   raw.OneHot(indices=i, depth=tf.constant(4), on_value=tf.constant(5), off_value=tf.constant(-1),
                              axis=0)])
op_case("ops/data/top_k_v2", "TopKV2 k=3 sorted, with ties (lower index first)",
        lambda b: list(raw.TopKV2(input=b.feed(np.array([[1, 5, 5, 2, 0, 5, 3, 3], [0, 0, 0, 0, 1, 1, 1, 1],
                                                         [-1, -2, -3, -4, 4, 3, 2, 1]], np.float32), "x"),
                                  k=tf.constant(3))))
op_case("ops/data/where", "Where (one input): coordinates of true / nonzero elements, int64",
        lambda b: [call_raw("Where", b.feed(b.rng.random((3, 4)) > 0.5, "cond")),
                   call_raw("Where", b.feed(np.array([0.0, 1.5, 0.0, -2.0], np.float32), "x"))])
op_case("ops/data/zeros_ones_like_identity", "ZerosLike, OnesLike, Identity, IdentityN, StopGradient",
        lambda b: [raw.ZerosLike(x=(x := b.feed(b.randn(2, 3), "x"))), raw.OnesLike(x=x), raw.Identity(input=x),
                   *raw.IdentityN(input=[x, b.feed(np.array([1, 2], np.int32), "y")]), raw.StopGradient(input=x)])

STRIDED = {  # name -> slicing applied to a fed [4,5,6] tensor
    "basic": lambda x: x[1:3, :, 2:5],
    "ellipsis": lambda x: x[..., 1:4],
    "ellipsis_middle": lambda x: x[1, ..., 2],
    "new_axis": lambda x: x[:, tf.newaxis, 1:3, tf.newaxis],
    "shrink": lambda x: x[2],
    "shrink_negative": lambda x: x[-1, :, -2],
    "negative_strides": lambda x: x[::-1, 4:0:-2, ::-3],
    "negative_begin_end": lambda x: x[-3:-1, -4:, :-2],
    "out_of_range_clamped": lambda x: x[1:100, -100:3, 5:10],
    "empty_result": lambda x: x[3:1, :, :],
    "ellipsis_new_axis_shrink": lambda x: x[tf.newaxis, ..., 0, tf.newaxis],
}
for _name, _slice in STRIDED.items():
    op_case(f"ops/strided_slice/{_name}", f"StridedSlice: {_name.replace('_', ' ')}",
            lambda b, sl=_slice: sl(b.feed(np.arange(120, dtype=np.float32).reshape(4, 5, 6), "x")))
op_case("ops/strided_slice/masks_raw", "StridedSlice with explicit begin/end masks and a negative stride",
        lambda b: raw.StridedSlice(input=b.feed(np.arange(24, dtype=np.int32).reshape(4, 6), "x"),
                                   begin=tf.constant([3, 1]), end=tf.constant([0, 5]), strides=tf.constant([-1, 2]),
                                   begin_mask=1, end_mask=3))

# --- dtypes --------------------------------------------------------------------------------------------------

_DTYPE_ADD = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float64",
              "complex64", "complex128"]


def _dtype_values(b, name, shape):
    dt = np.dtype(name)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return b.rng.integers(max(info.min // 2, -50), min(info.max // 2, 50), shape).astype(dt)
    if dt.kind == "c":
        return (b.randn(*shape) + 1j * b.randn(*shape)).astype(dt)
    return b.randn(*shape).astype(dt)


for _dt in _DTYPE_ADD:
    op_case(f"ops/dtypes/add_{_dt}", f"AddV2 and Mul on {_dt} with broadcasting",
            lambda b, dt=_dt: [raw.AddV2(x=(x := b.feed(_dtype_values(b, dt, (3, 4)), "x")),
                                         y=(y := b.feed(_dtype_values(b, dt, (4,)), "y"))),
                               raw.Mul(x=x, y=y)],
            may_skip="TF CPU registers few kernels for uint32/uint64" if _dt.startswith("uint") else None)
for _dt in ("int8", "int16", "int64", "uint8", "float16", "float64"):
    op_case(f"ops/dtypes/reduce_{_dt}", f"Sum and Max on {_dt}",
            lambda b, dt=_dt: [raw.Sum(input=(x := b.feed(_dtype_values(b, dt, (3, 4)), "x")), axis=tf.constant(1)),
                               raw.Max(input=x, axis=tf.constant(0))])
op_case("ops/dtypes/relu_float16_float64", "Relu, Sigmoid, Tanh on float16 and float64",
        lambda b: [f(x) for dt in ("float16", "float64") for x in [b.feed(b.randn(3, 4).astype(dt), f"x_{dt}")]
                   for f in (tf.nn.relu, tf.sigmoid, tf.tanh)])
op_case("ops/dtypes/matmul_float64_float16", "MatMul on float64 and float16",
        lambda b: [raw.MatMul(a=b.feed(b.randn(3, 4).astype(np.float64), "a64"), b=b.feed(b.randn(4, 2).astype(np.float64), "b64")),
                   raw.MatMul(a=b.feed(b.randn(3, 4).astype(np.float16), "a16"), b=b.feed(b.randn(4, 2).astype(np.float16), "b16"))])
op_case("ops/dtypes/complex_ops", "complex64: Mul, RealDiv, Abs (ComplexAbs), Real, Imag, Conj, Complex",
        lambda b: [raw.Mul(x=(x := b.feed(_dtype_values(b, "complex64", (2, 3)), "x")),
                           y=(y := b.feed(_dtype_values(b, "complex64", (2, 3)), "y"))),
                   raw.RealDiv(x=x, y=y), raw.ComplexAbs(x=x), raw.Real(input=x), raw.Imag(input=x), raw.Conj(input=x),
                   raw.Complex(real=raw.Real(input=y), imag=raw.Imag(input=x))])
CASTS = {  # name -> (source values, destination dtype)
    "float32_to_int32": (np.array([-2.7, -0.5, 0.0, 0.5, 1.9, 100.99], np.float32), tf.int32),
    "float32_to_int64": (np.array([-2.7, 3.5, 1e10], np.float32), tf.int64),
    "float32_to_float16": (np.array([1.0, 1e-5, 65504.0, 1e5, -3.14159], np.float32), tf.float16),
    "float32_to_bfloat16": (np.array([1.0, 1.00390625, 1.01171875, 3.14159, -1e30], np.float32), tf.bfloat16),
    "float32_to_bool": (np.array([0.0, -0.0, 0.5, np.nan, -3.0], np.float32), tf.bool),
    "bool_to_float32": (np.array([True, False, True]), tf.float32),
    "int32_to_float16": (np.array([-7, 0, 2049, 70000], np.int32), tf.float16),
    "int64_to_int32": (np.array([-5, 0, 2**31 - 1, 2**33 + 7], np.int64), tf.int32),
    "int32_to_uint8": (np.array([-1, 0, 255, 256, 300], np.int32), tf.uint8),
    "int32_to_bool": (np.array([0, 1, -3, 0], np.int32), tf.bool),
    "float64_to_float32": (np.array([1e-50, 1.0 / 3.0, 1e300], np.float64), tf.float32),
    "int32_to_complex64": (np.array([-1, 0, 3], np.int32), tf.complex64),
    "uint8_to_float32": (np.array([0, 128, 255], np.uint8), tf.float32),
    "float16_to_float32": (np.array([0.1, -2.5, 65504.0], np.float16), tf.float32),
}
for _name, (_values, _dst) in CASTS.items():
    op_case(f"ops/cast/{_name}", f"Cast {_name.replace('_to_', ' -> ')}",
            lambda b, v=_values, dst=_dst: raw.Cast(x=b.feed(v, "x"), DstT=dst), rtol=0.0, atol=0.0)

# --- Const tensors of every dtype, written by hand ------------------------------------------------------------

CONST_DTYPES = {  # name -> (DataType, typed field, short value list, numpy dtype for tensor_content or None)
    "float": (types_pb2.DT_FLOAT, "float_val", [1.0, 2.5], np.float32),
    "double": (types_pb2.DT_DOUBLE, "double_val", [1.0 / 3.0, -2.0], np.float64),
    "half": (types_pb2.DT_HALF, "half_val", [0x3C00, 0xC100], np.float16),      # 1.0, -2.5 as bit patterns
    "bfloat16": (types_pb2.DT_BFLOAT16, "half_val", [0x3F80, 0x4049], tf.bfloat16.as_numpy_dtype),  # 1.0, 3.140625
    "int8": (types_pb2.DT_INT8, "int_val", [-128, 7], np.int8),
    "int16": (types_pb2.DT_INT16, "int_val", [-300, 12], np.int16),
    "int32": (types_pb2.DT_INT32, "int_val", [-5, 2**31 - 1], np.int32),
    "int64": (types_pb2.DT_INT64, "int64_val", [-(2**40), 3], np.int64),
    "uint8": (types_pb2.DT_UINT8, "int_val", [255, 1], np.uint8),
    "uint16": (types_pb2.DT_UINT16, "int_val", [65535, 2], np.uint16),
    "uint32": (types_pb2.DT_UINT32, "uint32_val", [2**32 - 1, 5], np.uint32),
    "uint64": (types_pb2.DT_UINT64, "uint64_val", [2**64 - 1, 6], np.uint64),
    "bool": (types_pb2.DT_BOOL, "bool_val", [False, True], np.bool_),
    "complex64": (types_pb2.DT_COMPLEX64, "scomplex_val", [1.0, -1.0, 0.5, 2.0], np.complex64),  # (re, im) pairs
    "complex128": (types_pb2.DT_COMPLEX128, "dcomplex_val", [0.25, 1.0, -3.0, 0.0], np.complex128),
    "string": (types_pb2.DT_STRING, "string_val", [b"hello", b"tensor\x00gate"], None),
}


def _const_node(name, dtype, shape, field_name=None, values=(), content=None):
    node = node_def_pb2.NodeDef(name=name, op="Const")
    node.attr["dtype"].type = dtype
    tensor = node.attr["value"].tensor
    tensor.dtype = dtype
    for size in shape:
        tensor.tensor_shape.dim.add(size=size)
    if field_name:
        getattr(tensor, field_name).extend(values)
    if content is not None:
        tensor.tensor_content = content
    return node


def _identity_node(name, source, dtype):
    node = node_def_pb2.NodeDef(name=name, op="Identity", input=[source])
    node.attr["T"].type = dtype
    return node


def _const_fixture(path, dtype_name_, as_text):
    dtype, field_name, values, np_dtype = CONST_DTYPES[dtype_name_]
    graph_def = tf.Graph().as_graph_def()  # for the versions TensorFlow stamps on its graphs
    nodes = [
        _const_node("repeat", dtype, [2, 3], field_name, values),          # last value fills the rest
        _const_node("zeros", dtype, [4], field_name, []),                    # no values: zeros
        _const_node("scalar", dtype, [], field_name, values[: 2 if "complex" in field_name else 1]),
        _const_node("empty", dtype, [0, 2], field_name, []),
    ]
    if np_dtype is not None:
        rng = np.random.default_rng(zlib.crc32(path.encode()))
        content = (rng.standard_normal(6) * 50).astype(np_dtype) if np.dtype(np_dtype).kind != "b" \
            else rng.random(6) > 0.5
        if np.dtype(np_dtype).kind == "c":
            content = (content + 1j * rng.standard_normal(6)).astype(np_dtype)
        # NOTE: tensor_content is little-endian, like the hosts this tool runs on.
        nodes.append(_const_node("content", dtype, [3, 2], content=content.tobytes()))
    fetches = []
    for node in list(nodes):
        nodes.append(_identity_node(f"{node.name}_identity", node.name, dtype))
        fetches.append(f"{node.name}_identity:0")
    graph_def.node.extend(nodes)
    return Fixture(graph_def, [], fetches,
                   f"hand-written Const nodes of dtype {dtype_name_} ({field_name} with a short list whose last "
                   "value repeats, no values = zeros, a scalar, an empty tensor"
                   + (", tensor_content" if np_dtype is not None else "") + ") read through Identity",
                   rtol=0.0, atol=0.0, as_text=as_text)


for _dt in CONST_DTYPES:
    CASES[f"ops/const/{_dt}"] = Spec(f"ops/const/{_dt}",
                                     lambda dt=_dt: _const_fixture(f"ops/const/{dt}", dt, dt in ("half", "string")))


# === control flow ============================================================================================
# Loops and conditionals. Each TF2 case is frozen twice from the same weights and feeds: lowered to
# TensorFlow's v1 dataflow primitives (Switch/Merge/Enter/Exit/NextIteration/LoopCond), as
# convert_variables_to_constants_v2 does by default, and functional (`<name>_functional`: If/While or
# their Stateless forms calling functions in the GraphDef's library). The lowered graphs keep the
# `unused_control_flow_input_N` placeholders TensorFlow leaves behind; nothing feeds them, so pruning
# must drop them.


def control_flow_case(name, description, *, rtol=1e-5, atol=1e-5):
    """Register `fn(rng) -> (keras.Model | tf.function, [(TensorSpec, feed array)])` as control_flow/<name>
    (lowered) and control_flow/<name>_functional."""

    def register(fn):
        def make(lower: bool) -> Fixture:
            seed = zlib.crc32(name.encode()) % (2**31)  # one seed for both forms: same weights, same feeds
            keras.utils.set_random_seed(seed)
            model, inputs = fn(np.random.default_rng(seed))
            specs = [spec for spec, _ in inputs]
            if isinstance(model, keras.Model):
                graph_def, feed_names, fetch_names = freeze_keras(model, specs, lower)
            else:
                graph_def, feed_names, fetch_names = freeze_function(model, specs, lower)
            feeds = [(feed, value) for feed, (_, value) in zip(feed_names, inputs)]
            how = "lowered to v1 control flow" if lower else "functional control flow (lower_control_flow=False)"
            return Fixture(graph_def, feeds, fetch_names, f"{description}; {how}", rtol, atol)

        for path, lower in ((f"control_flow/{name}", True), (f"control_flow/{name}_functional", False)):
            CASES[path] = Spec(path, lambda lower=lower: make(lower))
        return fn

    return register


def _sequence(rng, batch, steps, features, dynamic_steps=False):
    spec = tf.TensorSpec([None, None if dynamic_steps else steps, features], tf.float32, name="x")
    return spec, rng.standard_normal((batch, steps, features)).astype(np.float32)


@control_flow_case("keras_lstm", "Keras 3 LSTM(5) over [2, 6, 3] sequences, Dense(2) head; the time loop "
                   "reads a TensorList of steps and writes one", rtol=1e-4)
def _keras_lstm(rng):
    inp = keras.Input((6, 3), name="x")
    out = keras.layers.Dense(2)(keras.layers.LSTM(5)(inp))
    return keras.Model(inp, out), [_sequence(rng, 2, 6, 3)]


@control_flow_case("keras_lstm_stacked", "two stacked Keras 3 LSTMs (return_sequences=True, then the last "
                   "state) over sequences of unknown length (7 steps fed), Dense(3) head", rtol=1e-4)
def _keras_lstm_stacked(rng):
    inp = keras.Input((None, 3), name="x")
    h = keras.layers.LSTM(4, return_sequences=True)(inp)
    out = keras.layers.Dense(3)(keras.layers.LSTM(5)(h))
    return keras.Model(inp, out), [_sequence(rng, 2, 7, 3, dynamic_steps=True)]


@control_flow_case("keras_gru", "Keras 3 GRU(5) (reset_after) over [2, 6, 3] sequences, Dense(2) head",
                   rtol=1e-4)
def _keras_gru(rng):
    inp = keras.Input((6, 3), name="x")
    out = keras.layers.Dense(2)(keras.layers.GRU(5)(inp))
    return keras.Model(inp, out), [_sequence(rng, 2, 6, 3)]


def _nested_loops(x, n):
    """for i < n: (for j <= i: a = 0.9 a + j x), then a cond on i's parity; a while inside a while."""

    def outer_body(i, acc):
        def inner_body(j, a):
            return j + 1, a * 0.9 + tf.cast(j, tf.float32) * x

        _, acc = tf.while_loop(lambda j, a: j <= i, inner_body, [0, acc])
        # NOTE: on parity, so that iterations alternate branches (each iteration has its own dead branch)
        acc = tf.cond(tf.equal(i % 2, 0), lambda: acc - 0.5, lambda: acc * 0.5 + 0.25)
        return i + 1, acc

    return tf.while_loop(lambda i, acc: i < n, outer_body, [0, x])[1]


def _doubling(x, limit):
    """Doubles x until sum(|x|) reaches limit: the trip count depends on the values fed."""
    steps, y = tf.while_loop(lambda k, y: tf.reduce_sum(tf.abs(y)) < limit, lambda k, y: (k + 1, y * 2.0),
                             [0, x])
    return y, steps


@tf.function
def _cond_nested_while(x, n, mode):
    # NOTE: both conds test mode > 0 with the loops on opposite sides, so every feed takes one loop
    # branch and leaves one loop untaken (a dead frame in the lowered graph).
    nested = tf.cond(mode > 0, lambda: _nested_loops(x, n), lambda: x * 2.0 - 1.0)
    doubled = tf.cond(mode > 0, lambda: x + 1.0, lambda: _doubling(x, 40.0)[0])
    return nested, doubled


for _name, _mode, _taken in (("cond_nested_while", 3, "the first cond's nested-loop branch"),
                             ("cond_nested_while_else", -2, "the second cond's loop branch")):
    def _cond_case(rng, mode=_mode):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        return _cond_nested_while, [(tf.TensorSpec([2, 3], tf.float32, name="x"), x),
                                    (tf.TensorSpec([], tf.int32, name="n"), np.int32(4)),
                                    (tf.TensorSpec([], tf.int32, name="mode"), np.int32(mode))]

    control_flow_case(_name, f"tf.function: two tf.conds on a fed mode ({_mode}, taking {_taken}); one branch "
                      "holds a while loop with a nested while loop and a cond on the iteration's parity in its "
                      "body, the other cond's false branch a while loop")(_cond_case)


@tf.function
def _dynamic_trip_count(x, n, limit):
    def body(i, acc, steps):
        acc = acc * 0.5 + x
        return i + 1, acc, steps.write(i, tf.reduce_sum(acc, axis=0))

    steps = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    _, acc, steps = tf.while_loop(lambda i, acc, steps: i < n, body, [0, x, steps])
    doubled, doublings = _doubling(x, limit)
    return acc, steps.stack(), doubled, doublings


for _name, _n, _limit in (("dynamic_trip_count", 5, 60.0), ("dynamic_trip_count_zero", 0, 0.5)):
    def _trip_case(rng, n=_n, limit=_limit):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        return _dynamic_trip_count, [(tf.TensorSpec([None, 3], tf.float32, name="x"), x),
                                     (tf.TensorSpec([], tf.int32, name="n"), np.int32(n)),
                                     (tf.TensorSpec([], tf.float32, name="limit"), np.float32(limit))]

    control_flow_case(_name, f"tf.function: while i < n (n = {_n} fed) writing a dynamic-size TensorArray "
                      f"that is stacked, and while sum(|y|) < limit ({_limit} fed) doubling y"
                      + ("; both loops run zero times" if _n == 0 else ""))(_trip_case)


@tf1_case("control_flow/tf1_control_flow", "TF1 graph built with v1 control flow (control flow v2 disabled): "
          "tf.compat.v1.cond on a fed bool, a while loop holding a nested while loop and a cond on the "
          "iteration's parity, and an RNN-style loop that reads one TensorArray (unstacked from the input) "
          "and writes another (TensorArrayV3 ops)")
def _tf1_control_flow(b):
    tf1.disable_control_flow_v2()
    try:
        x = b.feed(b.randn(2, 3), "x", shape=[None, 3])
        seq = b.feed(b.randn(4, 2, 3), "seq", shape=[None, None, 3])
        n = b.feed(np.int32(3), "n")
        flag = b.feed(np.bool_(False), "flag")

        def outer_body(i, acc):
            inner = tf1.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + tf.cast(j, tf.float32) * x),
                                   [0, tf.zeros_like(x)], name="inner")[1]
            acc = tf1.cond(tf.equal(i % 2, 0), lambda: acc + inner, lambda: acc - 0.5 * inner,
                           name="parity")  # iterations alternate branches
            return i + 1, acc

        nested = tf1.while_loop(lambda i, acc: i < n, outer_body, [0, x], name="outer")[1]
        branch = tf1.cond(flag, lambda: tf.reduce_max(x, 1), lambda: tf.reduce_min(x, 1) * 2.0, name="pick")

        steps = tf.shape(seq)[0]
        inputs = tf1.TensorArray(tf.float32, size=steps, name="inputs").unstack(seq)
        outputs = tf1.TensorArray(tf.float32, size=steps, name="outputs")
        w = tf.constant(b.randn(3, 3, scale=0.5))

        def rnn_body(t, h, outputs):
            h = tf.tanh(inputs.read(t) + tf.matmul(h, w))
            return t + 1, h, outputs.write(t, h)

        _, last, outputs = tf1.while_loop(lambda t, h, o: t < steps, rnn_body,
                                          [0, tf.zeros_like(seq[0]), outputs], name="rnn")
        return nested, branch, outputs.stack(), last
    finally:
        tf1.enable_control_flow_v2()


# === builder: graphs built with tensorgate's engine.builder ====================================================
# engine.builder builds GraphDefs in Python without TensorFlow. Here TensorFlow imports what it wrote and runs
# it, so the fixtures pin the engine to TensorFlow on builder graphs, and importing checks that the builder's
# attrs are what TensorFlow's op definitions require. The builder's static shapes are checked against the
# shapes TensorFlow infers on import. The engine is imported from the repository: this venv has what it
# needs (numpy, protobuf, ml_dtypes), and tensorgate's protos live in their own package.


def engine_builder():
    """tensorgate's engine.builder module, imported from the repository."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from engine import builder

    return builder


class BuilderFeeds(Builder):
    """Builder whose placeholders are engine.builder's: `b.feed(value, name)` inside a GraphBuilder."""

    def feed(self, value, name: str, shape=None):
        value = np.asarray(value)
        t = engine_builder().placeholder(value.dtype, value.shape if shape is None else shape, name=name)
        self.feeds.append((t.name, value))
        return t


def check_builder_shapes(graph) -> None:
    """Each op output's dtype and static shape, as the builder worked them out, must agree with what
    TensorFlow infers when it imports the GraphDef."""
    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf1.import_graph_def(tf1.GraphDef.FromString(graph.as_graph_def().SerializeToString()), name="")
    for op in graph.get_operations():
        for t in op.outputs:
            theirs = tf_graph.get_tensor_by_name(t.name)
            if theirs.dtype.as_numpy_dtype != t.dtype and not (t.dtype == object and theirs.dtype == tf.string):
                raise AssertionError(f"{t.name}: builder says {t.dtype}, TensorFlow {theirs.dtype.name}")
            ours = tf.TensorShape(None if t.shape is None else list(t.shape))
            if not ours.is_compatible_with(theirs.shape):
                raise AssertionError(f"{t.name}: builder says shape {ours}, TensorFlow infers {theirs.shape}")


def builder_case(path, description, *, rtol=1e-5, atol=1e-5):
    """Register `fn(gb, b) -> tensor | [tensors]` as builder/<path>: `gb` is engine.builder, `b` a
    BuilderFeeds; it builds in a fresh default GraphBuilder and the tensors it returns are fetched."""

    def register(fn):
        def make() -> Fixture:
            gb = engine_builder()
            b = BuilderFeeds(f"builder/{path}")
            with gb.GraphBuilder().as_default():
                outs = fn(gb, b)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            graph = outs[0].graph  # the example models build graphs of their own
            check_builder_shapes(graph)
            graph_def = tf1.GraphDef.FromString(graph.as_graph_def().SerializeToString(deterministic=True))
            return Fixture(graph_def, b.feeds, [t.name for t in outs], description, rtol, atol)

        CASES[f"builder/{path}"] = Spec(f"builder/{path}", make)
        return fn

    return register


@builder_case("mlp", "engine.builder MLP: layers.dense with relu and tanh in name scopes, softmax, argmax")
def _builder_mlp(gb, b):
    x = b.feed(b.randn(5, 6), "x", shape=[None, 6])
    with gb.name_scope("encoder"):
        h = gb.layers.dense(x, b.randn(6, 16, scale=0.5), b.randn(16, scale=0.1), activation="relu")
        h = gb.layers.dense(h, b.randn(16, 8, scale=0.5), b.randn(8, scale=0.1), activation="tanh")
    logits = gb.layers.dense(h, b.randn(8, 3), b.randn(3, scale=0.1), name="logits")
    return gb.softmax(logits, name="probabilities"), gb.argmax(logits, 1, name="class_id")


@builder_case("cnn", "engine.builder CNN: conv2d SAME stride 2, explicit padding, dilation, depthwise, "
              "max/avg pool SAME on odd sizes, relu6, flatten, log_softmax", rtol=1e-4)
def _builder_cnn(gb, b):
    images = b.feed(b.randn(2, 11, 11, 3), "images", shape=[None, 11, 11, 3])
    h = gb.layers.conv2d(images, b.randn(3, 3, 3, 8, scale=0.4), b.randn(8, scale=0.1), strides=2,
                         padding="SAME", activation="relu6")                                       # 11 -> 6
    h = gb.depthwise_conv2d(h, b.randn(3, 3, 8, 2, scale=0.4), padding="SAME")                   # 6x6x16
    h = gb.conv2d(h, b.randn(2, 2, 16, 8, scale=0.3), padding=[[1, 0], [0, 1]], name="explicit")  # 6
    h = gb.conv2d(h, b.randn(3, 3, 8, 8, scale=0.3), padding="SAME", dilations=2, name="dilated")
    a = gb.max_pool(h, 3, 2, "SAME")                                                              # 3
    c = gb.avg_pool(gb.relu(h), 3, 2, "SAME")                                                     # 3, edges padded
    h = gb.concat([a, c], axis=3)
    features = gb.layers.flatten(h)                                                               # 3*3*16
    logits = gb.layers.dense(features, b.randn(144, 5, scale=0.1), b.randn(5, scale=0.1))
    return gb.log_softmax(logits, name="log_probs"), gb.reduce_mean(h, [1, 2], name="pooled")


@builder_case("tensor_ops", "engine.builder shape and math ops: slicing, gather, transpose, stack, pad, fill, "
              "reductions, batch matmul, unary math, broadcasting operators")
def _builder_tensor_ops(gb, b):
    x = b.feed(b.randn(4, 3, 5), "x", shape=[None, 3, 5])
    idx = b.feed(np.array([2, 0, 1, 1], np.int32), "idx")
    outs = [x[1], x[:, 1:, ::2], x[::-1, -1], x[..., None, 0], x[:2, ..., 1:4]]
    outs += [gb.gather(x, idx, axis=1), gb.gather(x, [[0, 2], [1, 1], [2, 0], [0, 0]], axis=2, batch_dims=1)]
    t = gb.transpose(x, [0, 2, 1])
    outs += [t, gb.matmul(x, t), gb.matmul(x, b.randn(5, 2)), gb.stack([x[:, 0], x[:, 1]], axis=-1)]
    outs += [gb.squeeze(gb.expand_dims(x, 1), [1]), gb.reshape(x, [-1, 15]), gb.pad(x, [[0, 0], [1, 2], [0, 1]])]
    outs += [gb.fill([2, 3], 0.25) + gb.ones([3]) - gb.zeros([2, 1]), gb.constant(1.5, shape=[2, 2]) * 2]
    outs += [gb.reduce_sum(x, [1, 2]), gb.reduce_max(x, -1, keepdims=True), gb.reduce_min(x), gb.argmin(x, 2),
             gb.reduce_mean(x, 0)]
    y = x * 0.5 + 1
    outs += [gb.exp(y), gb.log(gb.square(y) + 1), gb.sqrt(abs(y)), gb.rsqrt(y * y + 1), y ** 2, -y,
             gb.sigmoid(y), gb.tanh(y), gb.elu(y - 1), gb.leaky_relu(y - 1, 0.3), gb.maximum(x, y), gb.minimum(x, 0.0),
             1.0 / (y * y + 1), gb.bias_add(x, b.randn(5))]
    return outs


@builder_case("int_arithmetic", "engine.builder integer ops: //, %, / (int32 divides as float64), casts")
def _builder_int_arithmetic(gb, b):
    k = b.feed(np.array([-7, 7, -7, 7, 0, -1, 6, -6, 5], np.int32), "k")
    d = b.feed(np.array([2, 2, -2, -2, 3, 3, -3, 4, 7], np.int32), "d")
    f = b.feed(np.array([-2.7, -0.5, 0.5, 2.7, 9.9, -9.9, 1e3, -1e3, 0.0], np.float32), "f")
    return [k // d, k % d, k / d, k * 3 - d, -k, abs(k), gb.cast(f, "int32"), gb.cast(k, "float32") + f,
            gb.cast(gb.relu(f), "int64"), gb.argmax(gb.stack([k, d]), 0, output_type="int32")]


@builder_case("control", "engine.builder control: placeholder_with_default, control_dependencies, identity, group")
def _builder_control(gb, b):
    x = b.feed(b.randn(3), "x")
    scale = gb.placeholder_with_default(np.float32(2.0), [], name="scale")
    first = gb.no_op(name="first")
    with gb.control_dependencies([first]):
        y = gb.identity(x * scale, name="scaled")
        with gb.control_dependencies([y]):
            z = gb.identity(y + 1, name="shifted")
    gb.group(y, z, name="all")
    return y, z


def _example_models():
    """tools/make_example_models.py, imported (it needs only numpy and the engine)."""
    import importlib.util

    engine_builder()
    spec = importlib.util.spec_from_file_location("make_example_models", ROOT / "tools" / "make_example_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@builder_case("half_plus_two", "models/half_plus_two as tools/make_example_models.py builds it")
def _builder_half_plus_two(gb, b):
    graph = _example_models().half_plus_two()
    b.feeds.append(("x:0", np.array([1.0, 2.0, 5.0, -3.5], np.float32)))
    return graph.get_tensor_by_name("y:0")


@builder_case("iris_classifier", "models/iris_classifier version 1 as tools/make_example_models.py builds it")
def _builder_iris_classifier(gb, b):
    tool = _example_models()
    features, labels = tool.iris_data()
    graph = tool.iris_classifier(tool.fit_mlp(features, labels, seed=1))
    b.feeds.append(("features:0", features[::10].astype(np.float32)))
    return [graph.get_tensor_by_name("probabilities:0"), graph.get_tensor_by_name("class_id:0")]



# === SavedModels and tensor bundles ==============================================================================
# A SavedModel case is a directory `saved_models/<case>/` holding the SavedModel as `model/`, `signatures.json`
# (for each signature: its inputs and outputs by alias, with the TensorInfo TensorFlow wrote) and `data.npz` (feeds
# and TensorFlow's outputs). A bundle case `bundles/<case>/` holds a tensor bundle (`ckpt.index`,
# `ckpt.data-*`) written by TensorFlow, `expected.json` and `expected.npz` (every tensor, by key). Neither holds a
# case.json: they are not GraphDef cases. Expected outputs come from TensorFlow's TF1 SavedModel loader in a
# Session with Grappler off: the way TensorFlow Serving loads and runs a SavedModel (restore op, then init op).

SAVED_MODELS = FIXTURES / "saved_models"
BUNDLES = FIXTURES / "bundles"


@dataclass
class SavedModelCase:
    path: str
    description: str
    # Writes the SavedModel into the given directory; returns the feeds: signature -> alias -> array.
    build: Callable[[Path, np.random.Generator], dict[str, dict[str, np.ndarray]]]
    rtol: float = 1e-5
    atol: float = 1e-5
    # For a model tensorgate must refuse: what its SavedModelError must say.
    unsupported: str | None = None


SAVED_MODEL_CASES: dict[str, SavedModelCase] = {}


def saved_model_case(name, description, *, rtol=1e-5, atol=1e-5, unsupported=None):
    # NOTE: models tensorgate must refuse live one level down, in saved_models/unsupported/, so that
    # whoever serves every saved_models/*/ case does not pick them up.
    def register(fn):
        path = f"saved_models/unsupported/{name}" if unsupported else f"saved_models/{name}"
        SAVED_MODEL_CASES[path] = SavedModelCase(path, description, fn, rtol, atol, unsupported)
        return fn

    return register


def run_saved_model(model_dir: Path, feeds: dict[str, dict[str, np.ndarray]]):
    """TensorFlow's outputs for each signature (signature -> alias -> array), and the SignatureDefs."""
    graph = tf.Graph()
    results = {}
    with tf1.Session(graph=graph, config=session_config()) as sess:
        meta_graph = tf1.saved_model.loader.load(sess, ["serve"], str(model_dir))
        for name, signature_feeds in feeds.items():
            sig = meta_graph.signature_def[name]
            aliases = sorted(sig.outputs)
            values = sess.run([sig.outputs[a].name for a in aliases],
                              {sig.inputs[a].name: v for a, v in signature_feeds.items()})
            results[name] = {a: (np.array(v, dtype=object) if sig.outputs[a].dtype == types_pb2.DT_STRING else
                                 np.asarray(v)) for a, v in zip(aliases, values)}
    return results, meta_graph


def tensor_info_entry(alias: str, info, key: str, value: np.ndarray, assets: dict[str, str]) -> dict:
    shape = None if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim]
    entry = {"alias": alias, "key": key, "tensor": info.name, "tf_dtype": tf.as_dtype(info.dtype).name,
             "shape": shape}
    if dtype_name(value) in STORED_AS:
        entry["dtype"] = dtype_name(value)
    if value.dtype == object and value.ndim == 0 and value.item() in assets:
        # An asset's path: TensorFlow's output is where the model was when this tool ran.
        entry["asset"] = assets[value.item()]
    return entry


def write_saved_model_case(case: SavedModelCase) -> str:
    out_dir = FIXTURES / case.path
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    seed = zlib.crc32(case.path.encode()) % (2**31)
    keras.utils.set_random_seed(seed)
    tf1.reset_default_graph()
    feeds = case.build(out_dir / "model", np.random.default_rng(seed))
    outputs, meta_graph = run_saved_model(out_dir / "model", feeds)
    assets_dir = out_dir / "model" / "assets"
    assets = {str(f).encode(): f.name for f in assets_dir.iterdir()} if assets_dir.is_dir() else {}
    arrays, signatures = {}, []
    for s, (name, signature_feeds) in enumerate(feeds.items()):
        sig = meta_graph.signature_def[name]
        inputs, fetched = [], []
        for i, (alias, value) in enumerate(signature_feeds.items()):
            inputs.append(tensor_info_entry(alias, sig.inputs[alias], f"s{s}_in{i}", value, {}))
            arrays[f"s{s}_in{i}"] = to_storage(value)
        for i, (alias, value) in enumerate(outputs[name].items()):
            fetched.append(tensor_info_entry(alias, sig.outputs[alias], f"s{s}_out{i}", value, assets))
            arrays[f"s{s}_out{i}"] = to_storage(value)
        signatures.append({"name": name, "method_name": sig.method_name, "inputs": inputs, "outputs": fetched})
    spec = {"description": case.description, "tags": list(meta_graph.meta_info_def.tags),
            "signature_names": sorted(k for k in meta_graph.signature_def if k != "__saved_model_init_op"),
            "signatures": signatures, "rtol": case.rtol, "atol": case.atol}
    if case.unsupported:
        spec["unsupported"] = case.unsupported
    (out_dir / "signatures.json").write_text(json.dumps(spec, indent=2) + "\n")
    np.savez_compressed(out_dir / "data.npz", **arrays)
    size = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    if case.unsupported:
        return f"{len(signatures)} signature(s), {size / 1e3:.0f} kB; {check_refused(out_dir, case.unsupported)}"
    frozen = check_frozen_saved_model(out_dir, spec, arrays)
    return f"{len(signatures)} signature(s), {size / 1e3:.0f} kB; tensorgate's frozen graph {frozen}"


_FREEZE = ("import engine,sys; from engine.saved_model import load_saved_model; "
           "engine.save_graph(load_saved_model(sys.argv[1]).graph, sys.argv[2])")


def check_refused(out_dir: Path, marker: str) -> str:
    """tensorgate must refuse the model with a SavedModelError that says `marker`."""
    if not engine_writer_available():
        return "refusal not checked (engine not importable)"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([str(ENGINE_PYTHON), "-c", _FREEZE, str(out_dir / "model"), str(Path(tmp, "x.pb"))],
                              cwd=ROOT, capture_output=True, text=True)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode == 0 or "SavedModelError" not in last or marker not in last:
        raise RuntimeError(f"tensorgate should refuse it naming {marker}; it said: {last[:300] or 'nothing'}")
    return f"tensorgate refuses it: {last.partition(': ')[2][:120]}"


def check_frozen_saved_model(out_dir: Path, spec: dict, arrays: dict[str, np.ndarray]) -> str:
    """Freeze the SavedModel with tensorgate (variables to Consts, calls inlined), then run that GraphDef in
    TensorFlow: every signature must give exactly TensorFlow's outputs from the SavedModel."""
    if not engine_writer_available():
        return "not checked (engine not importable)"
    with tempfile.TemporaryDirectory() as tmp:
        frozen = Path(tmp, "frozen.pb")
        proc = subprocess.run([str(ENGINE_PYTHON), "-c", _FREEZE, str(out_dir / "model"), str(frozen)], cwd=ROOT,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError("tensorgate cannot load it: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:300])
        graph_def = read_graph_def(frozen)
    for sig in spec["signatures"]:
        feeds = [(e["tensor"], arrays[e["key"]]) for e in sig["inputs"]]
        feeds = [(name, v.astype(object) if v.dtype.kind == "S" else v) for name, v in feeds]
        got = run_graph_def(graph_def, feeds, [e["tensor"] for e in sig["outputs"]])
        for entry, value in zip(sig["outputs"], got):
            want = arrays[entry["key"]]
            if entry.get("dtype") == "string":
                want = want.astype(object)
            if not same_values(value, want):
                raise RuntimeError(f"TensorFlow running tensorgate's frozen graph: {sig['name']}/{entry['alias']} differs")
    return "runs in TensorFlow with identical outputs"


def vocab_file() -> str:
    """A small asset for SavedModels to copy into their assets/."""
    path = Path(tempfile.gettempdir()) / "tensorgate_fixtures" / "vocab.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text("alpha\nbeta\ngamma\n")
    return str(path)


class _Scorer(tf.Module):
    """A tf.Module with variables of several dtypes and two signatures, one returning a dict."""

    def __init__(self, rng):
        super().__init__()
        self.w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32), name="w")
        self.b = tf.Variable(rng.standard_normal(3).astype(np.float32), name="b")
        self.scale = tf.Variable(np.float64(0.5), name="scale")
        self.offset = tf.Variable(np.array([1.5, -2.25, 0.125], np.float16), name="offset")
        self.mask = tf.Variable(np.array([True, False, True]), name="mask")
        self.count = tf.Variable(np.int64(7), name="count")
        self.label = tf.Variable(b"scores-v1", name="label")
        self.vocab = tf.saved_model.Asset(vocab_file())

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def predict(self, x):
        logits = tf.matmul(x, self.w) + self.b
        logits = logits * tf.cast(self.scale, tf.float32) + tf.cast(self.offset, tf.float32)
        masked = tf.where(self.mask, logits, tf.zeros_like(logits))
        return {"scores": tf.nn.softmax(masked), "total": tf.reduce_sum(logits, axis=1) + tf.cast(self.count, tf.float32)}

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32, name="n")])
    def describe(self, n):
        return {"labels": tf.fill([n], self.label), "count": self.count * tf.cast(n, tf.int64),
                "vocab": self.vocab.asset_path}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="ids")])
    def embed(self, ids):
        # A gather straight from a variable is a ResourceGather.
        return {"rows": tf.nn.embedding_lookup(self.w, ids)}


@saved_model_case("module", "tf.Module saved with tf.saved_model.save: variables of float32, float64, float16, "
                  "bool, int64 and string; serving_default returns a dict of two outputs; a second signature "
                  "'describe' returns the string variable, the int64 one and an asset's path; 'embed' gathers "
                  "rows of a variable (ResourceGather)")
def _module_saved_model(path: Path, rng):
    module = _Scorer(rng)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.predict,
                                                       "describe": module.describe, "embed": module.embed})
    return {"serving_default": {"x": rng.standard_normal((3, 4)).astype(np.float32)},
            "describe": {"n": np.int32(2)}, "embed": {"ids": np.array([3, 0, 3, 1], np.int32)}}


@saved_model_case("keras_cnn", "Keras 3 CNN (Conv2D, BatchNormalization, ReLU, pooling, Dense softmax) exported "
                  "with model.export(): signatures 'serve' and 'serving_default'")
def _keras_saved_model(path: Path, rng):
    L = keras.layers
    inp = keras.Input((12, 12, 3), name="image")
    h = L.Conv2D(8, 3, padding="same", use_bias=False)(inp)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.DepthwiseConv2D(3, strides=2, padding="same")(h)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.GlobalAveragePooling2D()(h)
    h = L.Dense(16, activation="relu")(h)
    model = keras.Model(inp, L.Dense(5, activation="softmax")(h))
    randomize_batch_norm(model, rng)
    model.export(str(path), verbose=False)
    image = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)
    return {"serving_default": {"image": image}, "serve": {"image": image[:1]}}


@saved_model_case("tf1_saver", "TF1 graph saved with tf.compat.v1.saved_model.Builder: VariableV2 weights "
                  "restored by save/restore_all, a resource variable, and a main op that stores an asset's path "
                  "(fed by the loader) in a string variable, which the 'asset' signature returns")
def _tf1_saved_model(path: Path, rng):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        w = tf1.Variable(rng.standard_normal((3, 2)).astype(np.float32), name="w", use_resource=False)
        b = tf1.Variable(rng.standard_normal(2).astype(np.float32), name="b", use_resource=False)
        steps = tf1.Variable(np.int32(3), name="steps", use_resource=False)
        scale = tf1.Variable(np.float32(2.0), name="scale", use_resource=True)
        hidden = tf.nn.relu(tf.matmul(x, w) + b)
        y = tf.identity(hidden * scale, name="y")
        total = tf.identity(tf.reduce_sum(y, axis=1) * tf.cast(steps, tf.float32), name="total")
        # The loader feeds the asset tensor its path when it runs the main op, which stores it in a variable.
        asset = tf.constant(vocab_file(), name="asset_path")
        tf1.add_to_collection(tf1.GraphKeys.ASSET_FILEPATHS, asset)
        vocab_path = tf1.Variable(b"", name="vocab_path", use_resource=False)
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            builder = tf1.saved_model.Builder(str(path))
            predict = tf1.saved_model.predict_signature_def({"x": x}, {"y": y, "total": total})
            asset_sig = tf1.saved_model.predict_signature_def({"x": x}, {"path": tf.identity(vocab_path, "path")})
            builder.add_meta_graph_and_variables(
                sess, ["serve"], signature_def_map={"serving_default": predict, "asset": asset_sig},
                assets_collection=tf1.get_collection(tf1.GraphKeys.ASSET_FILEPATHS),
                main_op=tf.group(tf1.assign(vocab_path, asset), tf1.tables_initializer(), name="main_op"),
                strip_default_attrs=True)
            builder.save()
    x_value = rng.standard_normal((4, 3)).astype(np.float32)
    return {"serving_default": {"x": x_value}, "asset": {"x": x_value}}


@saved_model_case("tf1_partitioned", "TF1 graph with partitioned variables (fixed_size_partitioner): each part is "
                  "a variable restored from a slice of one checkpoint tensor (RestoreV2 slice specs), as VariableV2 "
                  "and as resource variables")
def _tf1_partitioned_saved_model(path: Path, rng):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 10], name="x")
        w = tf1.get_variable("w", [10, 4], partitioner=tf1.fixed_size_partitioner(3), use_resource=False,
                             initializer=tf1.random_normal_initializer(seed=1))
        table = tf1.get_variable("table", [9, 3], partitioner=tf1.fixed_size_partitioner(2), use_resource=True,
                                 initializer=tf1.random_normal_initializer(seed=2))
        y = tf.matmul(x, w)
        rows = tf.concat(list(table), axis=0)
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            tf1.saved_model.simple_save(sess, str(path), inputs={"x": x}, outputs={"y": y, "rows": rows})
    return {"serving_default": {"x": rng.standard_normal((2, 10)).astype(np.float32)}}


class _Decay(tf.Module):
    def __init__(self, rng):
        super().__init__()
        self.step = tf.Variable(rng.standard_normal(3).astype(np.float32), name="step")
        self.decay = tf.Variable(np.float32(0.75), name="decay")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([], tf.int32, name="n")])
    def run(self, x, n):
        def body(i, acc):
            acc = tf.cond(i % 2 == 0, lambda: acc * self.decay + self.step, lambda: acc - self.step)
            return i + 1, acc

        _, acc = tf.while_loop(lambda i, acc: i < n, body, [tf.constant(0), x])
        return {"y": acc}


@saved_model_case("while_variable", "tf.Module whose tf.while_loop body reads two variables, one of them inside a "
                  "tf.cond: a functional While (and If) taking the variables as resource inputs")
def _while_saved_model(path: Path, rng):
    module = _Decay(rng)
    tf.saved_model.save(module, str(path), signatures=module.run)
    return {"serving_default": {"x": rng.standard_normal((2, 3)).astype(np.float32), "n": np.int32(5)}}


class _Vocabulary(tf.Module):
    def __init__(self):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b"]), tf.constant([1, 2], tf.int64)), -1)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
    def lookup(self, words):
        return {"ids": self.table.lookup(words)}


@saved_model_case("lookup_table", "tf.Module with a StaticHashTable (HashTableV2, initialized by the init op): "
                  "tensorgate refuses it, naming the table ops", unsupported="HashTableV2")
def _lookup_saved_model(path: Path, rng):
    module = _Vocabulary()
    tf.saved_model.save(module, str(path), signatures=module.lookup)
    return {"serving_default": {"words": np.array([b"a", b"c", b"b"], dtype=object)}}


class _Counter(tf.Module):
    def __init__(self):
        super().__init__()
        self.count = tf.Variable(np.int64(0), name="count")

    @tf.function(input_signature=[tf.TensorSpec([], tf.int64, name="step")])
    def tick(self, step):
        return {"count": self.count.assign_add(step)}


@saved_model_case("assigns_variable", "tf.Module whose signature assigns a variable (assign_add): tensorgate "
                  "serves frozen variables only and refuses it, naming the op", unsupported="AssignAddVariableOp")
def _counter_saved_model(path: Path, rng):
    module = _Counter()
    tf.saved_model.save(module, str(path), signatures=module.tick)
    return {"serving_default": {"step": np.int64(3)}}


# --- tensor bundles ----------------------------------------------------------------------------------------------------


def _bundle_tensors(rng) -> dict[str, np.ndarray]:
    import ml_dtypes

    return {
        "float32": rng.standard_normal((3, 4)).astype(np.float32),
        "float64": rng.standard_normal((2, 2, 2)),
        "float16": rng.standard_normal(5).astype(np.float16),
        "bfloat16": rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16),
        "int8": rng.integers(-128, 128, 6).astype(np.int8),
        "int16": rng.integers(-30000, 30000, 6).astype(np.int16),
        "int32": rng.integers(-2**31, 2**31, (2, 3)).astype(np.int32),
        "int64": rng.integers(-2**62, 2**62, 4).astype(np.int64),
        "uint8": rng.integers(0, 256, 7).astype(np.uint8),
        "uint16": rng.integers(0, 65536, 3).astype(np.uint16),
        "uint32": rng.integers(0, 2**32, 3).astype(np.uint32),
        "uint64": rng.integers(0, 2**63, 3).astype(np.uint64),
        "bool": rng.random((2, 5)) > 0.5,
        "complex64": (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64),
        "complex128": rng.standard_normal((2, 2)) + 1j * rng.standard_normal((2, 2)),
        "scalar": np.float32(3.25),
        "empty": np.zeros((0, 3), np.float32),
        "string": np.array([b"alpha", b"", "\u00fcnicode \u2713".encode(), b"x" * 300, b"\x00\xff binary"], dtype=object),
        "string_matrix": np.array([[b"a", b"bb"], [b"ccc", b""]], dtype=object),
        "string_scalar": np.array(b"only one", dtype=object),
        "nested/name with spaces/.ATTRIBUTES/VARIABLE_VALUE": np.arange(4, dtype=np.int32),
    }


def write_bundle_expected(out_dir: Path, tensors: dict[str, np.ndarray]) -> None:
    entries, arrays = [], {}
    for i, (key, value) in enumerate(tensors.items()):
        value = np.asarray(value)
        entry = {"key": key, "npz": f"t{i}", "tf_dtype": dtype_name(value)}
        if dtype_name(value) in STORED_AS:
            entry["dtype"] = dtype_name(value)
        entries.append(entry)
        arrays[f"t{i}"] = to_storage(value)
    (out_dir / "expected.json").write_text(json.dumps({"prefix": "ckpt", "tensors": entries}, indent=2) + "\n")
    np.savez_compressed(out_dir / "expected.npz", **arrays)


def read_back(prefix: Path, keys) -> dict[str, np.ndarray]:
    """What TensorFlow reads from the bundle (the referee for expected.npz)."""
    reader = tf.train.load_checkpoint(str(prefix))
    out = {}
    for key in keys:
        value = reader.get_tensor(key)
        out[key] = np.array(value, dtype=object) if isinstance(value, bytes) or getattr(value, "dtype", None) == object \
            else np.asarray(value)
    return out


def _bundle_all_dtypes(out_dir: Path, rng) -> dict[str, np.ndarray]:
    tensors = _bundle_tensors(rng)
    names = list(tensors)
    tf.raw_ops.SaveV2(prefix=str(out_dir / "ckpt"), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(v) for v in tensors.values()])
    return read_back(out_dir / "ckpt", names)


def _bundle_sharded(out_dir: Path, rng) -> dict[str, np.ndarray]:
    # NOTE: a size-capped sharding policy spreads the tensors over several data files and splits the big
    # one into slices (stored under OrderedCode slice keys), as TensorFlow does for large checkpoints.
    checkpoint = tf.train.Checkpoint(
        weights=tf.Variable(np.arange(400, dtype=np.float64).reshape(20, 20)),
        bias=tf.Variable(rng.standard_normal(300).astype(np.float32)),
        words=tf.Variable([b"w" * 200, b"v", b""]),
        step=tf.Variable(np.int64(42)))
    policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=1500)
    checkpoint.write(str(out_dir / "ckpt"), options=tf.train.CheckpointOptions(experimental_sharding_callback=policy))
    keys = [k for k, _ in tf.train.list_variables(str(out_dir / "ckpt")) if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    return read_back(out_dir / "ckpt", keys)


def _bundle_partitioned(out_dir: Path, rng) -> dict[str, np.ndarray]:
    # One SaveV2 call given two slices of one tensor writes one entry listing the slices, and each slice under
    # its own key; starts and lengths past 63 take more than one byte in those keys.
    top, bottom = rng.standard_normal((130, 2)).astype(np.float32), rng.standard_normal((70, 2)).astype(np.float32)
    words = np.array([b"a", b"bb", b"ccc", b"dddd"], dtype=object)
    tf.raw_ops.SaveV2(prefix=str(out_dir / "ckpt"), tensor_names=["part", "part", "words", "words"],
                      shape_and_slices=["200 2 0,130:-", "200 2 130,70:-", "4 0,1", "4 1,3"],
                      tensors=[tf.constant(top), tf.constant(bottom), tf.constant(words[:1]), tf.constant(words[1:])])
    return {"part": np.concatenate([top, bottom]), "words": words}


BUNDLE_CASES = {"bundles/all_dtypes": _bundle_all_dtypes, "bundles/sharded": _bundle_sharded,
                "bundles/partitioned": _bundle_partitioned}


def write_bundle_case(path: str) -> str:
    out_dir = FIXTURES / path
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    tensors = BUNDLE_CASES[path](out_dir, np.random.default_rng(zlib.crc32(path.encode())))
    write_bundle_expected(out_dir, tensors)
    files = sorted(p.name for p in out_dir.iterdir())
    return f"{len(tensors)} tensors; {', '.join(files)}"


def make_saved_model_fixtures(only: str | None) -> int:
    """Write the SavedModel and bundle cases whose path contains `only` (all when None)."""
    failures = 0
    jobs = [(p, lambda p=p: write_bundle_case(p)) for p in BUNDLE_CASES]
    jobs += [(p, lambda c=c: write_saved_model_case(c)) for p, c in SAVED_MODEL_CASES.items()]
    for path, job in jobs:
        if only is not None and only not in path:
            continue
        try:
            status, detail = "ok", job()
        except Exception as e:  # noqa: BLE001
            shutil.rmtree(FIXTURES / path, ignore_errors=True)
            status, detail = "error", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            failures += 1
        print(f"{status:>17}  {path}  {detail}", flush=True)
    if only is None:
        wanted = set(BUNDLE_CASES) | set(SAVED_MODEL_CASES)
        marked = [*BUNDLES.rglob("expected.json"), *SAVED_MODELS.rglob("signatures.json")]
        for stale in sorted({m.parent for m in marked if m.parent.relative_to(FIXTURES).as_posix() not in wanted}):
            shutil.rmtree(stale)
            print(f"removed stale {stale.relative_to(FIXTURES).as_posix()}")
    return failures


# === the driver ================================================================================================


def build_fixture(spec: Spec) -> tuple[str, str]:
    """Write one case; returns (status, detail)."""
    try:
        fixture = spec.make()
        outputs = write_fixture(spec.path, fixture)
    except Exception as e:  # noqa: BLE001
        shutil.rmtree(FIXTURES / spec.path, ignore_errors=True)
        message = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        if spec.may_skip:
            return "skipped", f"{spec.may_skip}: {message}"
        return "error", f"{type(e).__name__}: {message}"
    ops = sorted({n.op for n in fixture.graph_def.node} - {"Const", "Placeholder", "Identity"})
    if fixture.graph_def.library.function:
        ops.append(f"<library: {len(fixture.graph_def.library.function)} functions>")
    round_trip = check_round_trip(spec.path, fixture, outputs)
    return ("ok" if round_trip.startswith(("ok", "skipped")) else "round-trip-failed"), \
        f"round trip {round_trip}; ops {' '.join(ops)}"


def prune_stale(wanted: set[str]) -> None:
    for case_json in FIXTURES.rglob("case.json"):
        rel = case_json.parent.relative_to(FIXTURES).as_posix()
        if rel not in wanted:
            shutil.rmtree(case_json.parent)
            print(f"removed stale {rel}")


def make_fixtures(only: str | None) -> int:
    chosen = [s for s in CASES.values() if only is None or only in s.path]
    failures = 0
    for spec in chosen:
        status, detail = build_fixture(spec)
        failures += status in ("error", "round-trip-failed")
        print(f"{status:>17}  {spec.path}  {detail}", flush=True)
    if only is None:
        prune_stale(set(CASES))
    failures += make_saved_model_fixtures(only)
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    print(f"{len(chosen)} cases, {failures} failures; tests/fixtures holds {total / 1e6:.2f} MB")
    return 1 if failures else 0


# === bench models ==============================================================================================


class PositionEmbedding(keras.layers.Layer):
    """Adds a learned [sequence, hidden] table to the token embeddings."""

    def __init__(self, length, width, **kw):
        super().__init__(**kw)
        self.table = self.add_weight(shape=(length, width), initializer="random_normal", name="table")

    def call(self, x):
        return x + self.table[None]


def _bench_mlp():
    L = keras.layers
    inp = keras.Input((784,), name="x")
    h = L.Dense(512, activation="relu")(L.Dense(512, activation="relu")(inp))
    return keras.Model(inp, L.Dense(10, activation="softmax")(h)), ([784], tf.float32, "x")


def _bench_mobilenet_v2():
    model = keras.applications.MobileNetV2(input_shape=(224, 224, 3), weights=None)
    return model, ([224, 224, 3], tf.float32, "images")


def _bench_resnet50():
    return keras.applications.ResNet50(input_shape=(224, 224, 3), weights=None), ([224, 224, 3], tf.float32, "images")


def _bench_bert_mini():
    L = keras.layers
    seq, hidden, vocab = 128, 256, 30522
    ids = keras.Input((seq,), dtype="int32", name="input_ids")
    h = L.Embedding(vocab, hidden, name="token_embedding")(ids)
    h = PositionEmbedding(seq, hidden, name="position_embedding")(h)
    h = L.LayerNormalization(epsilon=1e-12, name="embedding_ln")(h)
    for i in range(4):
        h = _encoder_layer(h, 4, hidden // 4, 1024, f"layer{i}", gelu=bert_gelu)
    return keras.Model(ids, h), ([seq], tf.int32, "input_ids")


BENCH_MODELS = {"mlp": _bench_mlp, "mobilenet_v2": _bench_mobilenet_v2, "resnet50": _bench_resnet50,
                "bert_mini": _bench_bert_mini}


def _bench_sample(sample_shape, dtype, batch=2) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == tf.int32:
        return rng.integers(0, 1000, (batch, *sample_shape)).astype(np.int32)
    return rng.standard_normal((batch, *sample_shape)).astype(np.float32)


def convert_to_onnx(graph_def, feed: str, fetch: str, sample: np.ndarray, path: Path) -> str:
    """Convert with tf2onnx and check onnxruntime agrees with TensorFlow on one batch."""
    try:
        import onnxruntime
        import tf2onnx

        tf2onnx.convert.from_graph_def(graph_def, input_names=[feed], output_names=[fetch], opset=17,
                                       output_path=str(path))
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: sample})[0]
    except Exception as e:  # noqa: BLE001  (tf2onnx and onnxruntime raise many kinds)
        path.unlink(missing_ok=True)
        return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    want = run_graph_def(graph_def, [(feed, sample)], [fetch])[0]
    err = float(np.max(np.abs(got - want)))
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(want).max()))):
        return f"converted, but onnxruntime differs from TensorFlow (max abs err {err:.2e})"
    return f"ok (onnxruntime matches TensorFlow, max abs err {err:.1e})"


def make_bench(only: str | None) -> int:
    for name, build in BENCH_MODELS.items():
        if only is not None and only not in name:
            continue
        keras.utils.set_random_seed(zlib.crc32(name.encode()) % (2**31))
        model, (sample_shape, dtype, input_name) = build()
        spec = tf.TensorSpec([None, *sample_shape], dtype, name=input_name)
        graph_def, feeds, fetches = freeze_keras(model, [spec])
        out_dir = BENCH / name
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        (out_dir / "model.pb").write_bytes(graph_def.SerializeToString())
        onnx_status = convert_to_onnx(graph_def, feeds[0], fetches[0], _bench_sample(sample_shape, dtype),
                                      out_dir / "model.onnx")
        case = {"description": f"bench model {name}, random weights", "feeds": [
            {"name": feeds[0], "shape": [None, *sample_shape], "sample_shape": sample_shape, "dtype": dtype.name}],
            "fetches": [{"name": fetches[0]}], "onnx": onnx_status}
        (out_dir / "case.json").write_text(json.dumps(case, indent=2) + "\n")
        sizes = {p.name: f"{p.stat().st_size / 1e6:.1f} MB" for p in sorted(out_dir.iterdir())}
        print(f"bench {name}: {sizes}; onnx {onnx_status}", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="only cases (or bench models) whose path contains this string")
    parser.add_argument("--bench", action="store_true", help="write the large bench models instead")
    parser.add_argument("--list", action="store_true", help="list the case paths and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join([*CASES, *BUNDLE_CASES, *SAVED_MODEL_CASES]))
        return 0
    return make_bench(args.only) if args.bench else make_fixtures(args.only)


if __name__ == "__main__":
    sys.exit(main())
