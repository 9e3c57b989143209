"""UnicodeScriptTokenizeWithOffsets (TF Text) beyond the golden fixtures (tests/fixtures/ops/text/unicode/script/):
outputs read off TF Text 2.21.1. UnicodeScript's own tests are in tests/kernels/strings/test_unicode_script.py."""

from __future__ import annotations

import numpy as np
import pytest

# ",  ,a" then values that are not code points, then Hiragana and two spaces.
VALUES = np.array([44, 32, 44, 97, -1, -1, 0x3042, 32, 32], np.int32)


def test_spaces_inside_a_common_token(run_kernel):
    outs = run_kernel("UnicodeScriptTokenizeWithOffsets", VALUES, np.array([0, 9], np.int64))
    # The first token is ", ," less its space: its values drop the space, its limit does not.
    assert [o.tolist() for o in outs] == [[44, 44, 97, -1, -1, 12354], [0, 2, 3, 5, 6], [0, 3, 4, 6], [3, 4, 6, 7],
                                          [0, 4]]


def test_keep_whitespace(run_kernel):
    outs = run_kernel("UnicodeScriptTokenizeWithOffsets", VALUES, np.array([0, 9], np.int32), keep_whitespace=True)
    assert [o.tolist() for o in outs] == [[44, 32, 44, 97, -1, -1, 12354, 32, 32], [0, 1, 2, 3, 4, 6, 7, 9],
                                          [0, 1, 2, 3, 4, 6, 7], [1, 2, 3, 4, 6, 7, 9], [0, 7]]
    assert outs[1].dtype == outs[4].dtype == np.int32


def test_rows_and_empty_inputs(run_kernel):
    outs = run_kernel("UnicodeScriptTokenizeWithOffsets", np.array([97, 0x3042], np.int32), np.array([0, 0, 2, 2]))
    assert [o.tolist() for o in outs] == [[97, 0x3042], [0, 1, 2], [0, 1], [1, 2], [0, 0, 2, 2]]
    outs = run_kernel("UnicodeScriptTokenizeWithOffsets", np.zeros(0, np.int32), np.zeros(0, np.int64))
    assert [o.tolist() for o in outs] == [[], [0], [], [], []]
    with pytest.raises(ValueError, match="non-decreasing"):
        run_kernel("UnicodeScriptTokenizeWithOffsets", np.array([97], np.int32), np.array([0, 2]))

