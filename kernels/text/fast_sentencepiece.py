"""Fast SentencePiece: TF Text's TFText>FastSentencepieceTokenize and TFText>FastSentencepieceDetokenize, which
take their model as a flatbuffer (a uint8 tensor) that text.FastSentencepieceTokenizer converts from the
SentencePiece ModelProto (TF Text's model_converter), and run TF Text's own encoder over it, not the
SentencePiece library's (core/kernels/sentencepiece/optimized_encoder.cc, optimized_decoder.cc).

The encoder config holds the vocabulary as a double-array trie of pieces (normal and user-defined ones;
control, unknown and byte pieces are left out) with every piece's score, the unknown id and its penalty (the
lowest score less 10), the bos/eos ids, and the normalizer: a trie of prefixes with their replacements (the
model's precompiled charsmap), add_dummy_prefix, remove_extra_whitespaces and escape_whitespaces. A string is
normalized byte by byte, as TF Text does it (whitespace is space, tab, CR and LF; a byte no prefix matches is
copied), then segmented by a Viterbi pass over a lattice of byte positions in float32 scores: any piece the
trie matches, or one byte as the unknown id at the penalty, consecutive unknown bytes merging into one. So a
BPE model is segmented by its scores as if it were a unigram one, exactly as TF Text does.

The decoder config holds each id's text (the piece with U+2581 as a space; " ⁇ " for the unknown piece; ""
for control and byte pieces); a row's text is its pieces joined, the first piece losing one leading space
when the model adds a dummy prefix (only the first: after `<s>`, which is "", none is removed). An id outside
the vocabulary fails with TF Text's "Sentencepiece conversion failed" (a negative one too: TF Text compares
unsigned). A row's ids start where the previous row's ended: only the differences of the splits are read.

A config is parsed once per model buffer (by the identity of the constant array holding it, then by its
bytes). The flatbuffers package reads the tables; the tries are walked as TF Text walks them, by
kernels.text.darts_trie (the layout the fast WordPiece models use too).
"""

from __future__ import annotations

import itertools
import math
import struct
import threading
import weakref
from typing import Any

import numpy as np
from flatbuffers import encode, number_types
from flatbuffers.table import Table

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings, string_array
from kernels.text.darts_trie import DartsTrie

__all__ = ["DecoderConfig", "EncoderConfig", "decode_ids", "encode_string"]

_SPACE_SYMBOL = "\u2581".encode()
_WHITESPACE = frozenset(b" \t\r\n")
_F32 = struct.Struct("<f")
_FAILED = "Sentencepiece conversion failed"


def _f32(x: float) -> float:
    """x rounded to float32, as TF Text's float lattice scores are (past float32's range: infinite)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _root(buffer: bytes) -> Table:
    if len(buffer) < 4:
        raise ValueError(f"a fast SentencePiece model must be a flatbuffer; got {len(buffer)} bytes")
    return Table(bytearray(buffer), encode.Get(number_types.UOffsetTFlags.packer_type, buffer, 0))


def _field(table: Table, index: int, flags: Any, default: Any) -> Any:
    offset = table.Offset(4 + 2 * index)
    return table.Get(flags, offset + table.Pos) if offset else default


def _vector(table: Table, index: int, flags: Any) -> np.ndarray | None:
    offset = table.Offset(4 + 2 * index)
    return table.GetVectorAsNumpy(flags, offset) if offset else None


def _trie(table: Table, index: int) -> DartsTrie | None:
    offset = table.Offset(4 + 2 * index)
    if not offset:
        return None
    nodes = _vector(Table(table.Bytes, table.Indirect(offset + table.Pos)), 0, number_types.Uint32Flags)
    return DartsTrie(np.zeros(0, np.uint32) if nodes is None else nodes, "the model's trie", allow_empty=True)


class EncoderConfig:
    """TF Text's EncoderConfig flatbuffer (encoder_config.fbs), read once."""

    def __init__(self, buffer: bytes):
        try:
            root = _root(buffer)
            f = number_types
            self.version = _field(root, 0, f.Int8Flags, 0)
            self.start_code = _field(root, 1, f.Int32Flags, 0)
            self.end_code = _field(root, 2, f.Int32Flags, 0)
            self.unknown_code = _field(root, 3, f.Int32Flags, -1)
            self.unknown_penalty = _field(root, 4, f.Float32Flags, 0.0)
            self.encoding_offset = _field(root, 5, f.Int32Flags, 0)
            self.pieces = _trie(root, 6) or DartsTrie(np.zeros(0, np.uint32), allow_empty=True)
            scores = _vector(root, 7, f.Float32Flags)
            self.scores = [] if scores is None else scores.tolist()
            self.remove_extra_whitespaces = bool(_field(root, 8, f.BoolFlags, False))
            self.add_dummy_prefix = bool(_field(root, 9, f.BoolFlags, False))
            self.escape_whitespaces = bool(_field(root, 10, f.BoolFlags, False))
            self.prefixes = _trie(root, 11)
            replacements = _vector(root, 12, f.Int8Flags)
            self.replacements = None if replacements is None else replacements.view(np.uint8).tobytes()
        except (struct.error, IndexError, TypeError, ValueError) as e:  # flatbuffers reads what the bytes say
            raise ValueError(f"the fast SentencePiece model is not a valid EncoderConfig flatbuffer: {e}") from None

    def replacement(self, data: bytes, start: int) -> tuple[int, bytes]:
        """The longest normalized prefix at `start` (its length and replacement), or (0, b"")."""
        match = None
        for match in self.prefixes.prefix_matches(data, start):
            pass
        if match is None or not 0 <= match[0] < len(self.replacements):
            return 0, b""
        value, length = match
        end = self.replacements.find(b"\0", value)
        return length, self.replacements[value:end if end >= 0 else len(self.replacements)]


