"""The kernels of TF Text's BOISE tag converters (text.offsets_to_boise_tags, text.boise_tags_to_offsets):
TFText>OffsetsToBoiseTags labels each token of a row B-, I-, E- or S-<type> by the typed spans (byte offsets)
it overlaps, or O; TFText>BoiseTagsToOffsets turns each row's tags back into spans.

As boise_offset_converter.cc does it, row by row: tokens and spans are walked together in order (both sorted
by offset), a token overlapping several spans takes the last one's tag, and in strict boundary mode a token
only partly inside a span is O. A span type is a tag's text after its two-letter prefix, up to a NUL byte.
Only the first len - 1 row splits of the token (and span) inputs are compared with each other, as TF Text
compares them; the first input's splits cut the rows.

    >>> offsets_to_boise_tags(np, np.array([0, 4, 8, 12, 17]), np.array([3, 7, 11, 16, 20]), np.array([12]),
    ...     np.array([16]), np.array([b"animal"], dtype=object), *[np.array([0, 5])] * 2,
    ...     *[np.array([0, 1])] * 3, np.bool_(False))[0].tolist()
    [b'O', b'O', b'O', b'S-animal', b'O']
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings, string_array

__all__ = ["boise_tags_to_offsets", "offsets_to_boise_tags"]


def _vectors(**tensors: Any) -> list[list]:
    out = []
    for name, tensor in tensors.items():
        array = np.asarray(tensor, dtype=object) if np.asarray(tensor).dtype == object else np.asarray(tensor)
        if array.ndim != 1:
            raise ValueError(f"Shape must be rank 1: {name} has shape {format_dims(array.shape)}")
        out.append(flat_strings(array) if array.dtype == object else array.tolist())
    return out


def _check_splits(splits: list[int], size: int, what: str) -> None:
    if splits and (splits[0] < 0 or any(b < a for a, b in itertools.pairwise(splits)) or splits[-1] > size):
        raise ValueError(f"the row splits of the {what} must be non-negative, never decrease and end within its "
                         f"{size} values; they are {splits}")


def _tags_of_row(token_begins: list[int], token_ends: list[int], span_begins: list[int], span_ends: list[int],
                 span_types: list[bytes], strict: bool) -> list[bytes]:
    """boise_offset_converter.cc's OffsetsToBoiseTags for one row."""
    tags = []
    span = 0
    for token_start, token_end in zip(token_begins, token_ends):
        tag = b"O"
        recorded = False
        while span < len(span_begins) and not recorded:
            span_start, span_end, kind = span_begins[span], span_ends[span], span_types[span]
            starts_it = token_start <= span_start < token_end <= span_end
            ends_it = token_start < span_end <= token_end and token_start >= span_start
            if token_end <= span_start:  # the token lies before the span
                tags.append(tag)
                recorded = True
            elif token_start >= span_end:  # the token lies after the span
                span += 1
            elif starts_it:
                if ends_it:
                    tags.append(b"S-" + kind)
                    span += 1
                elif strict and token_start != span_start:
                    tags.append(tag)
                else:
                    tags.append(b"B-" + kind)
                recorded = True
            elif ends_it:
                if strict and token_end != span_end:
                    tags.append(tag)
                    recorded = True
                else:
                    tag = b"E-" + kind
                span += 1
            elif token_start >= span_start and token_end <= span_end:  # inside the span
                tags.append(b"I-" + kind)
                recorded = True
            else:  # the span lies inside the token
                tag = b"B-" + kind
                span += 1
        if not recorded:
            tags.append(tag)
    return tags


