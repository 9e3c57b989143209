"""Kernels of TensorFlow's Unicode ops: UnicodeDecode and UnicodeDecodeWithOffsets (strings to code points,
as a ragged tensor of row splits and values, with each character's byte offset), UnicodeEncode (code
points back to strings) and UnicodeTranscode (strings from one encoding to another).

TensorFlow reads text through ICU converters. Here the input encodings are UTF-8, UTF-16-BE, UTF-32-BE
and ISO-8859-1 (under any name ICU matches to them: case, "-", "_" and spaces do not count); outputs are
UTF-8, UTF-16-BE or UTF-32-BE. Bytes that are not valid in the encoding are read as ICU reads them: each
maximal ill-formed subsequence is one bad character (so "\\xe2\\x82" is one, "\\xed\\xa0\\x80", an
encoded surrogate, three). `errors` says what a bad character becomes: "replace" writes
`replacement_char`, "ignore" drops it (its bytes still count for the next offset), "strict" fails with
"Invalid formatting on input string". With replace_control_characters, C0 controls (U+0000-U+001F) are
treated as bad characters too, except that a strict decode replaces them rather than failing.

UnicodeEncode takes code points 0-U+10FFFF that are not surrogates; others are bad characters for
`errors`. A replacement_char that is a surrogate is written as U+FFFD in UTF-8 and as itself in UTF-16
and UTF-32, as ICU's strings do.
"""

from __future__ import annotations

import codecs
from typing import Any, Literal

import numpy as np

from kernels.registry import kernel
from kernels.strings.tensors import flat_strings, message_text, string_array

__all__ = ["unicode_decode", "unicode_decode_with_offsets", "unicode_encode", "unicode_transcode"]

Errors = Literal["strict", "replace", "ignore"]
OutputEncoding = Literal["UTF-8", "UTF-16-BE", "UTF-32-BE"]

# ICU converter names (compared as ICU compares them) -> Python codec.
_INPUT_CODECS = {"utf8": "utf-8", "utf16be": "utf-16-be", "utf32be": "utf-32-be", "iso88591": "latin-1",
                 "latin1": "latin-1", "l1": "latin-1"}
_BAD_LENGTH_BASE = 0xDC00  # a bad run of n bytes decodes to the lone surrogate U+DC00 + n (see _mark_bad)


def _mark_bad(error: UnicodeDecodeError) -> tuple[str, int]:
    """A codec error handler: each ill-formed subsequence becomes one lone surrogate that carries its length.
    Python's decoders never produce lone surrogates from valid input, so the marks cannot be confused."""
    return chr(_BAD_LENGTH_BASE + (error.end - error.start)), error.end


codecs.register_error("tensorgate.mark_bad", _mark_bad)


def _input_codec(input_encoding: str | bytes) -> str:
    name = input_encoding if isinstance(input_encoding, str) else message_text(input_encoding)
    key = "".join(c for c in name.lower() if c not in "-_ ")
    if key not in _INPUT_CODECS:
        raise ValueError(f"Could not create converter for input encoding: {name} (tensorgate reads UTF-8, "
                         "UTF-16-BE, UTF-32-BE and ISO-8859-1)")
    return _INPUT_CODECS[key]


def _encoded_size(code_point: int, codec: str) -> int:
    if codec == "utf-8":
        return 1 if code_point < 0x80 else 2 if code_point < 0x800 else 3 if code_point < 0x10000 else 4
    if codec == "utf-16-be":
        return 2 if code_point < 0x10000 else 4
    return 4 if codec == "utf-32-be" else 1


def _characters(data: bytes, codec: str) -> list[tuple[int, int, bool]]:
    """(code point, bytes it took, whether it is bad) for each character of `data`, read as ICU reads it."""
    out = []
    for ch in data.decode(codec, "tensorgate.mark_bad"):
        code_point = ord(ch)
        if _BAD_LENGTH_BASE < code_point < _BAD_LENGTH_BASE + 8:
            out.append((0xFFFD, code_point - _BAD_LENGTH_BASE, True))
        else:
            out.append((code_point, _encoded_size(code_point, codec), False))
    return out


def _check_replacement(replacement_char: int) -> None:
    if not 0 <= replacement_char <= 0x10FFFF:
        raise ValueError("replacement_char out of unicode codepoint range")


def _encode(code_points: list[int], output_encoding: str) -> bytes:
    """Code points (surrogates included, which only a replacement_char brings) as ICU writes them."""
    if output_encoding == "UTF-8":
        return "".join(chr(0xFFFD if 0xD800 <= c <= 0xDFFF else c) for c in code_points).encode("utf-8")
    if output_encoding == "UTF-16-BE":
        return "".join(map(chr, code_points)).encode("utf-16-be", "surrogatepass")
    return np.array(code_points, dtype=">u4").tobytes()


