"""The kernel of TF Text's UnicodeScriptTokenizeWithOffsets, what text.UnicodeScriptTokenizer runs between
decoding and encoding UTF-8: rows of code points (values and row splits) split wherever the ICU script code
(uscript_getScript: Common for punctuation, digits and spaces, Inherited for combining marks, -1 for values
that are not code points) changes, and, unless `keep_whitespace`, with White_Space code points dropped; with
`keep_whitespace`, a change between whitespace and not also splits. Offsets count code points from the row's
start, as TF Text counts them: a token's limit leaves out the spaces after it even when spaces inside it
were dropped.

    >>> values = np.array([ord(c) for c in "xy.,z de"], np.int32)
    >>> out = unicode_script_tokenize_with_offsets(np, values, np.array([0, 8]))
    >>> out[1].tolist(), out[2].tolist(), out[3].tolist()
    ([0, 2, 4, 5, 7], [0, 2, 4, 6], [2, 4, 5, 8])

Script data: ICU 77.1 (pyicu-wheels); TF Text 2.21 builds ICU 77.1 as well.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from kernels.registry import kernel
from kernels.strings.unicode_script import script_codes
from kernels.text.bert_chars import WHITESPACE

__all__ = ["unicode_script_tokenize_with_offsets"]

_WHITESPACE = np.array(sorted(WHITESPACE), dtype=np.int64)


@kernel("UnicodeScriptTokenizeWithOffsets", devices=("cpu",), outputs=5)
def unicode_script_tokenize_with_offsets(xp: Any, input_values: Any, input_splits: Any, *,
                                         keep_whitespace: bool = False) -> tuple:
    """Rows of code points split where the script changes: the tokens' code points with their row splits,
    each token's start and limit in code points from its row's start, and the tokens' splits per row."""
    values = np.asarray(input_values, dtype=np.int32).reshape(-1)
    splits = np.asarray(input_splits).reshape(-1)
    dtype = splits.dtype
    if splits.size and (splits[0] < 0 or splits[-1] > values.size or np.any(np.diff(splits) < 0)):
        raise ValueError(f"input_splits must be non-decreasing and within the {values.size} input values, got "
                         f"{splits.tolist()}")
    scripts = script_codes(values).tolist()
    spaces = np.isin(values, _WHITESPACE).tolist()
    cps = values.tolist()
    out_values: list[int] = []
    inner: list[int] = []
    starts: list[int] = []
    limits: list[int] = []
    outer: list[int] = []
    bounds = splits.tolist()
    for row_start, row_end in itertools.pairwise(bounds):
        outer.append(len(starts))
        prev_script, open_token, skipped, was_space = -1, False, 0, False
        for k in range(row_start, row_end):
            script, is_space = scripts[k], spaces[k]
            if script != prev_script or (keep_whitespace and is_space != was_space):
                if open_token:
                    limits.append(k - row_start - skipped)
                prev_script, open_token = script, False
            if not is_space or keep_whitespace:
                if not open_token:
                    starts.append(k - row_start)
                    inner.append(len(out_values))
                    open_token = True
                out_values.append(cps[k])
            if not keep_whitespace:
                skipped = skipped + 1 if is_space else 0
            was_space = is_space
        if open_token:
            limits.append(row_end - row_start - skipped)
    if bounds:
        outer.append(len(starts))
    inner.append(len(out_values))
    return (np.array(out_values, np.int32), np.array(inner, dtype), np.array(starts, np.int64),
            np.array(limits, np.int64), np.array(outer, dtype))
