"""SentencePiece: TensorFlow Text's SentencepieceOp, the resource holding a SentencePiece model, and the ops
that tokenize and detokenize with it, run by Google's `sentencepiece` library.

SentencepieceOp carries a serialized SentencePiece ModelProto in its `model` attr and yields a handle to a
`SentencepieceResource` named `container/shared_name` (the node's name standing in for an empty
shared_name, as for the lookup tables). The library parses a model once per distinct model bytes: every
resource, in every session, holding the same bytes shares one `SentencepieceModel`.

The ops that take the handle, as TF Text's kernels (sentencepiece_kernels.cc) define them:

- SentencepieceTokenizeOp / SentencepieceTokenizeWithOffsetsOp: each string of the input (any shape,
  flattened) as ids (out_type int32) or pieces (out_type string), a ragged row per string (row splits
  of Tsplits), plus each piece's byte offsets [begin, end) into its string. nbest_size 0 or 1 is the
  best segmentation; otherwise a sample (`nbest_size` > 1: one of the n best, weighted by exp(alpha *
  score); < 0: from the whole lattice; BPE models: BPE-dropout with probability alpha), random as in
  TensorFlow. nbest_size and alpha may be a scalar or one value per string. With return_nbest, each
  string gives its `nbest_size` best segmentations, one row each.
- add_bos, add_eos and reverse apply as TensorFlow's SentencePiece processor applies them (its
  "bos:eos:reverse" extra options, in that order): `<s>` prepended, `</s>` appended, then the whole row
  reversed, so a reversed row reads `</s> ... <s>`; the added pieces have offsets [0, 0).
- SentencepieceDetokenizeOp: each row of ids or pieces (values and splits) joined back into text, after
  the same extra options. An id outside the vocabulary is an IndexError ("Invalid id: N"), as it is
  TensorFlow's OutOfRange error; values empty makes every row "" whatever the splits say, as in TF Text.
- SentencepieceVocabSizeOp, SentencepieceIdToStringOp (an id outside the vocabulary is an IndexError:
  TensorFlow reads past the vocabulary and crashes), SentencepieceStringToIdOp (an unknown piece is the
  unknown id).

    >>> model = load_model(open("tiny_unigram.model", "rb").read())
    >>> model.encode([b"The quick fox"], detailed=False)
    [[32, 16, 51, 15, 52, 45, 63, 5, 94]]
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np
import sentencepiece as spm

from engine.proto import sentencepiece_pb2
from engine.runtime.resources import Resource, ResourceManager, resource_name
from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, string_array

__all__ = ["SentencepieceModel", "SentencepieceResource", "load_model"]

# A piece of an encoded string when its text and offsets are wanted: (id, piece, begin, end).
Piece = tuple[int, bytes, int, int]

# NOTE: the largest nbest_size the library serves (its kMaxNBestSize); TF Text's older library gives up to
# 1024 n-best segmentations, so a request for more than 512 is exact only when fewer than 512 exist.
_MAX_NBEST = 512


class SentencepieceModel:
    """A parsed SentencePiece model: encoding, decoding and its vocabulary, through the library's processor
    (whose methods are safe to call from concurrent runs)."""

    def __init__(self, proto: bytes):
        if not proto:
            raise ValueError("Model argument must be specified.")
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(proto)
            spec = sentencepiece_pb2.ModelProto.FromString(proto).trainer_spec
            pieces = processor.id_to_piece(list(range(processor.get_piece_size())))
            self.pieces = string_array(_bytes(p) for p in pieces)
        except Exception as e:  # noqa: BLE001  (the library's RuntimeError, protobuf's DecodeError, pieces not UTF-8)
            raise ValueError(f"the SentencePiece model cannot be loaded: {e}") from None
        self._sp = processor
        self.size = len(self.pieces)
        # TF Text's processor adds `<s>`/`</s>` as the trainer spec names them, and refuses to when the
        # piece is not in the vocabulary (PieceToId gives the unknown id).
        self._bos = self._extra_piece(spec.bos_piece)
        self._eos = self._extra_piece(spec.eos_piece)

    def _extra_piece(self, piece: bytes) -> tuple[int, bytes] | str:
        piece_id = self._sp.piece_to_id(piece)
        if self._sp.is_unknown(piece_id):
            return f"id for `{piece.decode('utf-8', 'replace')}` is not defined."
        return piece_id, piece

    def extras(self, add_bos: bool, add_eos: bool) -> tuple[tuple[int, bytes] | None, tuple[int, bytes] | None]:
        """The (id, piece) of `<s>` and `</s>` when they are to be added (None when not); ValueError when one
        is asked for and the model has none."""
        chosen = []
        for wanted, extra in ((add_bos, self._bos), (add_eos, self._eos)):
            if wanted and isinstance(extra, str):
                raise ValueError(extra)
            chosen.append(extra if wanted else None)
        return chosen[0], chosen[1]

    # --- encoding ---------------------------------------------------------------------------------------

    def encode(self, texts: list[bytes], *, detailed: bool, sampling: tuple[int, float] | None = None) -> list:
        """One row per text: its ids, or when `detailed` its pieces as (id, piece, begin, end); `sampling`
        (nbest_size, alpha) draws a segmentation instead of taking the best one."""
        out_type = "serialized_proto" if detailed else int
        if sampling is None:
            rows = self._call(self._sp.encode, texts, out_type=out_type, num_threads=1) if texts else []
        else:
            nbest_size, alpha = sampling
            if not np.isfinite(alpha):
                raise ValueError(f"alpha must be a finite number, got {alpha}")
            # NOTE: one string at a time, on this thread: the library's random generator is per thread, and the
            # batch call's worker threads would each start a new one (the same draws every call, once a seed
            # is set).
            rows = [self._call(self._sp.encode, text, out_type=out_type, enable_sampling=True, nbest_size=nbest_size,
                               alpha=alpha) for text in texts]
        return [_pieces(_parse(sentencepiece_pb2.SentencePieceText, r).pieces) for r in rows] if detailed else rows

    def nbest(self, text: bytes, nbest_size: int, *, detailed: bool) -> list:
        """The `nbest_size` best segmentations of `text` (fewer when there are fewer), best first."""
        asked = nbest_size
        nbest_size = min(nbest_size, _MAX_NBEST)
        if detailed:
            serialized = self._call(self._sp.nbest_encode, text, nbest_size=nbest_size, out_type="serialized_proto")
            rows = [_pieces(n.pieces) for n in _parse(sentencepiece_pb2.NBestSentencePieceText, serialized).nbests]
        else:
            rows = self._call(self._sp.nbest_encode, text, nbest_size=nbest_size, out_type=int)
        if asked > _MAX_NBEST and len(rows) == _MAX_NBEST:
            raise ValueError(f"nbest_size {asked} with return_nbest: the SentencePiece library gives at most "
                             f"{_MAX_NBEST} segmentations, and this string has at least that many")
        return rows

    # --- decoding and the vocabulary --------------------------------------------------------------------

    def decode_ids(self, ids: list[int]) -> bytes:
        for i in ids:
            if not 0 <= i < self.size:
                raise IndexError(f"Invalid id: {i}")
        return self._call(self._sp.decode, ids, out_type=bytes) if ids else b""

    def decode_pieces(self, pieces: list[bytes]) -> bytes:
        return self._call(self._sp.decode, pieces, out_type=bytes) if pieces else b""

    def piece_to_id(self, pieces: list[bytes]) -> list[int]:
        return [self._sp.piece_to_id(p) for p in pieces]

    def id_to_piece(self, ids: np.ndarray) -> np.ndarray:
        bad = (ids < 0) | (ids >= self.size)
        if bad.any():
            raise IndexError(f"id {int(ids[bad][0])} is not in the vocabulary [0, {self.size})")
        return self.pieces[ids]

    @staticmethod
    def _call(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:  # the library's own errors (absl statuses)
            raise ValueError(str(e)) from None


def _parse(message: Any, serialized: bytes) -> Any:
    """What the library serialized, read back (its pieces are UTF-8 unless the model's vocabulary is not)."""
    try:
        return message.FromString(serialized)
    except Exception as e:  # noqa: BLE001  (protobuf's DecodeError)
        raise ValueError(f"cannot read the SentencePiece library's {message.__name__}: {e}") from None


def _bytes(text: str | bytes) -> bytes:
    # NOTE: the library and protobuf give a piece that is not UTF-8 (a broken vocabulary's) as bytes.
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _pieces(pieces) -> list[Piece]:
    return [(p.id, _bytes(p.piece), p.begin, p.end) for p in pieces]


_MODELS: weakref.WeakValueDictionary[bytes, SentencepieceModel] = weakref.WeakValueDictionary()
_MODELS_LOCK = threading.Lock()


def load_model(proto: bytes) -> SentencepieceModel:
    """The model these bytes serialize, parsed once while any resource holds it."""
    with _MODELS_LOCK:
        model = _MODELS.get(proto)
        if model is None:
            model = _MODELS[proto] = SentencepieceModel(proto)
        return model


class SentencepieceResource(Resource):
    """What SentencepieceOp's handle points to: one SentencePiece model."""

    kind = "sentencepiece model"

    def __init__(self, name: str, model: SentencepieceModel):
        super().__init__(name)
        self.model = model

    def describe(self) -> str:
        return f"{self.kind} '{self.name}' ({self.model.size} pieces)"


# --- the ops --------------------------------------------------------------------------------------------------


@kernel("SentencepieceOp", devices=("cpu",), stateful=True)
def sentencepiece_op(xp: Any, *, model: Any = b"", container: str = "", shared_name: str = "",
                     use_node_name_sharing: bool = False, resources: ResourceManager, node_name: str) -> tuple:
    """A handle to the SentencePiece model of the `model` attr, created on first use."""
    # NOTE: without a shared_name the resource is private to the node in TensorFlow (use_node_name_sharing or
    # not): the node's name keys it here either way.
    name = resource_name(container, shared_name, node_name)
    proto = as_bytes(model)
    return (resources.get_or_create(name, SentencepieceResource,
                                    lambda: SentencepieceResource(name, load_model(proto))),)


def _model(handle: Any, op: str) -> SentencepieceModel:
    if not isinstance(handle, SentencepieceResource):
        raise TypeError(f"{op} needs a SentencepieceOp handle, got {type(handle).__name__}")
    return handle.model


def _flag(value: Any, name: str) -> bool:
    value = np.asarray(value)
    if value.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {format_dims(value.shape)}")
    return bool(value)


def _per_row(value: Any, rows: int, name: str, cast) -> list:
    """A scalar or a vector of one value per input string, as a list of `rows` Python values."""
    value = np.asarray(value)
    if value.ndim == 0:
        return [cast(value)] * rows
    if value.ndim != 1 or value.shape[0] != rows:
        raise ValueError(f"{name} must be a scalar or a vector of one value per input string ({rows}), got shape "
                         f"{format_dims(value.shape)}")
    return [cast(v) for v in value.tolist()]


def _segment(model: SentencepieceModel, texts: list[bytes], nbest_size: Any, alpha: Any, return_nbest: bool,
             detailed: bool) -> list:
    """The rows the tokenize ops output, before the extra options: one per string, or its n best."""
    if return_nbest:
        size = np.asarray(nbest_size)
        if size.ndim != 0:
            raise ValueError(f"When return_nbest is true nbest_size must be a scalar; got {format_dims(size.shape)} "
                             "instead")
        if int(size) < 1:
            raise ValueError(f"When return_nbest is true nbest_size must be >= 1; got {int(size)}")
        return [row for text in texts for row in model.nbest(text, int(size), detailed=detailed)]
    if np.ndim(nbest_size) == 0 and int(nbest_size) in (0, 1):
        return model.encode(texts, detailed=detailed)
    sizes = _per_row(nbest_size, len(texts), "nbest_size", int)
    alphas = _per_row(alpha, len(texts), "alpha", float)
    return [model.encode([text], detailed=detailed, sampling=None if n in (0, 1) else (n, a))[0]
            for text, n, a in zip(texts, sizes, alphas)]


def _with_extras(row: list, bos: Any, eos: Any, reverse: bool) -> list:
    """TF Text's extra options on one row, in its order: `<s>` first, `</s>` last, then all reversed."""
    row = ([bos] if bos is not None else []) + row + ([eos] if eos is not None else [])
    if reverse:
        row.reverse()
    return row


def _splits(rows: list, dtype: Any) -> np.ndarray:
    splits = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=splits[1:])
    return splits.astype(dtype)


