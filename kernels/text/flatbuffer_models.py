"""The flatbuffer models TF Text's ops take as a uint8 tensor, read field by field with Google's flatbuffers
runtime: FastWordpieceTokenizerConfig (fast_wordpiece_tokenizer_model.fbs), FastBertNormalizerModel
(fast_bert_normalizer_model.fbs) and PhraseTokenizerConfig (phrase_tokenizer_model.fbs). A table's field
k sits in vtable slot 4 + 2k, in the order the .fbs declares the fields.

A model arrives as the same constant array run after run, so `cached_model` keeps the decoded form per
array (and per content, for a model that is fed): decoding happens once, not per request.

    >>> config = read_fast_wordpiece_config(model_bytes)
    >>> config.suffix_indicator, config.end_to_end
    (b'##', True)
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeVar

import flatbuffers
import numpy as np
from flatbuffers import number_types as N
from flatbuffers.table import Table

from kernels.host import format_dims
from kernels.strings.tensors import string_array

__all__ = [
    "FastBertNormalizerModel",
    "FastWordpieceConfig",
    "PhraseTokenizerConfig",
    "cached_model",
    "detokenize_rows",
    "model_bytes",
    "read_fast_bert_normalizer_model",
    "read_fast_wordpiece_config",
    "read_phrase_tokenizer_config",
    "vector",
]

T = TypeVar("T")


class _Fields:
    """One flatbuffer table: its fields by index, with the .fbs defaults for absent scalars."""

    def __init__(self, buf: bytes, pos: int):
        self.buf = buf
        self.table = Table(buf, pos)

    def _offset(self, field: int) -> int:
        return self.table.Offset(4 + 2 * field)

    def scalar(self, field: int, flags: Any, default: Any = 0) -> Any:
        return self.table.GetSlot(4 + 2 * field, default, flags)

    def bool(self, field: int) -> bool:
        return bool(self.scalar(field, N.BoolFlags, False))

    def string(self, field: int) -> bytes | None:
        off = self._offset(field)
        return None if off == 0 else self.table.String(self.table.Pos + off)

    def vector(self, field: int, dtype: str, per_element: int = 1) -> np.ndarray | None:
        """A vector of scalars (or of structs of `per_element` scalars, flattened)."""
        off = self._offset(field)
        if off == 0:
            return None
        start, length = self.table.Vector(off), self.table.VectorLen(off)
        return np.frombuffer(self.buf, dtype=np.dtype(dtype), count=length * per_element, offset=start).copy()

    def strings(self, field: int) -> list[bytes] | None:
        off = self._offset(field)
        if off == 0:
            return None
        start, length = self.table.Vector(off), self.table.VectorLen(off)
        return [self.table.String(start + 4 * i) for i in range(length)]

    def subtable(self, field: int) -> _Fields | None:
        off = self._offset(field)
        return None if off == 0 else _Fields(self.buf, self.table.Indirect(self.table.Pos + off))


def _root(buf: bytes, schema: str) -> _Fields:
    if len(buf) < 8:
        raise ValueError(f"the model ({len(buf)} bytes) is too short to be a {schema} flatbuffer")
    return _Fields(buf, flatbuffers.encode.Get(N.UOffsetTFlags.packer_type, buf, 0))


def _read(buf: bytes, schema: str, read: Callable[[_Fields], T]) -> T:
    try:
        return read(_root(buf, schema))
    except (struct.error, IndexError, OverflowError, TypeError) as e:
        raise ValueError(f"the model is not a valid {schema} flatbuffer ({e})") from None
    except ValueError as e:
        raise ValueError(f"the model is not a valid {schema} flatbuffer ({e})") from None


def _required(value: T | None, schema: str, field: str) -> T:
    if value is None:
        raise ValueError(f"{schema} has no {field}")
    return value


# --- FastWordpieceTokenizerConfig --------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FastWordpieceConfig:
    """FastWordpieceTokenizerConfig: the trie of vocabulary tokens and the failure links and pops that make
    WordPiece linear (see kernels.text.fast_wordpiece); tokens are encoded as (suffix bit 30, id << 8,
    length - 1)."""

    trie_array: np.ndarray  # uint32
    failure_links: np.ndarray  # uint32 per trie unit (FailureStruct.failure_link)
    failure_pops: np.ndarray  # uint32 per trie unit: (offset << 8) | (length - 1) in failure_pops_pool
    failure_pops_pool: np.ndarray  # int32 encoded tokens
    trie_suffix_root: int
    max_bytes_per_token: int
    suffix_indicator: bytes
    unk_token: bytes
    unk_token_id: int
    precomputed_result_for_suffix_indicator: tuple[int, ...]
    trie_punct_failure_link_node: int
    end_to_end: bool
    support_detokenization: bool
    vocab_array: tuple[bytes, ...] | None
    vocab_is_suffix_array: tuple[bool, ...] | None


def read_fast_wordpiece_config(buf: bytes) -> FastWordpieceConfig:
    schema = "FastWordpieceTokenizerConfig"

    def read(f: _Fields) -> FastWordpieceConfig:
        failure = _required(f.vector(1, "<u4", per_element=2), schema, "failure_struct_array")
        vocab = f.strings(12)
        is_suffix = f.vector(13, "u1")
        return FastWordpieceConfig(
            trie_array=_required(f.vector(0, "<u4"), schema, "trie_array"),
            failure_links=failure[0::2], failure_pops=failure[1::2],
            failure_pops_pool=_required(f.vector(2, "<i4"), schema, "failure_pops_pool"),
            trie_suffix_root=f.scalar(3, N.Uint32Flags),
            max_bytes_per_token=f.scalar(4, N.Int32Flags),
            suffix_indicator=_required(f.string(5), schema, "suffix_indicator"),
            unk_token=_required(f.string(6), schema, "unk_token"),
            unk_token_id=f.scalar(7, N.Int32Flags),
            precomputed_result_for_suffix_indicator=tuple(
                _required(f.vector(8, "<i4"), schema, "precomputed_result_for_suffix_indicator").tolist()),
            trie_punct_failure_link_node=f.scalar(9, N.Uint32Flags),
            end_to_end=f.bool(10), support_detokenization=f.bool(11),
            vocab_array=None if vocab is None else tuple(vocab),
            vocab_is_suffix_array=None if is_suffix is None else tuple(bool(b) for b in is_suffix.tolist()),
        )

    return _read(buf, schema, read)


# --- FastBertNormalizerModel -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FastBertNormalizerModel:
    """FastBertNormalizerModel: a trie from each character (UTF-8) that normalization changes to an encoded
    (changed bit 30, offset << 6, length) slice of `normalized_string_pool`."""

    lower_case_nfd_strip_accents: bool
    trie_array: np.ndarray  # uint32
    data_for_codepoint_zero: int
    normalized_string_pool: bytes


def read_fast_bert_normalizer_model(buf: bytes) -> FastBertNormalizerModel:
    schema = "FastBertNormalizerModel"

    def read(f: _Fields) -> FastBertNormalizerModel:
        return FastBertNormalizerModel(
            lower_case_nfd_strip_accents=f.bool(0),
            trie_array=_required(f.vector(1, "<u4"), schema, "trie_array"),
            data_for_codepoint_zero=f.scalar(2, N.Int32Flags),
            normalized_string_pool=_required(f.vector(3, "u1"), schema, "normalized_string_pool").tobytes(),
        )

    return _read(buf, schema, read)


# --- PhraseTokenizerConfig ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PhraseTokenizerConfig:
    """PhraseTokenizerConfig: a trie of phrases (sentencepiece's double array), the whitespace tokenizer's
    config, and the vocabulary for detokenizing."""

    prob: int
    unk_token: bytes
    unk_token_id: int
    support_detokenization: bool
    vocab_array: tuple[bytes, ...] | None
    trie_nodes: np.ndarray  # uint32
    whitespace_config: bytes
    split_end_punctuation: bool


def read_phrase_tokenizer_config(buf: bytes) -> PhraseTokenizerConfig:
    schema = "PhraseTokenizerConfig"

    def read(f: _Fields) -> PhraseTokenizerConfig:
        trie = _required(f.subtable(5), schema, "vocab_trie")
        vocab = f.strings(4)
        return PhraseTokenizerConfig(
            prob=f.scalar(0, N.Int32Flags),
            unk_token=f.string(1) or b"",
            unk_token_id=f.scalar(2, N.Int32Flags),
            support_detokenization=f.bool(3),
            vocab_array=None if vocab is None else tuple(vocab),
            trie_nodes=_required(trie.vector(0, "<u4"), schema, "vocab_trie.nodes"),
            whitespace_config=_required(f.string(6), schema, "whitespace_config"),
            split_end_punctuation=f.bool(7),
        )

    return _read(buf, schema, read)


# --- decoded models, once per model ------------------------------------------------------------------------


def model_bytes(model: Any, name: str) -> bytes:
    """A model input (a uint8 tensor) as bytes; TypeError for any other dtype."""
    array = np.asarray(model)
    if array.dtype != np.uint8:
        raise TypeError(f"{name} must be a uint8 tensor, got {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be a vector, got shape {format_dims(array.shape)}")
    return array.tobytes()


_LOCK = threading.Lock()
_BY_ARRAY: OrderedDict[tuple[str, int], tuple[Any, Any]] = OrderedDict()
_BY_CONTENT: OrderedDict[tuple[str, bytes], Any] = OrderedDict()
_KEEP = 16


def cached_model(model: Any, name: str, kind: str, build: Callable[[bytes], T]) -> T:
    """`build(bytes of model)`, computed once per model array (a graph's constant is the same array every
    run) and once per content (a model that is fed arrives as a new array each time)."""
    key = (kind, id(model))
    with _LOCK:
        hit = _BY_ARRAY.get(key)
        if hit is not None and hit[0] is model:
            return hit[1]
    data = model_bytes(model, name)
    with _LOCK:
        decoded = _BY_CONTENT.get((kind, data))
    if decoded is None:
        decoded = build(data)
    with _LOCK:
        _BY_CONTENT[(kind, data)] = decoded
        _BY_CONTENT.move_to_end((kind, data))
        _BY_ARRAY[key] = (model, decoded)  # holds the array, so its id is not reused while cached
        for cache in (_BY_CONTENT, _BY_ARRAY):
            while len(cache) > _KEEP:
                cache.popitem(last=False)
    return decoded


def vector(values: Any, name: str) -> np.ndarray:
    """An op's input that must be 1-D, as an array."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a vector, got shape {format_dims(array.shape)}")
    return array


def detokenize_rows(input_values: Any, input_row_splits: Any, detokenize: Callable[[list[int]], bytes]) -> np.ndarray:
    """Each row of ids (a ragged tensor's values and row splits) turned back into text by a model's detokenize,
    as the Detokenize ops of the flatbuffer models give them."""
    ids = vector(input_values, "input_values").astype(np.int64).tolist()
    splits = vector(input_row_splits, "input_row_splits").astype(np.int64).tolist()
    out = []
    for start, stop in pairwise(splits):
        if not 0 <= start <= stop <= len(ids):
            raise ValueError(f"input_row_splits must be non-decreasing within [0, {len(ids)}], got "
                             f"[{start}, {stop}]")
        out.append(detokenize(ids[start:stop]))
    return string_array(out)
