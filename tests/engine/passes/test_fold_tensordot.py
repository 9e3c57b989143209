"""fold_tensordot: Keras' Tensordot over the last axis (Transpose by the identity, Shape/Gather/Prod/Pack,
Reshape, the fused matmul, Reshape back) becomes one _TensorgateDense with the same results; anything that
is not exactly that contraction stays as it is."""

import numpy as np
import pytest

import engine
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, I32, compare, fixture_signature, ops_of, rng

X = rng.standard_normal((2, 5, 8)).astype(np.float32)


def tensordot(*, perm=(0, 1, 2), free=(0, 1), axes=(2,), units=6, transpose=True, relu=True) -> engine.Graph:
    """y = Relu(Tensordot(x [?, 5, 8], w [8, 6], axes=[[2], [0]]) + b), frozen the way Keras writes it."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 5, 8))
    g.const("w", rng.standard_normal((8, 6)).astype(np.float32))
    g.const("b", rng.standard_normal(6).astype(np.float32))
    g.const("perm", np.array(perm, np.int32))
    g.const("free", np.array(free, np.int32))
    g.const("axes", np.array(axes, np.int32))
    g.const("zero", np.int32(0))
    g.const("units", np.array([units], np.int32))
    src = "x"
    if transpose:
        g.node("t/transpose", "Transpose", ["x", "perm"], T=F32, Tperm=I32)
        src = "t/transpose"
    g.node("t/shape", "Shape", ["x"], T=F32, out_type=I32)
    g.node("t/free", "GatherV2", ["t/shape", "free", "zero"], Tparams=I32, Tindices=I32, Taxis=I32)
    g.node("t/axes", "GatherV2", ["t/shape", "axes", "zero"], Tparams=I32, Tindices=I32, Taxis=I32)
    g.node("t/rows", "Prod", ["t/free", "zero"], T=I32, Tidx=I32, keep_dims=False)
    g.node("t/depth", "Prod", ["t/axes", "zero"], T=I32, Tidx=I32, keep_dims=False)
    g.node("t/stack", "Pack", ["t/rows", "t/depth"], T=I32, N=2, axis=0)
    g.node("t/x2", "Reshape", [src, "t/stack"], T=F32)
    g.node("t/mm", "MatMul", ["t/x2", "w"], T=F32)
    g.node("t/out_shape", "ConcatV2", ["t/free", "units", "zero"], T=I32, N=2, Tidx=I32)
    g.node("t/y3", "Reshape", ["t/mm", "t/out_shape"], T=F32)
    g.node("t/biased", "BiasAdd", ["t/y3", "b"], T=F32)
    out = "t/biased"
    if relu:
        g.node("t/relu", "Relu", ["t/biased"], T=F32)
        out = "t/relu"
    g.node("y", "Identity", [out], T=F32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("relu", [True, False])
def test_tensordot_becomes_one_dense(transpose, relu):
    graph = tensordot(transpose=transpose, relu=relu)
    assert ops_of(engine.Session(graph), ["x:0"], ["y:0"]) == ["_TensorgateDense"]
    compare(graph, {"x:0": X}, ["y:0"])


def test_other_contractions_stay():
    # A transpose that permutes, or a Reshape whose shape is not the Tensordot's: not this contraction.
    for graph in (tensordot(perm=(1, 0, 2)), tensordot(free=(1, 0), perm=(1, 0, 2))):
        ops = ops_of(engine.Session(graph), ["x:0"], ["y:0"])
        assert "Shape" in ops or "Transpose" in ops
        compare(graph, {"x:0": X}, ["y:0"])


def test_fetched_scaffolding_keeps_its_values():
    graph = tensordot()
    fetches = ["y:0", "t/x2:0", "t/out_shape:0"]
    compare(graph, {"x:0": X}, fetches)


def test_fetched_matmul_stays():
    graph = tensordot(relu=False)
    ops = ops_of(engine.Session(graph), ["x:0"], ["y:0", "t/mm:0"])
    assert "_TensorgateDense" not in ops
    compare(graph, {"x:0": X}, ["y:0", "t/mm:0"])


def test_bert_like_fixture_keeps_no_scaffolding():
    graph, feeds, fetches = fixture_signature("models/transformer_block")
    ops = ops_of(engine.Session(graph), list(feeds), fetches)
    assert not {"Shape", "Prod", "Pack", "ConcatV2", "Transpose", "GatherV2"} & set(ops)
    compare(graph, feeds, fetches)