def _tokenize(op: str, sp_handle: Any, input: Any, nbest_size: Any, alpha: Any, add_bos: Any, add_eos: Any,
              reverse: Any, out_type: Any, Tsplits: Any, return_nbest: bool, offsets: bool) -> tuple:
    model = _model(sp_handle, op)
    texts = flat_strings(input)
    bos, eos = model.extras(_flag(add_bos, "add_bos"), _flag(add_eos, "add_eos"))
    reverse = _flag(reverse, "reverse")
    pieces = np.dtype(out_type) == object
    detailed = offsets or pieces
    rows = _segment(model, texts, nbest_size, alpha, bool(return_nbest), detailed)
    # The added pieces as rows hold them: ids, or (id, piece, begin, end) with the offsets [0, 0).
    bos, eos = ((None if e is None else (e[0], e[1], 0, 0) if detailed else e[0]) for e in (bos, eos))
    if bos is not None or eos is not None or reverse:
        rows = [_with_extras(r, bos, eos, reverse) for r in rows]
    splits = _splits(rows, Tsplits)
    if not detailed:
        return np.fromiter((i for r in rows for i in r), dtype=np.int32), splits
    flat = [p for r in rows for p in r]
    values = string_array(p[1] for p in flat) if pieces else np.array([p[0] for p in flat], dtype=np.int32)
    if not offsets:
        return values, splits
    starts = np.array([p[2] for p in flat], dtype=np.int64)
    limits = np.array([p[3] for p in flat], dtype=np.int64)
    return values, splits, starts, limits