def _rewrite(text: bytes, offsets: list[int], rule) -> tuple[bytes, list[int]]:
    """TF Text's process_string: `rule(text, i)` gives (bytes consumed, replacement) at each position, (0, _)
    to copy one byte; each replacement byte keeps the offset of the first byte it replaces."""
    out = bytearray()
    out_offsets: list[int] = []
    i = 0
    while i < len(text):
        consumed, new = rule(text, i)
        if consumed == 0:
            out.append(text[i])
            out_offsets.append(offsets[i])
            i += 1
            continue
        out += new
        out_offsets += [offsets[i]] * len(new)
        i += consumed
    return bytes(out), out_offsets


def _collapse_whitespace(text: bytes, i: int) -> tuple[int, bytes]:
    run = i
    while run < len(text) and text[run] in _WHITESPACE:
        run += 1
    return (run - i, b" ") if run - i > 1 else (0, b"")


def _escape_whitespace(text: bytes, i: int) -> tuple[int, bytes]:
    return (1, _SPACE_SYMBOL) if text[i] in _WHITESPACE else (0, b"")


def normalize(text: bytes, config: EncoderConfig) -> tuple[bytes, list[int]]:
    """TF Text's NormalizeString: the normalized bytes and, for each, the offset of the input byte it came from."""
    offsets = list(range(len(text)))
    if not text:
        return text, offsets
    if config.add_dummy_prefix:
        text, offsets = b" " + text, [0] + offsets
    if config.prefixes is not None and config.replacements is not None:
        text, offsets = _rewrite(text, offsets, config.replacement)
    if config.remove_extra_whitespaces:
        text, offsets = _rewrite(text, offsets, _collapse_whitespace)
        if text and text[-1] in _WHITESPACE:
            text, offsets = text[:-1], offsets[:-1]
    if config.escape_whitespaces:
        text, offsets = _rewrite(text, offsets, _escape_whitespace)
    return text, offsets


def encode_string(text: bytes, config: EncoderConfig, add_bos: bool, add_eos: bool, reverse: bool) -> list[int]:
    """TF Text's EncodeString: the ids of `text`'s best segmentation over its normalized bytes."""
    if config.version != 0:
        raise ValueError(_FAILED)
    norm, _ = normalize(text, config)
    length = len(norm)
    scores, unknown, penalty = config.scores, config.unknown_code, config.unknown_penalty
    # The lattice: for each byte position, the best (score, code, previous position) reaching it.
    best_score = [0.0] * (length + 1)
    code = [-1] * (length + 1)
    prev = [-1] * (length + 1)
    for i in range(length):
        if i > 0 and prev[i] < 0:
            continue  # unreachable
        if unknown >= 0:
            score = _f32(best_score[i] + penalty)
            if prev[i + 1] < 0 or best_score[i + 1] < score:
                # NOTE: an unknown byte after an unknown byte extends it: one unknown code for the run.
                best_score[i + 1], code[i + 1], prev[i + 1] = score, unknown, prev[i] if code[i] == unknown else i
        for piece, size in config.pieces.prefix_matches(norm, i):
            if not 0 <= piece < len(scores):
                continue
            score = _f32(best_score[i] + scores[piece])
            if prev[i + size] < 0 or best_score[i + size] < score:
                best_score[i + size], code[i + size], prev[i + size] = score, piece, i
    codes = [config.end_code] if add_eos else []
    if prev[length] >= 0:
        pos = length
        while pos > 0:
            codes.append(code[pos] if code[pos] == unknown else code[pos] + config.encoding_offset)
            pos = prev[pos]
    if add_bos:
        codes.append(config.start_code)
    if not reverse:
        codes.reverse()
    return codes


class DecoderConfig:
    """TF Text's DecoderConfig flatbuffer (decoder_config.fbs), read once."""

    def __init__(self, buffer: bytes):
        try:
            root = _root(buffer)
            f = number_types
            self.version = _field(root, 0, f.Int8Flags, 0)
            self.encoding_offset = _field(root, 1, f.Int32Flags, 0)
            self.pieces: list[bytes] = []
            offset = root.Offset(4 + 2 * 2)
            if offset:
                start = root.Vector(offset)
                # NOTE: TF Text appends each piece as a C string: up to its first NUL byte.
                self.pieces = [root.String(start + 4 * i).split(b"\0", 1)[0] for i in range(root.VectorLen(offset))]
            self.remove_dummy_prefix = bool(_field(root, 5, f.BoolFlags, False))
        except (struct.error, IndexError, TypeError, ValueError) as e:  # flatbuffers reads what the bytes say
            raise ValueError(f"the fast SentencePiece model is not a valid DecoderConfig flatbuffer: {e}") from None


