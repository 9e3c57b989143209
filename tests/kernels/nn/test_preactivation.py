"""_TensorgatePreactivatedConv2D: the chunked path (the compiled prologue on each chunk of pixels, then its GEMM)
held to its numpy twin (Mul, AddV2 and the activation on the whole tensor, then the convolution): the GEMMs'
inputs equal to the bit, the outputs to float32 rounding (BLAS may round a row differently by the size of the
matrix it is in)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import jit
from kernels.nn import preactivation

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

POINTWISE_OPS = [(), ("BiasAdd",), ("BiasAdd", "Relu"), ("BiasAdd", "Add"), ("BiasAdd", "Add", "Relu6"),
                 ("FusedBatchNorm", "Relu"), ("BiasAdd", "LeakyRelu")]


def _case(shape, out_channels, fused_ops, seed=0):
    rng = np.random.default_rng(seed)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    c = shape[3]
    inputs = [f32(*shape) * 3, f32(c), f32(c), f32(1, 1, c, out_channels)]
    if fused_ops and fused_ops[0] == "FusedBatchNorm":
        inputs += [f32(out_channels), f32(out_channels), f32(out_channels),
                   rng.uniform(0.5, 2.0, out_channels).astype(np.float32)]
    elif fused_ops:
        inputs.append(f32(out_channels))
    if "Add" in fused_ops:
        inputs.append(f32(*shape[:3], out_channels))
    return inputs


def _both(inputs, **attrs):
    twin = preactivation.preactivated_conv2d(np, *inputs, **attrs, compiled=False)[0]
    fast = preactivation.preactivated_conv2d(np, *inputs, **attrs, compiled=True)[0]
    assert fast.shape == twin.shape and fast.dtype == twin.dtype == np.float32
    return fast, twin


def assert_agree(fast, twin):
    np.testing.assert_allclose(fast, twin, rtol=1e-5, atol=1e-6 * float(np.abs(twin).max()))


@pytest.mark.parametrize("fused_ops", POINTWISE_OPS, ids=str)
@pytest.mark.parametrize("activation", ["", "Relu", "Relu6"])
def test_chunked_equals_twin(fused_ops, activation):
    inputs = _case((2, 7, 9, 12), 10, fused_ops)
    assert_agree(*_both(inputs, prologue_activation=activation, fused_ops=fused_ops, leakyrelu_alpha=0.3))


def test_many_chunks_and_the_prologue_to_the_bit(monkeypatch):
    monkeypatch.setattr(preactivation, "_CHUNK_BYTES", 4096)
    inputs = _case((3, 20, 17, 24), 16, ("BiasAdd", "Relu"), seed=1)
    assert_agree(*_both(inputs, prologue_activation="Relu6", fused_ops=("BiasAdd", "Relu")))
    # An identity filter shows the prologue itself: the chunked rows are the twin's elementwise result, exactly.
    c = inputs[0].shape[3]
    inputs[3] = np.eye(c, dtype=np.float32).reshape(1, 1, c, c)
    fast, twin = _both(inputs[:4], prologue_activation="Relu6")
    np.testing.assert_array_equal(fast, twin)


def test_nan_propagates_like_the_twin():
    inputs = _case((1, 4, 4, 8), 8, (), seed=2)
    inputs[0][0, 1, 2, 3] = np.nan
    c = 8
    inputs[3] = np.eye(c, dtype=np.float32).reshape(1, 1, c, c)
    for activation in ("Relu", "Relu6"):
        fast, twin = _both(inputs, prologue_activation=activation)
        np.testing.assert_array_equal(fast, twin)
        assert np.isnan(fast[0, 1, 2, 3])


def test_views_read_only_inputs_and_other_dtypes():
    inputs = _case((2, 6, 12, 8), 5, ("BiasAdd",), seed=3)
    inputs[0] = inputs[0][:, :, ::2]
    for a in inputs[1:]:
        a.setflags(write=False)
    assert_agree(*_both(inputs, prologue_activation="Relu", fused_ops=("BiasAdd",)))
    wide = [a.astype(np.float64) for a in inputs]
    got = preactivation.preactivated_conv2d(np, *wide, prologue_activation="Relu", fused_ops=("BiasAdd",),
                                            compiled=True)[0]
    assert got.dtype == np.float64


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda ins: ins.__setitem__(3, np.zeros((3, 3, 12, 10), np.float32)), "1x1 filter"),
        (lambda ins: ins.__setitem__(1, ins[1][:5]), "per-channel"),
        (lambda ins: ins.append(ins[-1]), "extra inputs"),
    ],
)
def test_bad_inputs_raise(change, message):
    inputs = _case((2, 7, 9, 12), 10, ("BiasAdd",))
    change(inputs)
    with pytest.raises(ValueError, match=message):
        preactivation.preactivated_conv2d(np, *inputs, prologue_activation="Relu", fused_ops=("BiasAdd",),
                                          compiled=True)
