"""_FusedConv2D (grouped too), _FusedDepthwiseConv2dNative and _FusedMatMul equal the unfused ops they replace,
run in turn."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kernels
from kernels.registry import AttrBindError
from tests.kernels.checks import to_format

ACTIVATIONS = ["Relu", "Relu6", "Elu", "LeakyRelu"]
CONV_FUSED_OPS = (
    [("BiasAdd",)]
    + [("BiasAdd", a) for a in ACTIVATIONS]
    + [("BiasAdd", "Add"), ("BiasAdd", "Add", "Relu")]
    + [("FusedBatchNorm",)]
    + [("FusedBatchNorm", a) for a in ACTIVATIONS]
)
DEPTHWISE_FUSED_OPS = [("BiasAdd",)] + [("BiasAdd", a) for a in ACTIVATIONS]
MATMUL_FUSED_OPS = [("BiasAdd",)] + [
    ("BiasAdd", a) for a in ACTIVATIONS + ["Tanh", "Sigmoid", "GeluExact", "GeluApproximate"]
]
# (input HW, kernel HW, strides HW, padding)
GEOMETRIES = [
    ((7, 9), (3, 3), (1, 1), "SAME"),
    ((8, 7), (3, 3), (2, 2), "SAME"),
    ((9, 8), (3, 2), (2, 2), "VALID"),
    ((6, 6), (1, 1), (1, 1), "VALID"),
    ((7, 7), (1, 1), (2, 2), "SAME"),
]
TOL = dict(rtol=1e-5, atol=1e-5)


def _conv_attrs(strides, padding, data_format):
    s = (1, *strides, 1) if data_format == "NHWC" else (1, 1, *strides)
    return dict(strides=s, padding=padding, data_format=data_format)


def _then(run_kernel, y, fused_ops, args, data_format, epsilon=0.0001, alpha=0.2):
    """The unfused ops of `fused_ops`, applied in turn to y with the fused node's extra inputs."""
    for step in fused_ops:
        if step == "BiasAdd":
            (y,) = run_kernel("BiasAdd", y, args[0], data_format=data_format)
        elif step == "Add":
            (y,) = run_kernel("AddV2", y, args[1])
        elif step == "FusedBatchNorm":
            y = run_kernel("FusedBatchNormV3", y, *args, epsilon=epsilon, data_format=data_format, is_training=False)[0]
        elif step == "LeakyRelu":
            (y,) = run_kernel("LeakyRelu", y, alpha=alpha)
        elif step == "GeluExact":
            (erf,) = run_kernel("Erf", y * np.float32(1 / math.sqrt(2)))
            y = np.float32(0.5) * y * (np.float32(1) + erf)
        elif step == "GeluApproximate":
            inner = np.float32(math.sqrt(2 / math.pi)) * (y + np.float32(0.044715) * y * y * y)
            (t,) = run_kernel("Tanh", inner)
            y = np.float32(0.5) * y * (np.float32(1) + t)
        else:
            (y,) = run_kernel(step, y)
    return y


def _args(rng, fused_ops, channels, out_shape):
    if fused_ops[0] == "FusedBatchNorm":
        return [
            rng.uniform(0.5, 1.5, channels).astype(np.float32),
            rng.standard_normal(channels).astype(np.float32),
            rng.standard_normal(channels).astype(np.float32),
            rng.uniform(0.1, 2.0, channels).astype(np.float32),
        ]
    args = [rng.standard_normal(channels).astype(np.float32)]
    if "Add" in fused_ops:
        args.append(rng.standard_normal(out_shape).astype(np.float32))
    return args


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("hw, k, strides, padding", GEOMETRIES)
@pytest.mark.parametrize("fused_ops", CONV_FUSED_OPS, ids="-".join)
def test_fused_conv2d_equals_conv2d_then_its_ops(run_kernel, fused_ops, hw, k, strides, padding, data_format):
    rng = np.random.default_rng(0)
    x = to_format(data_format, rng.standard_normal((2, *hw, 3)).astype(np.float32))
    w = rng.standard_normal((*k, 3, 5)).astype(np.float32)
    attrs = _conv_attrs(strides, padding, data_format)
    (plain,) = run_kernel("Conv2D", x, w, **attrs)
    args = _args(rng, fused_ops, 5, plain.shape)
    want = _then(run_kernel, plain, fused_ops, args, data_format, epsilon=0.001, alpha=0.3)
    x0, w0, args0 = x.copy(), w.copy(), [a.copy() for a in args]
    (y,) = run_kernel(
        "_FusedConv2D", x, w, *args, **attrs, fused_ops=fused_ops, num_args=len(args), epsilon=0.001, leakyrelu_alpha=0.3
    )
    np.testing.assert_allclose(y, want, **TOL)
    assert y.dtype == np.float32
    for before, after in zip([x0, w0, *args0], [x, w, *args]):
        np.testing.assert_array_equal(before, after)  # inputs are never modified


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("groups, depth, per_group", [(2, 3, 2), (2, 24, 3), (4, 1, 1), (3, 1, 2)], ids=str)
@pytest.mark.parametrize("hw, k, strides, padding", GEOMETRIES)
@pytest.mark.parametrize("fused_ops", CONV_FUSED_OPS, ids="-".join)
def test_fused_grouped_conv2d_equals_grouped_conv2d_then_its_ops(
    run_kernel, fused_ops, hw, k, strides, padding, groups, depth, per_group, data_format
):
    # A grouped convolution (input deeper than the filter), also with one input channel per group (depthwise).
    rng = np.random.default_rng(4)
    x = to_format(data_format, rng.standard_normal((2, *hw, groups * depth)).astype(np.float32))
    w = (rng.standard_normal((*k, depth, groups * per_group)) / np.sqrt(k[0] * k[1] * depth)).astype(np.float32)
    attrs = _conv_attrs(strides, padding, data_format)
    (plain,) = run_kernel("Conv2D", x, w, **attrs)
    args = _args(rng, fused_ops, groups * per_group, plain.shape)
    want = _then(run_kernel, plain, fused_ops, args, data_format, epsilon=0.001, alpha=0.3)
    (y,) = run_kernel(
        "_FusedConv2D", x, w, *args, **attrs, fused_ops=fused_ops, num_args=len(args), epsilon=0.001, leakyrelu_alpha=0.3
    )
    np.testing.assert_allclose(y, want, **TOL)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("hw, k, strides, padding", GEOMETRIES)
