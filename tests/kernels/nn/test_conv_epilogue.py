"""The compiled conv epilogue (kernels.nn.conv_epilogue) held to its numpy twin (kernels.nn.fused.channel_epilogue's
steps): equal to the bit, NaN and infinities included, for every head and activation it takes, on whole fused
convolutions and on blocks."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import jit
from kernels.nn import conv_epilogue, fused

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

# (activation, with a residual addend, LeakyRelu's alpha): a bias alone stays numpy's one pass.
CASES = ([(act, addend, 0.2) for act in ("Relu", "Relu6", "LeakyRelu") for addend in (False, True)]
         + [(None, True, 0.2)] + [("LeakyRelu", False, alpha) for alpha in (1.0, 2.5, 0.0, -0.5)])


def _block(rng, shape):
    y = (rng.standard_normal(shape) * 4).astype(np.float32)
    flat = y.reshape(-1)
    flat[[3, 17, 40]] = [np.nan, np.inf, -np.inf]
    return y


@pytest.mark.parametrize("activation,with_addend,alpha", CASES, ids=str)
def test_block_equals_twin(activation, with_addend, alpha):
    rng = np.random.default_rng(0)
    shape = (2, 5, 7, 9)
    y, bias = _block(rng, shape), rng.standard_normal(9).astype(np.float32)
    addend = _block(rng, shape) if with_addend else None
    head = ("BiasAdd", "Add") if with_addend else ("BiasAdd",)
    step = None if activation is None else fused.split_fused_ops("_FusedConv2D", (*head, activation), len(head))[1]
    twin = fused.channel_epilogue(np, head, [bias], step, 1e-4, alpha, addend, activation, compiled=False)
    fast = fused.channel_epilogue(np, head, [bias], step, 1e-4, alpha, addend, activation, compiled=True)
    want, got = y.copy(), y.copy()
    where = (slice(0, 2), slice(1, 4))
    twin(want[where], where)
    fast(got[where], where)
    np.testing.assert_array_equal(got, want)


def test_odd_blocks_go_to_the_twin():
    rng = np.random.default_rng(1)
    y, bias = _block(rng, (1, 4, 6, 8)), rng.standard_normal(8).astype(np.float32)
    calls = []
    finish = conv_epilogue.compiled_epilogue(("BiasAdd",), "Relu", bias, None, 0.2,
                                             lambda block, where: calls.append(where))
    view = y[:, :, ::2]  # not contiguous: the compiled pass would write a copy
    finish(view, (slice(0, 1), slice(0, 4)))
    assert len(calls) == 1
    assert conv_epilogue.compiled_epilogue(("FusedBatchNorm",), "Relu", bias, None, 0.2, finish) is None
    assert conv_epilogue.compiled_epilogue(("BiasAdd",), "Swish", bias, None, 0.2, finish) is None


@pytest.mark.parametrize("fused_ops", [("BiasAdd", "Relu"), ("BiasAdd", "Add", "Relu6"), ("BiasAdd", "Add"),
                                       ("BiasAdd", "LeakyRelu")])
def test_fused_conv2d_equals_twin(fused_ops):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 9, 8, 5)).astype(np.float32)
    w = rng.standard_normal((3, 3, 5, 6)).astype(np.float32)
    args = [rng.standard_normal(6).astype(np.float32)]
    if "Add" in fused_ops:
        args.append(rng.standard_normal((3, 9, 8, 6)).astype(np.float32))
    attrs = {"strides": (1, 1, 1, 1), "padding": "SAME", "fused_ops": fused_ops, "num_args": len(args),
             "leakyrelu_alpha": 0.3}
    np.testing.assert_array_equal(fused.fused_conv2d(np, x, w, *args, **attrs, compiled=True)[0],
                                  fused.fused_conv2d(np, x, w, *args, **attrs, compiled=False)[0])
