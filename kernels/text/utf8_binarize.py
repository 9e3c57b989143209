"""The kernel of TF Text's TFText>Utf8Binarize (text.utf8_binarize, RetVec's input encoding): the first
`word_length` characters of each string, each as its code point's `bits_per_char` lowest bits, least
significant first, as floats 0.0 and 1.0; characters that are not UTF-8 (each ill-formed sequence, as ICU's
U8_NEXT reads it) take `replacement_char`'s bits, and a string with fewer characters is padded with zeros.
TF Text shifts a 32-bit int, so bits past the 31st repeat the sign bit.

    >>> utf8_binarize(np, np.array([b"hi"], dtype=object), word_length=3, bits_per_char=4,
    ...               replacement_char=65533)[0].tolist()
    [[0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.limits import check_bytes
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings
from kernels.text.bert_chars import utf8_steps

__all__ = ["utf8_binarize"]


def _int32(value: int) -> int:
    return (int(value) + 2**31) % 2**32 - 2**31


@kernel("TFText>Utf8Binarize", devices=("cpu",))
def utf8_binarize(xp: Any, input_tokens: Any, *, word_length: int, bits_per_char: int, replacement_char: int,
                  memory_limit: int | None = None) -> tuple:
    """A [tokens, word_length * bits_per_char] float32 matrix of the tokens' code point bits."""
    if np.ndim(input_tokens) != 1:
        raise ValueError(f"Shape must be rank 1: {format_dims(np.shape(input_tokens))}")
    word_length, bits_per_char = _int32(word_length), _int32(bits_per_char)
    if word_length < 0 or bits_per_char < 0:
        raise ValueError(f"word_length ({word_length}) and bits_per_char ({bits_per_char}) must not be negative")
    tokens = flat_strings(input_tokens)
    shape = (len(tokens), word_length * bits_per_char)
    check_bytes(4 * shape[0] * shape[1], memory_limit, "Utf8Binarize output", shape)
    codes = np.zeros((len(tokens), word_length), dtype=np.int64)
    filled = np.zeros((len(tokens), word_length), dtype=bool)
    replacement = _int32(replacement_char)
    for row, token in enumerate(tokens):
        chars = [cp if cp >= 0 else replacement for _, _, cp in utf8_steps(token[:4 * word_length])][:word_length]
        codes[row, :len(chars)] = chars
        filled[row, :len(chars)] = True
    shifts = np.minimum(np.arange(bits_per_char), 31)  # a 32-bit int shifted right keeps its sign bit
    bits = (codes[:, :, None] >> shifts) & 1
    bits = np.where(filled[:, :, None], bits, 0).astype(np.float32)
    return (bits.reshape(shape),)