@kernel("SentencepieceTokenizeOp", devices=("cpu",), outputs=2, stateful=True)
def sentencepiece_tokenize(xp: Any, sp_handle: Any, input: Any, nbest_size: Any, alpha: Any, add_bos: Any,
                           add_eos: Any, reverse: Any, *, out_type: Any = np.dtype(np.int32),
                           Tsplits: Any = np.dtype(np.int64), return_nbest: bool = False) -> tuple:
    """Each string's pieces (ids or text) as a ragged row: values and row splits."""
    return _tokenize("SentencepieceTokenizeOp", sp_handle, input, nbest_size, alpha, add_bos, add_eos, reverse,
                     out_type, Tsplits, return_nbest, offsets=False)


@kernel("SentencepieceTokenizeWithOffsetsOp", devices=("cpu",), outputs=4, stateful=True)
def sentencepiece_tokenize_with_offsets(xp: Any, sp_handle: Any, input: Any, nbest_size: Any, alpha: Any,
                                        add_bos: Any, add_eos: Any, reverse: Any, *, out_type: Any = np.dtype(np.int32),
                                        Tsplits: Any = np.dtype(np.int64), return_nbest: bool = False) -> tuple:
    """As SentencepieceTokenizeOp, plus each piece's byte offsets [start, limit) into its string."""
    return _tokenize("SentencepieceTokenizeWithOffsetsOp", sp_handle, input, nbest_size, alpha, add_bos, add_eos,
                     reverse, out_type, Tsplits, return_nbest, offsets=True)


