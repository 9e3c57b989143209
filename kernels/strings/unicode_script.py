"""The kernel of TensorFlow's UnicodeScript: each int32 code point's script as ICU's uscript_getScript gives it
(a UScriptCode: 0 Common, 1 Inherited, 25 Latin, 103 Unknown for unassigned code points, ...), -1 where
ICU refuses the value (negative or above U+10FFFF). The script is the Script property, not
Script_Extensions.

Script data: ICU 77.1 through pyicu-wheels, which is what TensorFlow Text 2.21 builds with (its tokenizers use
`script_codes`). Core TensorFlow 2.21's own ICU carries Unicode 13 data: for the core op, code points assigned
in Unicode 14 or later read Unknown (103), and U+16FE2/U+16FE3, which Unicode 14 moved from Common to Han,
read Common (0). With those two rules the kernel equals TensorFlow 2.21 on all 0x110000 code points (checked
against tf.strings.unicode_script over every one).

    >>> unicode_script(np, np.array([0x41, 0x3042, 0x301, -1], np.int32))[0].tolist()
    [25, 20, 1, -1]
"""

from __future__ import annotations

import functools
from typing import Any

import icu
import numpy as np

from kernels.registry import kernel

__all__ = ["script_code", "script_codes", "tensorflow_script_code", "unicode_script"]

_UNKNOWN, _COMMON = 103, 0
_TENSORFLOW_UNICODE_MAJOR = 13  # the Unicode version of core TensorFlow 2.21's ICU data
_COMMON_BEFORE_UNICODE_14 = frozenset({0x16FE2, 0x16FE3})


@functools.lru_cache(maxsize=4096)
def script_code(code_point: int) -> int:
    """uscript_getScript of one code point; USCRIPT_INVALID_CODE (-1) where ICU reports an error."""
    if not 0 <= code_point <= 0x10FFFF:
        return -1
    return icu.Script.getScript(code_point).getScriptCode()


@functools.lru_cache(maxsize=4096)
def tensorflow_script_code(code_point: int) -> int:
    """`script_code` as core TensorFlow's Unicode 13 data gives it."""
    if not 0 <= code_point <= 0x10FFFF:
        return -1
    if int(icu.Char.charAge(code_point).split(".")[0]) > _TENSORFLOW_UNICODE_MAJOR:
        return _UNKNOWN
    if code_point in _COMMON_BEFORE_UNICODE_14:
        return _COMMON
    return script_code(code_point)


def script_codes(code_points: Any, code=script_code) -> np.ndarray:
    """`code` (ICU 77's `script_code` by default) of each element of an integer array, as int32 of the same
    shape."""
    values = np.asarray(code_points)
    unique, inverse = np.unique(values, return_inverse=True)
    codes = np.array([code(int(v)) for v in unique.tolist()], dtype=np.int32)
    return codes[inverse].reshape(values.shape)


@kernel("UnicodeScript", devices=("cpu",))
def unicode_script(xp: Any, input: Any) -> tuple:
    """The ICU script code of each int32 code point (Unicode 13's, as TensorFlow's), -1 for values that are not
    code points."""
    return (script_codes(np.asarray(input, dtype=np.int32), tensorflow_script_code),)