@pytest.mark.parametrize("fused_ops", DEPTHWISE_FUSED_OPS, ids="-".join)
def test_fused_depthwise_equals_depthwise_then_its_ops(
    run_kernel, fused_ops, hw, k, strides, padding, multiplier, data_format
):
    rng = np.random.default_rng(1)
    x = to_format(data_format, rng.standard_normal((2, *hw, 4)).astype(np.float32))
    w = rng.standard_normal((*k, 4, multiplier)).astype(np.float32)
    attrs = _conv_attrs(strides, padding, data_format)
    (plain,) = run_kernel("DepthwiseConv2dNative", x, w, **attrs)
    args = _args(rng, fused_ops, 4 * multiplier, plain.shape)
    want = _then(run_kernel, plain, fused_ops, args, data_format)
    (y,) = run_kernel("_FusedDepthwiseConv2dNative", x, w, *args, **attrs, fused_ops=fused_ops, num_args=len(args))
    np.testing.assert_allclose(y, want, **TOL)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("fused_ops", MATMUL_FUSED_OPS, ids="-".join)
def test_fused_mat_mul_equals_mat_mul_then_its_ops(run_kernel, fused_ops, transpose_a, transpose_b):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 7) if transpose_a else (7, 6)).astype(np.float32) * 2
    b = rng.standard_normal((5, 6) if transpose_b else (6, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    (plain,) = run_kernel("MatMul", a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    want = _then(run_kernel, plain, fused_ops, [bias], "NHWC")
    (y,) = run_kernel(
        "_FusedMatMul", a, b, bias, transpose_a=transpose_a, transpose_b=transpose_b, fused_ops=fused_ops, num_args=1
    )
    np.testing.assert_allclose(y, want, **TOL)


def test_large_fused_conv_runs_its_epilogue_on_every_chunk(run_kernel):
    # Big enough that the convolution is split into several chunks (and a 1x1 into several GEMMs).
    rng = np.random.default_rng(3)
    bias = rng.standard_normal(16).astype(np.float32)
    # Plain, then grouped: four groups of 24 channels (grouped GEMMs), sixteen groups of two (block-diagonal).
    for x_depth, k, depth in [(32, (3, 3), 32), (32, (1, 1), 32), (96, (3, 3), 24), (96, (1, 1), 24), (32, (3, 3), 2)]:
        x = rng.standard_normal((3, 64, 64, x_depth)).astype(np.float32)
        w = rng.standard_normal((*k, depth, 16)).astype(np.float32) * 0.1
        attrs = _conv_attrs((1, 1), "SAME", "NHWC")
        (plain,) = run_kernel("Conv2D", x, w, **attrs)
        want = _then(run_kernel, plain, ("BiasAdd", "Relu6"), [bias], "NHWC")
        (y,) = run_kernel("_FusedConv2D", x, w, bias, **attrs, fused_ops=("BiasAdd", "Relu6"), num_args=1)
        np.testing.assert_allclose(y, want, **TOL)


@pytest.mark.parametrize(
    "op, fused_ops",
    [
        ("_FusedConv2D", ("BiasAdd", "Tanh")),
        ("_FusedConv2D", ("Relu",)),
        ("_FusedConv2D", ("BiasAdd", "Relu", "Relu")),
        ("_FusedDepthwiseConv2dNative", ("FusedBatchNorm",)),
        ("_FusedMatMul", ("BiasAdd", "Add")),
        ("_FusedMatMul", ()),
    ],
)
def test_unsupported_fused_ops_are_rejected_when_binding(op, fused_ops):
    attrs = dict(fused_ops=fused_ops, num_args=1)
    if op != "_FusedMatMul":
        attrs.update(strides=(1, 1, 1, 1), padding="SAME")
    with pytest.raises(AttrBindError, match="fused_ops"):
        kernels.lookup(op, "cpu").bind(np, attrs)


def test_wrong_number_of_extra_inputs_is_an_error(run_kernel):
    x = np.ones((1, 4, 4, 2), np.float32)
    w = np.ones((3, 3, 2, 3), np.float32)
    with pytest.raises(ValueError, match="extra inputs"):
        run_kernel("_FusedConv2D", x, w, np.ones(3, np.float32), strides=(1, 1, 1, 1), padding="SAME",
                   fused_ops=("BiasAdd", "Add"), num_args=1)
