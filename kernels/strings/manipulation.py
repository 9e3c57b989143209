"""Kernels of TensorFlow's string-manipulation ops: case, stripping, lengths, substrings and joins.

StringLower and StringUpper change ASCII letters only, unless `encoding` is "utf-8": then, as TensorFlow
hands the C string to ICU, the text ends at its first NUL, bytes that are not UTF-8 become U+FFFD, and
Unicode's full case mappings apply (ß upper-cases to SS, a final Σ lower-cases to ς). StringStrip
removes leading and trailing ASCII whitespace. StringLength counts bytes, or UTF-8 characters as the
bytes that are not continuation bytes. Substr takes `len` bytes (or UTF-8 characters) from `pos`, which
counts from the end when negative; a `len` past the end stops there. A negative `len` takes the rest of
the string in bytes; in characters it takes nothing from a `pos` >= 0 and is out of range from a negative
one (TensorFlow's quirks). A continuation byte counts with the character before it, valid UTF-8 or not.

StringJoin joins its inputs element by element (scalars repeat to the others' shape); ReduceJoin joins
along the axes in `reduction_indices`, the first axis listed varying fastest. UnsortedSegmentJoin joins
the rows of each segment (tf.strings.reduce_join over a ragged dimension), in row order; TensorFlow puts
the separator (up to a NUL) before a part only once the joined string is non-empty, so leading empty
parts leave no separators, and an empty segment is "".
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from kernels.host import format_dims
from kernels.limits import STRING_ELEMENT_BYTES, check_bytes
from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, message_text, string_array

__all__ = ["reduce_join", "string_join", "string_length", "string_lower", "string_strip", "string_upper", "substr",
           "unsorted_segment_join"]


def _map_strings(input: Any, fn) -> np.ndarray:
    return string_array([fn(s) for s in flat_strings(input)], np.shape(input))


def _check_encoding(encoding: str | bytes) -> bool:
    """Whether the case ops work on UTF-8 text; ValueError for an encoding TensorFlow does not take."""
    text = encoding if isinstance(encoding, str) else message_text(encoding)
    if text not in ("", "utf-8"):
        raise ValueError(f"only utf-8 or '' (no encoding) is supported, received {text}")
    return text == "utf-8"


def _unicode_case(s: bytes, change) -> bytes:
    # NOTE: TensorFlow builds ICU's string from the C string: it ends at the first NUL.
    return change(s.split(b"\0", 1)[0].decode("utf-8", "replace")).encode("utf-8")


# Strings are Python objects: these run on the host only (so `xp` is numpy).
@kernel("StringLower", devices=("cpu",))
def string_lower(xp: Any, input: Any, *, encoding: str | bytes = "") -> tuple:
    """Each string lower-cased: ASCII only, or all of Unicode with encoding "utf-8"."""
    if _check_encoding(encoding):
        return (_map_strings(input, lambda s: _unicode_case(s, str.lower)),)
    return (_map_strings(input, bytes.lower),)


@kernel("StringUpper", devices=("cpu",))
def string_upper(xp: Any, input: Any, *, encoding: str | bytes = "") -> tuple:
    """Each string upper-cased: ASCII only, or all of Unicode with encoding "utf-8"."""
    if _check_encoding(encoding):
        return (_map_strings(input, lambda s: _unicode_case(s, str.upper)),)
    return (_map_strings(input, bytes.upper),)


@kernel("StringStrip", devices=("cpu",))
def string_strip(xp: Any, input: Any) -> tuple:
    """Each string without leading and trailing ASCII whitespace (space, \\t, \\n, \\v, \\f, \\r)."""
    return (_map_strings(input, bytes.strip),)


def _is_trail_byte(c: int) -> bool:
    return 0x80 <= c < 0xC0


def _utf8_length(s: bytes) -> int:
    return len(s) - sum(1 for c in s if _is_trail_byte(c))


@kernel("StringLength", devices=("cpu",))
def string_length(xp: Any, input: Any, *, unit: Literal["BYTE", "UTF8_CHAR"] = "BYTE") -> tuple:
    """The length of each string in bytes, or in UTF-8 characters (bytes that are not continuation bytes)."""
    count = len if unit == "BYTE" else _utf8_length
    return (np.array([count(s) for s in flat_strings(input)], dtype=np.int32).reshape(np.shape(input)),)


# --- Substr --------------------------------------------------------------------------------------------


def _forward(s: bytes, chars: int, pos: int) -> tuple[int, bool]:
    """The byte position `chars` UTF-8 characters after byte `pos` (stopping at the end), and whether
    there were that many (TensorFlow's ForwardNUTF8CharPositions)."""
    counted = 0
    while counted < chars and pos < len(s):
        pos += 1
        while pos < len(s) and _is_trail_byte(s[pos]):
            pos += 1
        counted += 1
    return pos, counted == chars


def _back(s: bytes, chars: int, pos: int) -> tuple[int, bool]:
    """The byte position `chars` UTF-8 characters before byte `pos` (TensorFlow's BackNUTF8CharPositions)."""
    counted = 0
    while counted < chars and pos > 0:
        pos -= 1
        while _is_trail_byte(s[pos]) and pos > 0:
            pos -= 1
        counted += 1
    return pos, counted == chars


def _utf8_span(s: bytes, pos: int, length: int) -> tuple[int, int] | None:
    """The bytes [start, end) of `length` characters from character `pos`; None when `pos` is out of range."""
    if pos >= 0:
        start, ok = _forward(s, pos, 0)
        if not ok:
            return None
        end, _ = _forward(s, length, start)  # a length past the end stops at the end
        return start, end
    skipped = max(-pos - length, 0)  # characters between the substring's end and the string's end
    end, ok = _back(s, skipped, len(s))
    if not ok:
        return None
    start, ok = _back(s, -pos - skipped, end)
    return (start, end) if ok else None


def _substring(s: bytes, pos: int, length: int, utf8: bool, byte_index: str, char_index: str) -> bytes:
    if utf8:
        span = _utf8_span(s, pos, length)
        if span is None:
            raise ValueError(f"pos {pos} out of range for string at index {char_index}")
        return s[span[0]:span[1]]
    start = pos + len(s) if pos < 0 else pos
    if not 0 <= start <= len(s):
        raise ValueError(f"pos {pos} out of range for string b'{message_text(s)}' at index {byte_index}")
    # NOTE: a negative length is a huge size_t in TensorFlow: the rest of the string.
    return s[start:] if length < 0 else s[start:start + length]


def _substr_operands(strings: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple:
    """The output shape, then per output element: string, pos, len, and its index as TensorFlow's messages
    write it for BYTE and for UTF8_CHAR."""
    if pos.ndim == 0 or strings.shape == pos.shape:
        pos, length = np.broadcast_to(pos, strings.shape), np.broadcast_to(length, strings.shape)
        indices = [str(i) for i in range(strings.size)]
        return strings.shape, strings, pos, length, indices, indices
    try:
        shape = np.broadcast_shapes(strings.shape, pos.shape)
    except ValueError:
        raise ValueError(f"Incompatible shapes: {format_dims(strings.shape)} vs. {format_dims(pos.shape)}") from None
    if len(shape) not in (1, 2):
        raise ValueError(f"Substr broadcast not implemented for {len(shape)} dimensions")
    positions = list(np.ndindex(*shape))
    if len(shape) == 1:
        byte_indices = char_indices = [str(i) for (i,) in positions]
    else:
        # NOTE: TensorFlow writes (row, column) for bytes but only the row for UTF-8 characters.
        byte_indices = [f"({i}, {j})" for i, j in positions]
        char_indices = [str(i) for i, _ in positions]
    return (shape, np.broadcast_to(strings, shape), np.broadcast_to(pos, shape), np.broadcast_to(length, shape),
            byte_indices, char_indices)


@kernel("Substr", devices=("cpu",))
def substr(xp: Any, input: Any, pos: Any, length: Any, *, unit: Literal["BYTE", "UTF8_CHAR"] = "BYTE") -> tuple:
    """`length` (TensorFlow's input `len`) bytes, or UTF-8 characters with unit UTF8_CHAR, of each string from
    `pos`. pos and len are scalars, of the input's shape, or broadcast with it to at most 2 dims."""
    pos, length = np.asarray(pos), np.asarray(length)
    if pos.shape != length.shape:
        raise ValueError(f"pos and len should have the same shape, got: {format_dims(pos.shape)} vs. "
                         f"{format_dims(length.shape)}")
    shape, strings, pos, length, byte_indices, char_indices = _substr_operands(
        np.asarray(input, dtype=object), pos, length)
    utf8 = unit == "UTF8_CHAR"
    operands = zip(flat_strings(strings), pos.reshape(-1).tolist(), length.reshape(-1).tolist(), byte_indices,
                   char_indices)
    out = [_substring(s, p, n, utf8, bi, ci) for s, p, n, bi, ci in operands]
    return (string_array(out, shape),)


# --- joins ---------------------------------------------------------------------------------------------


@kernel("StringJoin", devices=("cpu",))
def string_join(xp: Any, *inputs: Any, separator: str | bytes = "", memory_limit: int | None = None) -> tuple:
    """The inputs joined element by element with `separator`; scalar inputs repeat to the others' shape."""
    sep = as_bytes(separator)
    shape: tuple[int, ...] = ()
    for x in inputs:
        if np.ndim(x) == 0:
            continue
        if shape == ():
            shape = np.shape(x)
        elif np.shape(x) != shape:
            raise ValueError(f"Input shapes do not match: {format_dims(shape)} vs. {format_dims(np.shape(x))}")
    size = math.prod(shape)
    if memory_limit is not None:
        # A scalar input repeats in every element of the output, and the separator between every two:
        # a long scalar string joined to many elements multiplies its bytes.
        repeated = sum(len(as_bytes(np.asarray(x, dtype=object).item())) for x in inputs if np.ndim(x) == 0)
        per_element = repeated + len(sep) * max(len(inputs) - 1, 0) + STRING_ELEMENT_BYTES
        check_bytes(size * per_element, memory_limit, "StringJoin output (at least)", shape)
    columns = [flat_strings(np.broadcast_to(np.asarray(x, dtype=object), shape)) for x in inputs]
    return (string_array([sep.join(parts) for parts in zip(*columns)] if columns else [b""] * size, shape),)


@kernel("ReduceJoin", devices=("cpu",))
def reduce_join(xp: Any, inputs: Any, reduction_indices: Any, *, keep_dims: bool = False,
                separator: str | bytes = "", memory_limit: int | None = None) -> tuple:
    """The strings joined with `separator` along the axes `reduction_indices` (none: unchanged)."""
    strings = np.asarray(inputs, dtype=object)
    rank = strings.ndim
    axes = np.asarray(reduction_indices).reshape(-1).tolist()
    reduced = [False] * rank
    for axis in axes:
        if not -rank <= axis < rank:
            raise ValueError(f"Invalid reduction dimension {axis} for input with {rank} dimension(s)")
        if reduced[axis % rank]:
            raise ValueError(f"Duplicate reduction dimension {axis}")
        reduced[axis % rank] = True
    kept = [d for d in range(rank) if not reduced[d]]
    # NOTE: TensorFlow walks the reduced axes with the first one listed varying fastest.
    order = [a % rank for a in reversed(axes)]
    rows = int(np.prod([strings.shape[d] for d in kept]))
    columns = int(np.prod([strings.shape[d] for d in order]))
    table = strings.transpose(kept + order).reshape(rows, columns)
    sep = as_bytes(separator)
    check_bytes(rows * max(columns - 1, 0) * len(sep), memory_limit, "ReduceJoin separators", (rows,))
    joined = [sep.join(flat_strings(row)) for row in table]
    shape = [1 if reduced[d] else strings.shape[d] for d in range(rank) if keep_dims or not reduced[d]]
    return (string_array(joined, shape),)


def _segment_ids(strings: np.ndarray, segment_ids: np.ndarray, num_segments: np.ndarray) -> int:
    """num_segments as an int, after TensorFlow's checks of the three inputs' shapes."""
    if num_segments.size == 0:
        raise ValueError("Number of segments cannot be empty.")
    if num_segments.size != 1:
        raise ValueError(f"num_segments must be a scalar, got shape {format_dims(num_segments.shape)}")
    if segment_ids.ndim == 0:
        raise ValueError("Segment_id cannot have rank 0")
    if segment_ids.ndim > strings.ndim:
        raise ValueError(f"Invalid segment_id rank {segment_ids.ndim} for input with {strings.ndim} dimension(s)")
    for i in range(segment_ids.ndim):
        if segment_ids.shape[i] != strings.shape[i]:
            # NOTE: TensorFlow's message gives the input's rank where the input's dimension was meant
            raise ValueError(f"Segment dimension is {segment_ids.shape[i]} while input dimension is "
                             f"{strings.ndim} in rank {i}")
    count = int(num_segments.reshape(-1)[0])
    if count < 0:
        raise ValueError(f"num_segments must be non-negative, got {count}")
    return count


@kernel("UnsortedSegmentJoin", devices=("cpu",))
def unsorted_segment_join(xp: Any, inputs: Any, segment_ids: Any, num_segments: Any, *,
                          separator: str | bytes = "", memory_limit: int | None = None) -> tuple:
    """[num_segments, *inputs.shape[segment_ids.ndim:]]: the rows of `inputs` joined per segment id."""
    strings, ids = np.asarray(inputs, dtype=object), np.asarray(segment_ids)
    count = _segment_ids(strings, ids, np.asarray(num_segments))
    inner = strings.shape[ids.ndim:]
    shape = (count, *inner)
    width = math.prod(inner)
    check_bytes(count * width * STRING_ELEMENT_BYTES, memory_limit, "UnsortedSegmentJoin output", shape)
    flat_ids = ids.reshape(-1)
    if flat_ids.size and (flat_ids.min() < 0 or flat_ids.max() >= count):
        raise ValueError("segment_ids are not allowed to exceed num_segments or to have negative values.")
    sep = as_bytes(separator).split(b"\0", 1)[0]  # appended as a C string
    check_bytes(flat_ids.size * width * len(sep), memory_limit, "UnsortedSegmentJoin separators", shape)
    rows = np.asarray(flat_strings(strings), dtype=object).reshape(flat_ids.size, width)
    out = np.full((count, width), b"", dtype=object)
    order = np.argsort(flat_ids, kind="stable")
    starts = np.flatnonzero(np.r_[True, flat_ids[order][1:] != flat_ids[order][:-1]]) if order.size else order
    for segment_rows in np.split(order, starts[1:]) if order.size else []:
        members = rows[segment_rows]
        for column in range(width):
            parts = members[:, column].tolist()
            first = next((k for k, part in enumerate(parts) if part), len(parts))
            out[flat_ids[segment_rows[0]], column] = sep.join(parts[first:])
    return (out.reshape(shape),)
