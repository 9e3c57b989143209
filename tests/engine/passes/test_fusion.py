"""Fusion passes: a convolution with its bias, a residual add and its activation into one kernel
(fuse_activation), and the transformer fusions: Keras' layer norm (fuse_layer_norm), GELU in its erf,
erfc and tanh forms (fuse_gelu), and dense layers with their bias and activation (fuse_dense)."""

import numpy as np
import pytest

import engine
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, I32, X, compare, fixture_signature, ops_of, rng

# -- convolutions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shortcut_shape", [(2, 5, 5, 4), (4,), (1, 5, 1, 4)], ids=["same", "vector", "broadcast"])
def test_residual_add_fuses_into_the_convolution(shortcut_shape):
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 9, 9, 3))
    g.placeholder("shortcut", np.float32, shortcut_shape)
    g.const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32))
    g.const("b", rng.standard_normal(4).astype(np.float32))
    g.node("conv", "Conv2D", ["x", "w"], T=F32, strides=[1, 2, 2, 1], padding="SAME")
    g.node("biased", "BiasAdd", ["conv", "b"], T=F32)
    g.node("sum", "AddV2", ["shortcut", "biased"], T=F32)
    g.node("out", "Relu", ["sum"], T=F32)
    graph = engine.load_graph(g.bytes())
    assert ops_of(engine.Session(graph), ["x:0", "shortcut:0"], ["out:0"]) == ["_FusedConv2D"]
    feeds = {"x:0": X, "shortcut:0": rng.standard_normal(shortcut_shape).astype(np.float32)}
    compare(graph, feeds, ["out:0"])


# -- transformer fusions: layer norm, GELU, dense layers -----------------------------------------------

SEQ = rng.standard_normal((2, 5, 8)).astype(np.float32) * 3 + 1