def _decode(input: Any, input_encoding: str | bytes, errors: str, replacement_char: int,
            replace_control_characters: bool) -> tuple[list[int], list[int], list[int]]:
    """Row splits, code points and byte offsets of every string of `input`, flattened."""
    _check_replacement(replacement_char)
    codec = _input_codec(input_encoding)
    splits, values, offsets = [0], [], []
    for s in flat_strings(input):
        offset = 0
        for code_point, size, bad in _characters(s, codec):
            if bad and errors == "strict":
                raise ValueError("Invalid formatting on input string")
            if bad or (replace_control_characters and code_point <= 0x1F):
                if errors == "ignore":
                    offset += size
                    continue
                code_point = replacement_char
            values.append(code_point)
            offsets.append(offset)
            offset += size
        splits.append(len(values))
    return splits, values, offsets


# Strings are Python objects: these run on the host only (so `xp` is numpy).
@kernel("UnicodeDecode", devices=("cpu",), outputs=2)
def unicode_decode(xp: Any, input: Any, *, input_encoding: str | bytes, errors: Errors = "replace",
                   replacement_char: int = 0xFFFD, replace_control_characters: bool = False,
                   Tsplits: Any = np.int64) -> tuple:
    """The code points of each string (flattened) as row_splits [n+1] (Tsplits) and char_values (int32)."""
    splits, values, _ = _decode(input, input_encoding, errors, replacement_char, replace_control_characters)
    return np.array(splits, dtype=Tsplits), np.array(values, dtype=np.int32)


@kernel("UnicodeDecodeWithOffsets", devices=("cpu",), outputs=3)
def unicode_decode_with_offsets(xp: Any, input: Any, *, input_encoding: str | bytes, errors: Errors = "replace",
                                replacement_char: int = 0xFFFD, replace_control_characters: bool = False,
                                Tsplits: Any = np.int64) -> tuple:
    """UnicodeDecode, plus the byte offset in its string where each character starts (int64)."""
    # NOTE: TensorFlow 2.21 aborts with Tsplits=int32 here (it writes int32 offsets into the int64 output).
    splits, values, offsets = _decode(input, input_encoding, errors, replacement_char, replace_control_characters)
    return np.array(splits, dtype=Tsplits), np.array(values, dtype=np.int32), np.array(offsets, dtype=np.int64)


def _check_encode_splits(values: np.ndarray, splits: np.ndarray) -> list[int]:
    if values.ndim != 1 or splits.ndim != 1:
        raise ValueError("Both the input_tensor and input_splits should be of rank 1. ")
    bounds = splits.tolist()
    if not bounds:
        raise ValueError("Input_splits should contain elements, but given input_values has 0 elements")
    if bounds[0] != 0:
        raise ValueError("First value in input_splits must be zero.")
    if bounds[-1] != values.size:
        raise ValueError("Last value in input_splits must be equal to length of input_tensor.")
    if any(b < a for a, b in zip(bounds, bounds[1:])):
        raise ValueError("Values in input_splits must be equal or in ascending order.")
    return bounds


@kernel("UnicodeEncode", devices=("cpu",))
def unicode_encode(xp: Any, input_values: Any, input_splits: Any, *, output_encoding: OutputEncoding,
                   errors: Errors = "replace", replacement_char: int = 0xFFFD) -> tuple:
    """One string per row of the ragged tensor (input_splits, input_values) of code points."""
    _check_replacement(replacement_char)
    values = np.asarray(input_values)
    bounds = _check_encode_splits(values, np.asarray(input_splits))
    flat = values.tolist()
    out = []
    for start, end in zip(bounds, bounds[1:]):
        row = []
        for code_point in flat[start:end]:
            if 0 <= code_point <= 0x10FFFF and not 0xD800 <= code_point <= 0xDFFF:
                row.append(code_point)
            elif errors == "strict":
                raise ValueError("Code point is out of range for Unicode, or is a surrogate.")
            elif errors == "replace":
                row.append(replacement_char)
        out.append(_encode(row, output_encoding))
    return (string_array(out),)


@kernel("UnicodeTranscode", devices=("cpu",))
def unicode_transcode(xp: Any, input: Any, *, input_encoding: str | bytes, output_encoding: OutputEncoding,
                      errors: Errors = "replace", replacement_char: int = 0xFFFD,
                      replace_control_characters: bool = False) -> tuple:
    """Each string read in `input_encoding` and written in `output_encoding`."""
    _check_replacement(replacement_char)
    codec = _input_codec(input_encoding)
    found_bad = False
    out = []
    for s in flat_strings(input):
        code_points = []
        for code_point, _, bad in _characters(s, codec):
            if bad or (replace_control_characters and code_point <= 0x1F):
                found_bad = True
                if errors == "ignore":
                    continue
                code_point = replacement_char
            code_points.append(code_point)
        out.append(_encode(code_points, output_encoding))
    # NOTE: unlike the decoders, a strict transcode also fails on a control character it was told to replace.
    if errors == "strict" and found_bad:
        raise ValueError("Invalid formatting on input string")
    return (string_array(out, np.shape(input)),)
