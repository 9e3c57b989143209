"""fuse_activation takes the Identity Keras 2 freezes an inference-time Dropout to, between a convolution's bias
and the block's residual add (EfficientNet's blocks), into the fused convolution; an Identity that is
fetched, or that no residual add follows, ends the chain as before."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import builder as gb
from tests.engine.passes.checks import compare, ops_of

rng = np.random.default_rng(41)
IMAGES = rng.standard_normal((2, 5, 5, 4)).astype(np.float32)


def _build(dropouts=1, then="add"):
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, 5, 5, 4], name="x")
        y = gb.layers.conv2d(x, rng.standard_normal((1, 1, 4, 4)).astype(np.float32),
                             rng.standard_normal(4).astype(np.float32))
        for i in range(dropouts):
            y = gb.identity(y, name=f"drop_{i}")
        dropped = y
        y = gb.add(x, y) if then == "add" else gb.relu(y)
        y = gb.identity(y, name="y")
    return engine.load_graph(graph.as_graph_def().SerializeToString()), y.name, dropped.name


@pytest.mark.parametrize("dropouts", [0, 1, 2])
def test_identities_before_the_residual_add_join_the_convolution(dropouts):
    graph, y, _ = _build(dropouts)
    assert ops_of(engine.Session(graph), ["x:0"], [y]) == ["_FusedConv2D"]
    compare(graph, {"x:0": IMAGES}, [y])


def test_a_fetched_identity_ends_the_chain():
    graph, y, dropped = _build(1)
    ops = ops_of(engine.Session(graph), ["x:0"], [y, dropped])
    assert "AddV2" in ops
    compare(graph, {"x:0": IMAGES}, [y, dropped])


def test_identity_without_a_residual_add_is_left_alone():
    graph, y, _ = _build(1, then="relu")
    compare(graph, {"x:0": IMAGES}, [y])