def keras_layer_norm(*, axis=-1, eps_after_rsqrt=False) -> engine.Graph:
    """x -> the chain Keras 3's LayerNormalization freezes to (over `axis`)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 5, 8))
    g.const("axes", np.array([axis], np.int32))
    g.const("eps", np.float32(1e-3))
    shape = (1, 1, 8) if axis == -1 else (1, 5, 1)
    g.const("gamma", rng.standard_normal(shape).astype(np.float32))
    g.const("beta", rng.standard_normal(shape).astype(np.float32))
    g.node("ln/mean", "Mean", ["x", "axes"], T=F32, keep_dims=True)
    g.node("ln/stop", "StopGradient", ["ln/mean"], T=F32)
    g.node("ln/sqdiff", "SquaredDifference", ["x", "ln/stop"], T=F32)
    g.node("ln/variance", "Mean", ["ln/sqdiff", "axes"], T=F32, keep_dims=True)
    if eps_after_rsqrt:
        g.node("ln/rsqrt", "Rsqrt", ["ln/variance"], T=F32)
        g.node("ln/add", "AddV2", ["ln/rsqrt", "eps"], T=F32)
        inv_source = "ln/add"
    else:
        g.node("ln/add", "AddV2", ["ln/variance", "eps"], T=F32)
        g.node("ln/rsqrt", "Rsqrt", ["ln/add"], T=F32)
        inv_source = "ln/rsqrt"
    g.node("ln/inv", "Mul", [inv_source, "gamma"], T=F32)
    g.node("ln/scaled", "Mul", ["x", "ln/inv"], T=F32)
    g.node("ln/neg", "Neg", ["ln/mean"], T=F32)
    g.node("ln/shift", "Mul", ["ln/neg", "ln/inv"], T=F32)
    g.node("ln/res", "AddV2", ["ln/shift", "beta"], T=F32)
    g.node("y", "AddV2", ["ln/scaled", "ln/res"], T=F32)
    return engine.load_graph(g.bytes())


def test_layer_norm_chain_becomes_one_kernel():
    graph = keras_layer_norm()
    assert ops_of(engine.Session(graph), ["x:0"], ["y:0"]) == ["_TensorgateLayerNorm"]
    compare(graph, {"x:0": SEQ}, ["y:0"])


@pytest.mark.parametrize("variant", ["fetched_mean", "eps_after_rsqrt", "middle_axis"])
def test_layer_norm_chain_stays_when_it_is_not_exactly_a_layer_norm(variant):
    graph = keras_layer_norm(axis=1 if variant == "middle_axis" else -1, eps_after_rsqrt=variant == "eps_after_rsqrt")
    fetches = ["y:0", "ln/mean:0"] if variant == "fetched_mean" else ["y:0"]
    assert "_TensorgateLayerNorm" not in ops_of(engine.Session(graph), ["x:0"], fetches)
    compare(graph, {"x:0": SEQ}, fetches)


def gelu_graph(form: str) -> engine.Graph:
    """x -> GELU as Keras 3 (erfc), tf.nn.gelu (erf) or tf.nn.gelu(approximate=True) (tanh) freeze it."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 8))
    g.const("half", np.float32(0.5))
    g.const("one", np.float32(1.0))
    g.node("g/half_x", "Mul", ["half", "x"], T=F32)
    if form == "erfc":
        g.const("c", np.float32(1 / np.sqrt(2)))
        g.node("g/neg", "Neg", ["x"], T=F32)
        g.node("g/scaled", "Mul", ["g/neg", "c"], T=F32)
        g.node("g/cdf", "Erfc", ["g/scaled"], T=F32)
    elif form == "erf":
        g.const("c", np.float32(np.sqrt(2)))
        g.node("g/scaled", "RealDiv", ["x", "c"], T=F32)
        g.node("g/erf", "Erf", ["g/scaled"], T=F32)
        g.node("g/cdf", "AddV2", ["one", "g/erf"], T=F32)
    else:
        g.const("three", np.float32(3.0))
        g.const("k", np.float32(0.044715))
        g.const("c", np.float32(np.sqrt(2 / np.pi)))
        g.node("g/cube", "Pow", ["x", "three"], T=F32)
        g.node("g/kcube", "Mul", ["k", "g/cube"], T=F32)
        g.node("g/inner", "AddV2", ["x", "g/kcube"], T=F32)
        g.node("g/scaled", "Mul", ["c", "g/inner"], T=F32)
        g.node("g/tanh", "Tanh", ["g/scaled"], T=F32)
        g.node("g/cdf", "AddV2", ["one", "g/tanh"], T=F32)
    g.node("y", "Mul", ["g/half_x", "g/cdf"], T=F32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("form", ["erfc", "erf", "tanh"])
def test_gelu_chain_becomes_one_kernel(form):
    graph = gelu_graph(form)
    assert ops_of(engine.Session(graph), ["x:0"], ["y:0"]) == ["_TensorgateGelu"]
    x = (rng.standard_normal((4, 8)) * 4).astype(np.float32)
    compare(graph, {"x:0": x}, ["y:0"])


def test_gelu_chain_with_a_fetched_intermediate_stays():
    graph = gelu_graph("erfc")
    assert "_TensorgateGelu" not in ops_of(engine.Session(graph), ["x:0"], ["y:0", "g/cdf:0"])


def dense_graph(kind: str) -> engine.Graph:
    """A dense layer over the last axis of x [batch, 5, 8] with a bias (and GELU for 'tensordot')."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 5, 8))
    g.const("w", rng.standard_normal((8, 6)).astype(np.float32))
    if kind == "tensordot":  # Keras Dense on 3-D data: Reshape, MatMul, Reshape back (computed shape), BiasAdd
        g.const("flat", np.array([-1, 8], np.int32))
        g.const("index", np.array([0, 1], np.int32))
        g.const("units", np.array([6], np.int32))
        g.const("zero", np.int32(0))
        g.node("d/x2", "Reshape", ["x", "flat"], T=F32)
        g.node("d/mm", "MatMul", ["d/x2", "w"], T=F32)
        g.node("d/shape", "Shape", ["x"], T=F32, out_type=I32)
        g.node("d/lead", "GatherV2", ["d/shape", "index", "zero"], Tparams=I32, Tindices=I32, Taxis=I32)
        g.node("d/out_shape", "ConcatV2", ["d/lead", "units", "zero"], T=I32, N=2, Tidx=I32)
        g.node("d/y3", "Reshape", ["d/mm", "d/out_shape"], T=F32)
        g.const("b", rng.standard_normal(6).astype(np.float32))
        g.node("d/biased", "BiasAdd", ["d/y3", "b"], T=F32)
        g.const("half", np.float32(0.5))
        g.const("c", np.float32(1 / np.sqrt(2)))
        g.node("g/half_x", "Mul", ["half", "d/biased"], T=F32)
        g.node("g/neg", "Neg", ["d/biased"], T=F32)
        g.node("g/scaled", "Mul", ["g/neg", "c"], T=F32)
        g.node("g/cdf", "Erfc", ["g/scaled"], T=F32)
        g.node("y", "Mul", ["g/half_x", "g/cdf"], T=F32)
    elif kind == "heads":  # MultiHeadAttention's projection: BatchMatMulV2, Reshape into heads, AddV2 [heads, size]
        g.const("split", np.array([-1, 5, 2, 3], np.int32))
        g.const("b", rng.standard_normal((2, 3)).astype(np.float32))
        g.node("d/mm", "BatchMatMulV2", ["x", "w"], T=F32)
        g.node("d/heads", "Reshape", ["d/mm", "split"], T=F32)
        g.node("y", "AddV2", ["d/heads", "b"], T=F32)
    else:  # an Einsum over the last axis, with the bias split as the output is
        g.const("w3", rng.standard_normal((8, 2, 3)).astype(np.float32))
        g.const("b", rng.standard_normal((2, 3)).astype(np.float32))
        g.node("d/mm", "Einsum", ["x", "w3" if kind == "einsum" else "w"], T=F32, N=2,
               equation="abc,cde->abde" if kind == "einsum" else "abc,db->adc")
        g.node("y", "AddV2", ["d/mm", "b"], T=F32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("kind, fused", [
    ("tensordot", ["Reshape", "_FusedMatMul", "Reshape"]),
    ("heads", ["_TensorgateDense", "Reshape"]),
    ("einsum", ["_TensorgateDense"]),
])
def test_dense_layers_fuse_their_bias_and_activation(kind, fused):
    graph = dense_graph(kind)
    ops = ops_of(engine.Session(graph), ["x:0"], ["y:0"])
    assert [op for op in ops if op in {"_FusedMatMul", "_TensorgateDense", "Reshape"}] == fused
    assert not {"BiasAdd", "AddV2", "Erfc", "_TensorgateGelu"} & set(ops)
    compare(graph, {"x:0": SEQ}, ["y:0"])


def test_einsum_not_over_the_last_axis_stays():
    graph = dense_graph("einsum_other")
    assert "Einsum" in ops_of(engine.Session(graph), ["x:0"], ["y:0"])


def test_transformer_block_fuses_layer_norms_gelu_and_dense_layers():
    graph, feeds, fetches = fixture_signature("models/transformer_block")
    ops = ops_of(engine.Session(graph), list(feeds), fetches)
    counts = {op: ops.count(op) for op in set(ops)}
    assert counts.get("_TensorgateLayerNorm") == 2
    # the feed-forward layer with GELU fused, whose Tensordot scaffolding fold_tensordot folds away; query, key
    # and value, with their biases, one split projection; the attention output and the second feed-forward
    # layer, each with its bias and the residual Add after it, projections (fuse_projection)
    assert counts.get("_TensorgateDense") == 1 and counts.get("_TensorgateSplitProjection") == 1
    assert counts.get("_TensorgateProjection") == 2 and "AddV2" not in counts
    assert "_FusedMatMul" not in counts and "Shape" not in counts and "Prod" not in counts
    for unfused in ("Mean", "Rsqrt", "SquaredDifference", "Erfc", "BiasAdd", "BatchMatMulV2", "_TensorgateGelu"):
        assert unfused not in counts
    compare(graph, feeds, fetches)
