"""The swish, hard-swish and squeeze-and-excitation fusions fire on graphs TensorFlow wrote (the golden cases
under models/convnet_patterns/: Keras 3 layers, Keras 2 layers, raw ops), leaving one fused op per layer;
tests/engine/runtime/test_golden.py holds their outputs to TensorFlow's."""

from __future__ import annotations

import pytest

import engine
from tests.engine.passes.checks import fixture_signature, ops_of

EXPECTED = {
    # A dense layer's swish stays its own op: fuse_dense writes the dense layer's _FusedMatMul first.
    "swish_keras3": ["_FusedConv2D", "_FusedDepthwiseConv2dNative", "_FusedConv2D", "Mean", "_FusedMatMul",
                     "_TensorgateSwish", "_FusedMatMul"],
    # An MBConv block: the expansion and depthwise step banded, then the squeeze-and-excitation with the projection.
    "mobilenet_v3_keras3": ["_TensorgateExpandDepthwise", "_TensorgateSqueezeExcite", "Mean", "_FusedMatMul"],
    "efficientnet_tf_keras": ["_TensorgateExpandDepthwise", "_TensorgateSqueezeExcite", "Mean", "_FusedMatMul"],
    "mobilenet_v3_tf_keras": ["_TensorgateExpandDepthwise", "_TensorgateSqueezeExcite", "Mean", "_FusedMatMul"],
    # A squeeze-and-excitation after a 1x1 convolution: no depthwise step to band.
    "raw_ops": ["_FusedConv2D", "_FusedDepthwiseConv2dNative", "_FusedConv2D", "_TensorgateSqueezeExcite"],
}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_fusions_fire_on_graphs_tensorflow_wrote(case):
    graph, feeds, fetches = fixture_signature(f"models/convnet_patterns/{case}")
    assert ops_of(engine.Session(graph), list(feeds), fetches) == EXPECTED[case]