def _row_bounds(splits: np.ndarray, values: int) -> list[tuple[int, int]]:
    bounds = list(zip(splits[:-1].tolist(), splits[1:].tolist()))
    for i, (start, end) in enumerate(bounds):
        if start > values:
            raise IndexError(f"Splits and values do not match; split {start} but values size is {values}")
        if not 0 <= start <= end <= values:
            raise ValueError(f"input_splits must be non-decreasing and within [0, {values}]; row {i} is "
                             f"[{start}, {end})")
    return bounds


@kernel("SentencepieceDetokenizeOp", devices=("cpu",), stateful=True)
def sentencepiece_detokenize(xp: Any, sp_handle: Any, input_values: Any, input_splits: Any, add_bos: Any,
                             add_eos: Any, reverse: Any, *, T: Any = np.dtype(np.int32),
                             Tsplits: Any = np.dtype(np.int64)) -> tuple:
    """Each row of ids or pieces joined back into text."""
    model = _model(sp_handle, "SentencepieceDetokenizeOp")
    splits = np.asarray(input_splits).reshape(-1)
    if splits.size == 0:
        raise ValueError("input_splits must have at least 1 element.")
    bos, eos = model.extras(_flag(add_bos, "add_bos"), _flag(add_eos, "add_eos"))
    reverse = _flag(reverse, "reverse")
    values = np.asarray(input_values).reshape(-1)
    if values.size == 0:
        # NOTE: TF Text decodes nothing when there are no values: every row is "", whatever the splits.
        return (string_array([b""] * (splits.size - 1)),)
    pieces = values.dtype == object
    items = flat_strings(values) if pieces else values.tolist()
    decode = model.decode_pieces if pieces else model.decode_ids
    slot = 1 if pieces else 0
    bos = None if bos is None else bos[slot]
    eos = None if eos is None else eos[slot]
    return (string_array(decode(_with_extras(items[start:end], bos, eos, reverse))
                         for start, end in _row_bounds(splits, len(items))),)


@kernel("SentencepieceVocabSizeOp", devices=("cpu",), stateful=True)
def sentencepiece_vocab_size(xp: Any, sp_handle: Any) -> tuple:
    """The number of pieces in the model's vocabulary."""
    return (np.array(_model(sp_handle, "SentencepieceVocabSizeOp").size, dtype=np.int32),)


@kernel("SentencepieceIdToStringOp", devices=("cpu",), stateful=True)
def sentencepiece_id_to_string(xp: Any, sp_handle: Any, input: Any) -> tuple:
    """The piece of each id, in the input's shape."""
    ids = np.asarray(input)
    return (_model(sp_handle, "SentencepieceIdToStringOp").id_to_piece(ids.astype(np.int64)),)


@kernel("SentencepieceStringToIdOp", devices=("cpu",), stateful=True)
def sentencepiece_string_to_id(xp: Any, sp_handle: Any, input: Any) -> tuple:
    """The id of each piece (the unknown id for a string that is no piece), in the input's shape."""
    strings = np.asarray(input, dtype=object)
    ids = _model(sp_handle, "SentencepieceStringToIdOp").piece_to_id(flat_strings(strings))
    return (np.array(ids, dtype=np.int32).reshape(strings.shape),)
