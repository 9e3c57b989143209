"""Fingerprint (farmhash64) against bytes read off TensorFlow 2.21: strings, rows of strings, numbers as their
bytes, and TensorFlow's errors. tests/fixtures/ops/strings/fingerprint holds more."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.strings.hash_functions import fingerprint64

METHOD = np.array(b"farmhash64", dtype=object)


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


CASES = [
    pytest.param(strings("", "a", "hello"), [[79, 64, 144, 47, 59, 106, 225, 154],
                                            [227, 117, 223, 182, 101, 66, 69, 179],
                                            [232, 12, 56, 49, 169, 229, 139, 180]], id="strings"),
    pytest.param(strings("a", "b", "c", "d").reshape(2, 2), [[122, 64, 59, 169, 136, 60, 55, 83],
                                                              [52, 252, 224, 38, 64, 226, 155, 60]], id="string-rows"),
    pytest.param(np.array([[1, 2], [3, 4]], np.int32), [[76, 18, 253, 133, 168, 204, 240, 10],
                                                         [254, 162, 60, 240, 103, 244, 53, 255]], id="int32-rows"),
    pytest.param(np.array([1.5, -0.0], np.float32), [[64, 181, 56, 72, 223, 224, 189, 72],
                                                      [110, 213, 249, 81, 122, 252, 163, 243]], id="float32"),
    pytest.param(np.array([[True, False]]), [[236, 208, 118, 51, 144, 142, 61, 0]], id="bool"),
    pytest.param(np.array([1 + 2j], np.complex64), [[223, 178, 164, 36, 10, 49, 237, 154]], id="complex64"),
]


@pytest.mark.parametrize("data, expected", CASES)
def test_fingerprint(run_kernel, data, expected):
    (out,) = run_kernel("Fingerprint", data, METHOD)
    assert out.dtype == np.uint8 and out.tolist() == expected


def test_a_string_row_is_its_farmhash_little_endian(run_kernel):
    (out,) = run_kernel("Fingerprint", strings("tensorgate"), METHOD)
    assert out[0].tobytes() == fingerprint64(b"tensorgate").to_bytes(8, "little")


def test_empty_inputs(run_kernel):
    assert run_kernel("Fingerprint", np.zeros([0, 3], np.float32), METHOD)[0].shape == (0, 8)
    (out,) = run_kernel("Fingerprint", np.zeros([3, 0], np.int32), METHOD)
    assert out.tolist() == [[79, 64, 144, 47, 59, 106, 225, 154]] * 3  # the fingerprint of no bytes


ERRORS = [
    pytest.param(np.array([1], np.int32), np.array(b"md5", dtype=object), "Unsupported fingerprint method: md5",
                 id="method"),
    pytest.param(np.array([1], np.int32), strings("farmhash64"), r"`method` should be a scalar string: \[1\]",
                 id="method-vector"),
    pytest.param(np.int32(1), METHOD, r"`data` should have at least one dimension: \[\]", id="scalar-data"),
]


@pytest.mark.parametrize("data, method, message", ERRORS)
def test_errors(run_kernel, data, method, message):
    with pytest.raises(ValueError, match=message):
        run_kernel("Fingerprint", data, method)
