"""MaxPool, MaxPoolV2 and AvgPool against a naive loop reference and TensorFlow values."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import from_format, to_format


def naive_pool(x, k, stride, padding, reduce, explicit=((0, 0), (0, 0))):
    """NHWC reference: each window's max or mean over its real (non-padding) cells, by plain loops."""
    pads = []
    for a in (0, 1):
        size = x.shape[1 + a]
        if padding == "SAME":
            out = -(-size // stride[a])
            total = max((out - 1) * stride[a] + k[a] - size, 0)
            pads.append((total // 2, total - total // 2))
        else:
            pads.append((0, 0) if padding == "VALID" else explicit[a])
    oh = (x.shape[1] + sum(pads[0]) - k[0]) // stride[0] + 1
    ow = (x.shape[2] + sum(pads[1]) - k[1]) // stride[1] + 1
    y = np.zeros((x.shape[0], oh, ow, x.shape[3]), np.float64)
    for r in range(oh):
        for c in range(ow):
            r0, c0 = r * stride[0] - pads[0][0], c * stride[1] - pads[1][0]
            window = x[:, max(r0, 0) : max(r0 + k[0], 0), max(c0, 0) : max(c0 + k[1], 0)]
            y[:, r, c] = window.max(axis=(1, 2)) if reduce == "max" else window.mean(axis=(1, 2), dtype=np.float64)
    return y.astype(x.dtype)


# (input HW, ksize HW, strides HW, padding, explicit pads)
GEOMETRIES = [
    ((5, 7), (3, 3), (1, 1), "SAME", None),
    ((6, 6), (3, 3), (2, 2), "SAME", None),
    ((7, 8), (3, 2), (2, 2), "SAME", None),
    ((9, 10), (3, 3), (2, 3), "VALID", None),
    ((8, 8), (2, 2), (2, 2), "VALID", None),
    ((7, 7), (7, 7), (1, 1), "VALID", None),
    ((5, 5), (3, 3), (2, 2), "SAME", None),
    ((11, 9), (5, 4), (3, 1), "VALID", None),
    ((4, 4), (5, 5), (1, 1), "SAME", None),
    ((6, 5), (3, 3), (1, 1), "EXPLICIT", ((1, 1), (2, 0))),
    ((6, 5), (3, 3), (2, 2), "EXPLICIT", ((0, 2), (1, 1))),
]


def _attrs(k, strides, padding, explicit, data_format):
    explicit = explicit or ((0, 0), (0, 0))
    if data_format == "NHWC":
        attrs = dict(ksize=(1, *k, 1), strides=(1, *strides, 1))
        pads = (0, 0, *explicit[0], *explicit[1], 0, 0)
    else:
        attrs = dict(ksize=(1, 1, *k), strides=(1, 1, *strides))
        pads = (0, 0, 0, 0, *explicit[0], *explicit[1])
    attrs.update(padding=padding, data_format=data_format)
    if padding == "EXPLICIT":
        attrs["explicit_paddings"] = pads
    return attrs


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("hw,k,strides,padding,explicit", GEOMETRIES)
def test_max_pool_matches_naive_loops(run_kernel, hw, k, strides, padding, explicit, data_format):
    x = np.random.default_rng(0).standard_normal((2, *hw, 3), dtype=np.float32) - 5  # all negative: padding must not win
    (y,) = run_kernel("MaxPool", to_format(data_format, x), **_attrs(k, strides, padding, explicit, data_format))
    np.testing.assert_array_equal(from_format(data_format, y), naive_pool(x, k, strides, padding, "max", explicit or ((0, 0), (0, 0))))


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("hw,k,strides,padding,explicit", [g for g in GEOMETRIES if g[3] != "EXPLICIT"])
def test_avg_pool_matches_naive_loops(run_kernel, hw, k, strides, padding, explicit, data_format):
    x = np.random.default_rng(1).standard_normal((2, *hw, 3), dtype=np.float32)
    (y,) = run_kernel("AvgPool", to_format(data_format, x), **_attrs(k, strides, padding, explicit, data_format))
    np.testing.assert_allclose(from_format(data_format, y), naive_pool(x, k, strides, padding, "mean"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hw,k,strides,padding,explicit", [g for g in GEOMETRIES if g[3] != "EXPLICIT"])
def test_max_pool_v2_takes_ksize_and_strides_as_tensors(run_kernel, hw, k, strides, padding, explicit):
    x = np.random.default_rng(2).standard_normal((2, *hw, 3), dtype=np.float32)
    ksize, stride = np.array((1, *k, 1), np.int32), np.array((1, *strides, 1), np.int32)
    (y,) = run_kernel("MaxPoolV2", x, ksize, stride, padding=padding)
    np.testing.assert_array_equal(y, naive_pool(x, k, strides, padding, "max"))


RAMP = np.arange(1, 17, dtype=np.float32).reshape(1, 4, 4, 1)

# Outputs of TensorFlow 2.21, hard-coded: AvgPool's border windows divide by their real cells only.
TF_CASES = [
    ("MaxPool", dict(ksize=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME"), [11, 12, 15, 16]),
    ("AvgPool", dict(ksize=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME"), [6, 7.5, 12, 13.5]),
    (
        "AvgPool",
        dict(ksize=(1, 3, 3, 1), strides=(1, 1, 1, 1), padding="SAME"),
        [3.5, 4, 5, 5.5, 5.5, 6, 7, 7.5, 9.5, 10, 11, 11.5, 11.5, 12, 13, 13.5],
    ),
]


@pytest.mark.parametrize("op,attrs,want", TF_CASES)
def test_matches_tensorflow_values(run_kernel, op, attrs, want):
    (y,) = run_kernel(op, RAMP, **attrs)
    np.testing.assert_array_equal(y.reshape(-1), np.array(want, np.float32))


def test_max_pool_keeps_integer_dtype(run_kernel):
    x = np.array([-7, -3, -9, -1, -5, -2, -8, -4, -6], np.int32).reshape(1, 3, 3, 1)
    (y,) = run_kernel("MaxPool", x, ksize=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="SAME")
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.reshape(-1), [-1, -2, -4, -6])


def test_large_batch_split_across_chunks(run_kernel):
    x = np.random.default_rng(3).standard_normal((6, 64, 64, 32), dtype=np.float32)
    (y,) = run_kernel("MaxPool", x, ksize=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME")
    np.testing.assert_array_equal(y, naive_pool(x, (3, 3), (2, 2), "SAME", "max"))


# --- the compiled pass (kernels.nn.pooling._pool_rows) held to its numpy twin ---------------------------------


def _compiled_and_twin(op, x, **attrs):
    from kernels.nn import pooling

    fn = {"MaxPool": pooling.max_pool, "AvgPool": pooling.avg_pool}[op]
    return fn(np, x, **attrs, compiled=True)[0], fn(np, x, **attrs, compiled=False)[0]


needs_numba = pytest.mark.skipif(not __import__("kernels.jit").jit.AVAILABLE, reason="needs numba")


@needs_numba
@pytest.mark.parametrize("op,hw,k,strides,padding,explicit",
                         [("MaxPool", *g) for g in GEOMETRIES] + [("AvgPool", *g) for g in GEOMETRIES if g[3] != "EXPLICIT"])
def test_compiled_pass_equals_twin(op, hw, k, strides, padding, explicit):
    x = np.random.default_rng(4).standard_normal((3, *hw, 13), dtype=np.float32)
    got, twin = _compiled_and_twin(op, x, **_attrs(k, strides, padding, explicit, "NHWC"))
    assert got.dtype == twin.dtype == np.float32 and got.shape == twin.shape
    np.testing.assert_array_equal(got, twin)
    want = naive_pool(x, k, strides, padding, "max" if op == "MaxPool" else "mean", explicit or ((0, 0), (0, 0)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@needs_numba
def test_compiled_max_lets_nan_win_and_ignores_padding():
    x = np.full((1, 4, 4, 2), -np.inf, np.float32)
    x[0, 1, 1, 0] = np.nan
    x[0, 3, 3, 1] = -3.0
    got, twin = _compiled_and_twin("MaxPool", x, ksize=(1, 2, 2, 1), strides=(1, 2, 2, 1), padding="SAME")
    np.testing.assert_array_equal(got, twin)
    assert np.isnan(got[0, 0, 0, 0]) and not np.isnan(got[0, 0, 1, 0])
    assert got[0, 1, 1, 1] == -3.0 and got[0, 0, 0, 1] == -np.inf


@needs_numba
def test_compiled_pass_splits_large_batches_and_reads_views():
    x = np.random.default_rng(5).standard_normal((5, 40, 33, 24), dtype=np.float32)
    view = x[:, :, 1:]  # not contiguous: the kernel copies it
    for op in ("MaxPool", "AvgPool"):
        got, twin = _compiled_and_twin(op, view, ksize=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME")
        np.testing.assert_array_equal(got, twin)


@needs_numba
def test_compiled_flag_leaves_other_dtypes_and_nchw_to_the_twin():
    from kernels.nn import pooling

    x = np.random.default_rng(6).standard_normal((2, 3, 6, 6))
    for data_format, dtype in (("NCHW", np.float32), ("NHWC", np.float64)):
        xs = x.astype(dtype)
        attrs = _attrs((3, 3), (2, 2), "SAME", None, data_format)
        got = pooling.avg_pool(np, xs, **attrs, compiled=True)[0]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, pooling.avg_pool(np, xs, **attrs, compiled=False)[0])