def decode_ids(ids: list[int], config: DecoderConfig) -> bytes:
    """TF Text's DecodeString: the pieces of `ids` joined, the first losing a leading space."""
    if config.version != 0:
        raise ValueError(_FAILED)
    out = bytearray()
    strip = config.remove_dummy_prefix
    for i in ids:
        real = i - config.encoding_offset
        if not 0 <= real < len(config.pieces):
            raise IndexError(f"{_FAILED}: id {i} is not in the vocabulary [0, {len(config.pieces)})")
        piece = config.pieces[real]
        out += piece[1:] if strip and piece.startswith(b" ") else piece
        strip = False
    return bytes(out)


# --- one parse per model buffer -------------------------------------------------------------------------------

_LOCK = threading.Lock()
_BY_ARRAY: dict[tuple[int, type], tuple[weakref.ref, Any]] = {}
_BY_BYTES: weakref.WeakValueDictionary[tuple[bytes, type], Any] = weakref.WeakValueDictionary()


def _config(sp_model: Any, kind: type) -> Any:
    """The `kind` config of a model buffer: found by the array's identity (a constant is the same array every
    run), else by its bytes, else parsed."""
    array = np.asarray(sp_model)
    if array.dtype != np.uint8:
        raise TypeError(f"sp_model must be a uint8 tensor, got {array.dtype}")
    key = (id(array), kind)
    with _LOCK:
        found = _BY_ARRAY.get(key)
        if found is not None and found[0]() is array:
            return found[1]
    buffer = array.tobytes()
    with _LOCK:
        config = _BY_BYTES.get((buffer, kind))
    if config is None:
        config = kind(buffer)
        with _LOCK:
            config = _BY_BYTES.setdefault((buffer, kind), config)

    def forget(ref: weakref.ref, key: tuple[int, type] = key) -> None:
        with _LOCK:
            if _BY_ARRAY.get(key, (None,))[0] is ref:
                del _BY_ARRAY[key]

    with _LOCK:
        # NOTE: the entry holds the config, and the array's death drops the entry (and, with the last entry
        # holding it, the config).
        _BY_ARRAY[key] = (weakref.ref(array, forget), config)
    return config


def _flag(value: Any, name: str) -> bool:
    value = np.asarray(value)
    if value.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {format_dims(value.shape)}")
    return bool(value)


@kernel("TFText>FastSentencepieceTokenize", devices=("cpu",), outputs=2)
def fast_sentencepiece_tokenize(xp: Any, sp_model: Any, input: Any, nbest_size: Any, alpha: Any, add_bos: Any,
                                add_eos: Any, reverse: Any, *, out_type: Any = np.dtype(np.int32),
                                Tsplits: Any = np.dtype(np.int32)) -> tuple:
    """Each string's ids as a ragged row (int32 values and row splits); nbest_size and alpha are not read."""
    if np.dtype(out_type) != np.int32 or np.dtype(Tsplits) != np.int32:
        raise TypeError(f"TF Text's FastSentencepieceTokenize kernel outputs int32 ids and int32 splits; the node "
                        f"asks for out_type {np.dtype(out_type)} and Tsplits {np.dtype(Tsplits)}")
    config = _config(sp_model, EncoderConfig)
    flags = (_flag(add_bos, "add_bos"), _flag(add_eos, "add_eos"), _flag(reverse, "reverse"))
    rows = [encode_string(text, config, *flags) for text in flat_strings(input)]
    splits = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in rows], out=splits[1:])
    return np.fromiter((c for r in rows for c in r), dtype=np.int32), splits


@kernel("TFText>FastSentencepieceDetokenize", devices=("cpu",))
def fast_sentencepiece_detokenize(xp: Any, sp_model: Any, input_values: Any, input_splits: Any, *,
                                  Tsplits: Any = np.dtype(np.int64)) -> tuple:
    """Each row of ids back to text. TF Text reads a row's ids from where the previous row's ended: the first
    split is not read, only the differences of the splits."""
    config = _config(sp_model, DecoderConfig)
    values = np.asarray(input_values).reshape(-1).tolist()
    splits = np.asarray(input_splits).reshape(-1).tolist()
    if not splits:
        raise ValueError("input_splits must have at least 1 element.")
    out, start = [], 0
    for begin, end in itertools.pairwise(splits):
        size = end - begin
        if size < 0 or start + size > len(values):
            raise ValueError("input_splits must be monotonically non-decreasing and within bounds.")
        out.append(decode_ids(values[start:start + size], config))
        start += size
    return (string_array(out),)
