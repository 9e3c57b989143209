"""TF Text's whitespace tokenizers beyond the golden fixtures (tests/fixtures/ops/text/unicode/whitespace/):
outputs read off TF Text 2.21.1 (V2's multi-byte-space quirk, configs, the first version's code-point
offsets), and the inputs both refuse."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.text.whitespace import WHITE_SPACE_CONFIG


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def config(*code_points: int) -> np.ndarray:
    bits = bytearray((max(code_points) >> 3) + 1 if code_points else 0)
    for cp in code_points:
        bits[cp >> 3] |= 1 << (cp & 7)
    return np.array(bytes(bits), dtype=object)


def v2(run_kernel, texts, cfg=None) -> list[list]:
    cfg = np.array(WHITE_SPACE_CONFIG, dtype=object) if cfg is None else cfg
    outs = run_kernel("TFText>WhitespaceTokenizeWithOffsetsV2", texts, cfg)
    assert [o.dtype for o in outs] == [np.dtype(object), np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.int32)]
    return [o.tolist() for o in outs]


def test_v2_leaves_the_first_bytes_of_a_multibyte_space_in_the_token(run_kernel):
    # TF Text ends a token at (the position after the space) - 1.
    assert v2(run_kernel, strings("a\u3000b c\u00a0", "", b"x\xc2\xa0y\xff z")) == [
        [b"a\xe3\x80", b"b", b"c\xc2", b"x\xc2", b"y\xff", b"z"], [0, 3, 3, 6], [0, 4, 6, 0, 3, 6], [3, 5, 8, 2, 5, 7]]


def test_v2_config_is_a_bitset(run_kernel):
    # Only code point 32 marked (byte 4, bit 0): tabs are text.
    assert v2(run_kernel, strings("a b\tc"), config(32)) == [[b"a", b"b\tc"], [0, 2], [0, 2], [1, 5]]
    assert v2(run_kernel, strings("a b", "", "  "), config()) == [[b"a b", b"  "], [0, 1, 1, 2], [0, 0], [3, 2]]
    # 'é' (2 bytes) as a space: the token before it keeps its first byte.
    assert v2(run_kernel, strings("caféx"), config(0xE9)) == [[b"caf\xc3", b"x"], [0, 2], [0, 5], [4, 6]]


def test_v2_refuses_other_ranks(run_kernel):
    # NOTE: TF Text reads the first dim-0 elements of a matrix as if it were a vector; that drops text silently.
    with pytest.raises(ValueError, match=r"input_values must be a vector of strings, got shape \[1,1\]"):
        v2(run_kernel, strings("a b").reshape(1, 1))
    with pytest.raises(ValueError, match=r"input_config must be a scalar string, got shape \[1\]"):
        v2(run_kernel, strings("a b"), np.array([b" "], dtype=object))


def test_v1_counts_code_points(run_kernel):
    values = np.array([32, 97, 98, 32, 32, 99, 0x3000, 100, 32], np.int32)
    outs = run_kernel("WhitespaceTokenizeWithOffsets", values, np.array([0, 5, 5, 9], np.int64))
    assert [o.tolist() for o in outs] == [[97, 98, 99, 100], [0, 2, 3, 4], [1, 0, 2], [3, 1, 3], [0, 1, 1, 3]]
    assert [o.dtype for o in outs] == [np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.int64),
                                       np.dtype(np.int64), np.dtype(np.int64)]


def test_v1_splits_dtype_and_odd_values(run_kernel):
    values = np.array([-1, 0x110000, 0x85, 7], np.int32)  # not code points: not whitespace either
    outs = run_kernel("WhitespaceTokenizeWithOffsets", values, np.array([0, 4], np.int32))
    assert [o.tolist() for o in outs] == [[-1, 0x110000, 7], [0, 2, 3], [0, 3], [2, 4], [0, 2]]
    assert outs[1].dtype == outs[4].dtype == np.int32


def test_v1_empty_inputs(run_kernel):
    # NOTE: TF Text 2.21.1 crashes (a segfault) whenever no token comes out; here the outputs are empty.
    outs = run_kernel("WhitespaceTokenizeWithOffsets", np.zeros(0, np.int32), np.zeros(0, np.int64))
    assert [o.tolist() for o in outs] == [[], [0], [], [], []]
    outs = run_kernel("WhitespaceTokenizeWithOffsets", np.array([32], np.int32), np.array([0, 0, 1], np.int64))
    assert [o.tolist() for o in outs] == [[], [0], [], [], [0, 0, 0]]


def test_v1_checks_splits(run_kernel):
    with pytest.raises(ValueError, match="non-decreasing and within the 2 input values"):
        run_kernel("WhitespaceTokenizeWithOffsets", np.array([97, 98], np.int32), np.array([0, 3], np.int64))
