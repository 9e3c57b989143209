"""UnicodeScript (core TensorFlow) against outputs read off TensorFlow 2.21: ICU script codes, Unknown for
unassigned code points and surrogates, -1 for values that are not code points.
tests/fixtures/ops/text/unicode/script/unicode_script holds more."""

from __future__ import annotations

import numpy as np


def test_script_codes(run_kernel):
    values = np.array([0x41, 0x3042, 0x301, -1, 0x110000, 0x378, 0x10FFFF, 0xD800, 0x5D0, 0x20], np.int32)
    (out,) = run_kernel("UnicodeScript", values)
    assert out.dtype == np.int32
    assert out.tolist() == [25, 20, 1, -1, -1, 103, 103, 103, 19, 0]


def test_shapes(run_kernel):
    assert run_kernel("UnicodeScript", np.array([[0x41, 0x5D0], [0x3042, -5]], np.int32))[0].tolist() == \
        [[25, 19], [20, -1]]
    assert run_kernel("UnicodeScript", np.int32(0x391))[0].tolist() == 14  # Greek
    assert run_kernel("UnicodeScript", np.zeros((0, 3), np.int32))[0].shape == (0, 3)


def test_core_op_reads_unicode_13_data_as_tensorflow_does():
    """Core TensorFlow 2.21's ICU has Unicode 13 data: a character of Unicode 14 (U+1FAE0, melting face) is
    Unknown there, and U+16FE2 is still Common; TF Text's ICU 77 (script_codes) knows both."""
    import numpy as np

    from kernels.strings.unicode_script import script_codes, unicode_script

    code_points = np.array([0x1FAE0, 0x16FE2, 0x1F972, 0x41], np.int32)
    assert unicode_script(np, code_points)[0].tolist() == [103, 0, 0, 25]
    assert script_codes(code_points).tolist() == [0, 17, 0, 25]
