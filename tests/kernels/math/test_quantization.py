"""Fake-quantization kernels: FakeQuantWithMinMaxArgs/Vars/VarsPerChannel and QuantizeAndDequantizeV2-V4.

Expected values were checked against TensorFlow 2.21's raw ops (bit for bit); the golden fixtures under
ops/array_sweep/quantization/ cover many more values.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32

X = f32([-1, 0, 0.3, 0.5, 2])

CASES = [
    # [0.2, 1] nudges to [0, 0.8]: the zero point must be a grid point.
    pytest.param("FakeQuantWithMinMaxVars", [X, np.float32(0.2), np.float32(1)], {},
                 [f32([0, 0, 0.30117646, 0.49882352, 0.8])], id="vars-nudged"),
    # A reversed range is not refused: TensorFlow computes with it.
    pytest.param("FakeQuantWithMinMaxVars", [X, np.float32(1), np.float32(0)], {}, [f32([1, 1, 1, 1, 1])],
                 id="vars-reversed"),
    pytest.param("FakeQuantWithMinMaxVars", [X, np.float32(0), np.float32(0)], {}, [np.zeros(5, np.float32)],
                 id="vars-zero-range"),
    pytest.param("FakeQuantWithMinMaxArgs", [f32([-7, -6, -0.01, 0.024, 6, 7])], {},
                 [f32([-6.0235295, -5.9764705, 0, 0.04705882, 5.9764705, 5.9764705])], id="args-defaults"),
    pytest.param("FakeQuantWithMinMaxVarsPerChannel", [f32([[-1, 2], [0.5, -3]]), f32([-1, 0]), f32([1, 0])], {},
                 [f32([[-0.9960785, 0], [0.5019608, 0]])], id="per-channel"),
    pytest.param("QuantizeAndDequantizeV2", [f32([-20, -10.5, 10.5, 11.5, 127]) / 2, np.float32(-63.5),
                                             np.float32(63.5)],
                 {"range_given": True}, [f32([-10, -5, 5, 6, 63.5])], id="qdq-half-to-even"),
    pytest.param("QuantizeAndDequantizeV2", [f32([-20, -10.5, 10.5, 11.5, 127]) / 2, np.float32(-63.5),
                                             np.float32(63.5)],
                 {"range_given": True, "round_mode": "HALF_UP"}, [f32([-10, -5, 5.5, 6, 63.5])], id="qdq-half-up"),
    pytest.param("QuantizeAndDequantizeV4", [f32([0.5, 1, 3]), np.float32(0), np.float32(0)], {},
                 [f32([0.496063, 0.992126, 3])], id="qdq-measured-range"),
    pytest.param("QuantizeAndDequantizeV3", [f32([[1, -2], [3, 4]]), f32([-1, -4]), f32([1, 4]), np.int32(3)],
                 {"axis": 1}, [f32([[1, -2.6666667], [1, 4]])], id="qdq-v3-per-channel"),
    pytest.param("QuantizeAndDequantizeV2", [np.zeros((2, 0), np.float32), np.float32(0), np.float32(0)], {"axis": 1},
                 [np.zeros((2, 0), np.float32)], id="qdq-empty"),
]

ERRORS = [
    pytest.param("FakeQuantWithMinMaxArgs", [X], {"min": 0.0, "max": 0.0}, ValueError, "min has to be smaller than max",
                 id="args-empty-range"),
    pytest.param("FakeQuantWithMinMaxArgs", [X], {"num_bits": 17}, ValueError, "between 2 and 16", id="args-bits"),
    pytest.param("FakeQuantWithMinMaxVarsPerChannel", [f32([[1, 2]]), f32([0]), f32([1])], {}, ValueError,
                 "incorrect size", id="per-channel-size"),
    pytest.param("FakeQuantWithMinMaxArgs", [X.astype(np.float64)], {}, TypeError, "float32", id="args-double"),
    pytest.param("QuantizeAndDequantizeV2", [X, np.float32(1), np.float32(0)], {"range_given": True}, ValueError,
                 "Invalid range: input_min 1.0 > input_max 0.0", id="qdq-reversed-range"),
    pytest.param("QuantizeAndDequantizeV2", [X, np.float32(0), np.float32(1)], {"num_bits": 0}, ValueError,
                 "num_bits is out of range: 0", id="qdq-bits"),
    pytest.param("QuantizeAndDequantizeV3", [X, np.float32(0), np.float32(1), np.int32(70)], {}, ValueError,
                 "num_bits is out of range: 70", id="qdq-v3-bits"),
    pytest.param("QuantizeAndDequantizeV2", [X, np.float32(0), np.float32(1)], {"axis": -2}, ValueError,
                 "Axis must be at least -1", id="qdq-axis"),
    pytest.param("QuantizeAndDequantizeV2", [X, np.float32(0), np.float32(1)], {"axis": 1}, ValueError,
                 "at least rank 2 but is rank 1", id="qdq-axis-rank"),
    # TensorFlow 2.21's V2/V4 refuse a range given per channel whatever its shape; only V3 takes one.
    pytest.param("QuantizeAndDequantizeV2", [np.ones((2, 3), np.float32), f32([0, 0, 0]), f32([1, 1, 1])],
                 {"axis": 1, "range_given": True}, ValueError, "input_min must be a scalar", id="qdq-v2-per-channel-range"),
    pytest.param("QuantizeAndDequantizeV4", [np.ones((2, 3), np.float32), np.float32(0), np.float32(1)],
                 {"axis": 1, "range_given": True}, ValueError, "rank 1 for input_min_tensor", id="qdq-v4-scalar-range-axis"),
    pytest.param("QuantizeAndDequantizeV3", [np.ones((2, 3), np.float32), f32([0, 0]), f32([1, 1]), np.int32(8)],
                 {"axis": 1, "range_given": True}, ValueError, "incorrect size", id="qdq-v3-range-size"),
    pytest.param("QuantizeAndDequantizeV2", [X.astype(np.float16), np.float16(0), np.float16(1)], {}, TypeError,
                 "float and double", id="qdq-half"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_quantization_kernels(run_kernel, op, inputs, attrs, expected):
    outs = run_kernel(op, *inputs, **attrs)
    assert len(outs) == 1 and outs[0].dtype == expected[0].dtype
    np.testing.assert_allclose(outs[0], expected[0], rtol=2e-7, atol=0)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_quantization_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_fake_quant_lands_on_the_grid(run_kernel):
    """Every output is nudged_min + k * scale for an integer k in [0, 2^bits - 1]."""
    x = np.linspace(-7, 7, 301, dtype=np.float32)
    (y,) = run_kernel("FakeQuantWithMinMaxVars", x, np.float32(-3), np.float32(5), num_bits=4)
    scale = np.float32(8 / 15)
    steps = (y - y.min()) / scale
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-4)
    assert len(np.unique(y)) == 16


def test_v3_takes_num_bits_from_a_tensor(run_kernel):
    x = f32([-1, -0.4, 0.2, 1])
    (v3,) = run_kernel("QuantizeAndDequantizeV3", x, np.float32(-1), np.float32(1), np.int32(4))
    (v2,) = run_kernel("QuantizeAndDequantizeV2", x, np.float32(-1), np.float32(1), num_bits=4, range_given=True)
    assert_outputs((v3,), [v2])