@kernel("TFText>OffsetsToBoiseTags", devices=("cpu",))
def offsets_to_boise_tags(xp: Any, input_token_begin_offsets: Any, input_token_end_offsets: Any,
                          input_span_begin_offsets: Any, input_span_end_offsets: Any, input_span_type: Any,
                          input_token_begin_row_splits: Any, input_token_end_row_splits: Any,
                          input_span_begin_row_splits: Any, input_span_end_row_splits: Any,
                          input_span_type_row_splits: Any, input_use_strict_boundary_mode: Any) -> tuple:
    """The BOISE tag of every token (flat, as the token offsets' values)."""
    token_begins, token_ends, span_begins, span_ends, span_types = _vectors(
        input_token_begin_offsets=input_token_begin_offsets, input_token_end_offsets=input_token_end_offsets,
        input_span_begin_offsets=input_span_begin_offsets, input_span_end_offsets=input_span_end_offsets,
        input_span_type=input_span_type)
    token_splits, token_end_splits, span_splits, span_end_splits, type_splits = _vectors(
        input_token_begin_row_splits=input_token_begin_row_splits,
        input_token_end_row_splits=input_token_end_row_splits,
        input_span_begin_row_splits=input_span_begin_row_splits, input_span_end_row_splits=input_span_end_row_splits,
        input_span_type_row_splits=input_span_type_row_splits)
    strict = np.asarray(input_use_strict_boundary_mode)
    if strict.ndim != 0:
        raise ValueError(f"input_use_strict_boundary_mode must be a scalar, got shape {format_dims(strict.shape)}")
    if len(token_begins) != len(token_ends) or len(span_begins) != len(span_ends) or len(span_begins) != len(
            span_types):
        raise ValueError("Token begin/end offsets must have the same size. Span begin/end offsets and span type must "
                         f"have the same size. Token begin offsets shape: {len(token_begins)} Token end offsets "
                         f"shape: {len(token_ends)} Span begin offsets shape: {len(span_begins)} Span end offsets "
                         f"shape: {len(span_ends)} Span type shape: {len(span_types)}")
    if len({len(token_splits), len(token_end_splits), len(span_splits), len(span_end_splits), len(type_splits)}) != 1:
        raise ValueError(f"Row splits must have the same size for token and span. Token begin row splits shape: "
                         f"{len(token_splits)} Token end row splits shape: {len(token_end_splits)} Span begin row "
                         f"splits shape: {len(span_splits)} Span end row splits shape: {len(span_end_splits)} Span "
                         f"type row splits shape: {len(type_splits)}")
    if token_splits[:-1] != token_end_splits[:-1]:
        raise ValueError("Row splits must be the same for token begin and end offsets.")
    if span_splits[:-1] != span_end_splits[:-1] or span_splits[:-1] != type_splits[:-1]:
        raise ValueError("Row splits must be the same for span begin, end offsets and span type.")
    _check_splits(token_splits, len(token_begins), "token offsets")
    _check_splits(span_splits, len(span_begins), "spans")
    tags: list[bytes] = []
    for row in range(len(token_splits) - 1):
        tokens = slice(token_splits[row], token_splits[row + 1])
        spans = slice(span_splits[row], span_splits[row + 1])
        tags += _tags_of_row(token_begins[tokens], token_ends[tokens], span_begins[spans], span_ends[spans],
                             span_types[spans], bool(strict))
    return (string_array(tags),)


def _span_type(tag: bytes) -> bytes:
    return tag[2:].split(b"\0", 1)[0]  # NOTE: TF Text copies the type as a C string


def _spans_of_row(begins: list[int], ends: list[int], tags: list[bytes]) -> list[tuple[int, int, bytes]]:
    """boise_offset_converter.cc's BoiseTagsToOffsets for one row."""
    spans = []
    start, kind, started = -1, b"", False
    for i, tag in enumerate(tags):
        opens = tag.startswith((b"B-", b"I-"))
        closes = tag.startswith((b"E-", b"S-"))
        if not started:
            if opens:
                start, started, kind = begins[i], True, _span_type(tag)
            if closes:
                spans.append((begins[i], ends[i], _span_type(tag)))
                started, kind = False, b""
        else:
            if tag.startswith(b"O"):
                spans.append((start, ends[i - 1], kind))
                started, kind = False, b""
            if closes:
                spans.append((start, ends[i], _span_type(tag)))
                started = False
            if opens:  # NOTE: a B- inside an open span continues it, as TF Text reads it
                started, kind = True, _span_type(tag)
    if started:
        spans.append((start, ends[-1], kind))
    return spans


@kernel("TFText>BoiseTagsToOffsets", devices=("cpu",), outputs=4)
def boise_tags_to_offsets(xp: Any, input_token_begin_offsets: Any, input_token_end_offsets: Any,
                          input_boise_tags: Any, input_token_begin_row_splits: Any, input_token_end_row_splits: Any,
                          input_boise_tags_row_splits: Any) -> tuple:
    """The spans' begin and end offsets (int32), their types, and their row splits (int64)."""
    begins, ends, tags = _vectors(input_token_begin_offsets=input_token_begin_offsets,
                                  input_token_end_offsets=input_token_end_offsets, input_boise_tags=input_boise_tags)
    splits, end_splits, tag_splits = _vectors(input_token_begin_row_splits=input_token_begin_row_splits,
                                              input_token_end_row_splits=input_token_end_row_splits,
                                              input_boise_tags_row_splits=input_boise_tags_row_splits)
    if len(begins) != len(ends) or len(begins) != len(tags):
        raise ValueError(f"Token begin/end offsets and boise tags must have the same size.  Token begin offsets "
                         f"shape: {len(begins)} Token end offsets shape: {len(ends)} BOISE tags shape: {len(tags)}")
    if len(splits) != len(end_splits) or len(splits) != len(tag_splits):
        raise ValueError(f"Row splits must have the same size for token begin/end offsets and BOISE tags.  Token "
                         f"begin row splits shape: {len(splits)} Token end row splits shape: {len(end_splits)} "
                         f"BOISE tags row splits shape: {len(tag_splits)}")
    if splits[:-1] != end_splits[:-1] or splits[:-1] != tag_splits[:-1]:
        raise ValueError("Row splits must be the same for token begin/end offsets ad BOISE tags.")
    _check_splits(splits, len(begins), "token offsets")
    spans: list[tuple[int, int, bytes]] = []
    row_splits = [0]
    for row in range(len(splits) - 1):
        tokens = slice(splits[row], splits[row + 1])
        spans += _spans_of_row(begins[tokens], ends[tokens], tags[tokens])
        row_splits.append(len(spans))
    return (np.array([s[0] for s in spans], np.int32), np.array([s[1] for s in spans], np.int32),
            string_array(s[2] for s in spans), np.array(row_splits, np.int64))
