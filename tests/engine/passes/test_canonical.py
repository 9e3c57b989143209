"""Canonical digests (engine.passes.canonical) of a TF-written loop body: what a tensor computes, whatever the node
names, Identity ops, the order of a commutative op's operands or attrs at their defaults; and nothing else
(another constant, dtype, op or attr is another digest)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.graph.functions import called_function
from engine.passes.canonical import Digest, FunctionDigests, NotCanonical
from tests.golden import FIXTURES, load_case

D = Digest


@pytest.fixture(scope="module")
def body() -> FunctionDigests:
    """The body of tf.image.non_max_suppression_padded's loop: ret 5 is `idx + 1` (through an Identity), ret 3 the
    IoU threshold passed through."""
    graph = engine.load_graph(load_case(FIXTURES / "control_flow/padded_nms/tf_image").model)
    loop = next(n for n in graph.nodes if n.op == "StatelessWhile")
    return FunctionDigests(called_function(loop, "body", graph.library, loop.name), graph.library)


def test_what_a_tensor_computes_whatever_its_spelling(body) -> None:
    one = D.const(np.int32(1))
    assert body.ret(5) == D.op("AddV2", D.arg(5), one) == D.op("AddV2", one, D.arg(5))  # commutative, Identity
    assert body.ret(3) == D.arg(3)
    assert D.op("Sum", D.arg(0), one) == D.op("Sum", D.arg(0), one, keep_dims=False, Tidx=np.dtype(np.int32))
    assert D.op("Cast", D.arg(0), DstT=np.dtype(np.float32), Truncate=False, _class=["x"]) == D.op(
        "Cast", D.arg(0), DstT=np.dtype(np.float32))


def test_anything_else_is_another_digest(body) -> None:
    assert body.ret(5) not in {D.op("AddV2", D.arg(5), D.const(np.int64(1))), D.op("AddV2", D.arg(5), D.const(2)),
                               D.op("Sub", D.arg(5), D.const(np.int32(1))), D.op("AddV2", D.arg(4), D.const(np.int32(1)))}
    assert D.op("Sub", D.arg(0), D.arg(1)) != D.op("Sub", D.arg(1), D.arg(0))
    assert D.op("Sum", D.arg(0), D.arg(1)) != D.op("Sum", D.arg(0), D.arg(1), keep_dims=True)
    assert D.op("Split", D.arg(0), D.arg(1), index=0, num_split=4) != D.op("Split", D.arg(0), D.arg(1), index=1,
                                                                           num_split=4)
    assert D.const(np.zeros(2, np.float32)) != D.const(np.zeros((1, 2), np.float32))


def test_the_loops_called_are_digested_by_what_they_compute(body) -> None:
    rets = body.rets()
    assert len(rets) == len(body.function.rets) and len(set(rets)) == len(rets)
    # The boxes the body returns read its inner loops; the same body digested afresh gives the same digests.
    again = FunctionDigests(body.function, body.library)
    assert again.rets() == rets


def test_control_rets_are_not_digested() -> None:
    graph = engine.load_graph(load_case(FIXTURES / "control_flow/map_fn/asserts_two_outputs").model)
    loop = next(n for n in graph.nodes if n.op == "While")
    with pytest.raises(NotCanonical, match="control rets"):
        FunctionDigests(called_function(loop, "body", graph.library, loop.name), graph.library)
