"""FastBertNormalize: TF Text's BERT text normalization (FastBertNormalizer, the first step of
FastBertTokenizer), run on the model flatbuffer the Python API builds.

The model maps each character that normalization changes (its UTF-8 bytes, through a darts-clone trie)
to its normalized string: control characters to a space or nothing, and with lower_case_nfd_strip_accents
also lower-casing, NFD and dropping accents. Every other character is copied. TF Text steps through the
input with ICU's U8_FWD_1 and looks each step up in the trie; an ill-formed sequence is one step, which the
trie does not hold, so it is copied unchanged.

With get_offsets, each byte of a normalized string maps to the byte it came from in the input: the bytes
of a copied character to their own positions, all the bytes a changed character became to the start of
that character; one more entry maps the end of the output to the end of the input. Without it, the
offsets are empty and the row splits all zero, as TF Text returns them.

Each character's entry is looked up in the model's trie once and kept; valid UTF-8 is then normalized with
str.translate and its offsets computed for the whole batch at once with numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import string_array
from kernels.text.bert_chars import flat_texts, utf8_steps
from kernels.text.darts_trie import DartsTrie
from kernels.text.flatbuffer_models import (
    FastBertNormalizerModel,
    cached_model,
    read_fast_bert_normalizer_model,
)

__all__ = ["FastBertNormalizer", "fast_bert_normalize"]

_CHANGED = 0x40000000
_LENGTH_BITS = 6
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1
_OFFSET_MASK = (_CHANGED - 1) ^ _LENGTH_MASK
_CODE_POINTS = 0x110000


class FastBertNormalizer:
    """A decoded FastBertNormalizerModel.

        >>> normalizer = FastBertNormalizer(read_fast_bert_normalizer_model(model))
        >>> normalizer.normalize_all([b"Caf\\xc3\\xa9"], get_offsets=True)
        ([b'cafe'], array([0, 1, 2, 3, 5]), array([0, 5]))
    """

    def __init__(self, model: FastBertNormalizerModel):
        self.trie = DartsTrie(model.trie_array)
        self.data_for_zero = model.data_for_codepoint_zero
        self.pool = model.normalized_string_pool
        # Per code point, filled as characters are first seen: known, changed, the normalized length.
        self._known = np.zeros(_CODE_POINTS, dtype=bool)
        self._changed = np.zeros(_CODE_POINTS, dtype=bool)
        self._length = np.zeros(_CODE_POINTS, dtype=np.uint8)  # at most 63 bytes
        self._translate: dict[int, str] = {}
        self._bytes_only: set[int] = set()  # changed characters whose normalized bytes are not UTF-8

    def _normalized(self, unit: bytes) -> bytes | None:
        """What one U8_FWD_1 step normalizes to, or None when it is copied (LookupData, GetNormalizedString)."""
        data = self.data_for_zero if not unit or unit[0] == 0 else (self.trie.lookup(unit) or 0)
        if not data & _CHANGED:
            return None
        length = data & _LENGTH_MASK
        offset = (data & _OFFSET_MASK) >> _LENGTH_BITS
        if not length or offset + length > len(self.pool):
            return b""
        return self.pool[offset:offset + length]

    def _learn(self, code_points: np.ndarray) -> None:
        unknown = ~self._known[code_points]
        if not unknown.any():
            return
        for cp in np.unique(code_points[unknown]).tolist():
            normalized = self._normalized(chr(cp).encode())
            if normalized is not None:
                self._changed[cp] = True
                self._length[cp] = len(normalized)
                try:
                    self._translate[cp] = normalized.decode("utf-8")
                except UnicodeDecodeError:
                    self._bytes_only.add(cp)
            self._known[cp] = True

    def normalize_all(self, texts: list[bytes], get_offsets: bool) -> tuple[list[bytes], np.ndarray, np.ndarray]:
        """FastBertNormalize's outputs for `texts`: the normalized texts, offsets and their row splits."""
        decoded: list[str | None] = []
        for text in texts:
            try:
                decoded.append(text.decode("utf-8"))
            except UnicodeDecodeError:
                decoded.append(None)
        fast = [i for i, s in enumerate(decoded) if s is not None]
        joined = "".join(decoded[i] for i in fast)
        code_points = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4").astype(np.int64)
        self._learn(code_points)
        if self._bytes_only and not self._bytes_only.isdisjoint(map(ord, joined)):
            fast = [i for i in fast if self._bytes_only.isdisjoint(map(ord, decoded[i]))]
            joined = "".join(decoded[i] for i in fast)
            code_points = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4").astype(np.int64)
        out: list[bytes] = list(texts)
        changed = self._changed[code_points]
        char_counts = np.fromiter((len(decoded[i]) for i in fast), dtype=np.int64, count=len(fast))
        char_ends = np.cumsum(char_counts)
        changes = np.concatenate([[0], np.cumsum(changed)])
        any_changed = changes[char_ends] > changes[char_ends - char_counts]
        for i, change in zip(fast, any_changed.tolist()):
            if change:
                out[i] = decoded[i].translate(self._translate).encode("utf-8")
        slow = sorted(set(range(len(texts))) - set(fast))
        slow_offsets = {}
        for i in slow:
            out[i], slow_offsets[i] = self._normalize_bytes(texts[i], get_offsets)
        if not get_offsets:
            return out, np.zeros(0, dtype=np.int64), np.zeros(len(texts) + 1, dtype=np.int64)
        fast_offsets = self._fast_offsets(code_points, changed, char_counts, [len(texts[i]) for i in fast])
        if not slow:
            offsets = fast_offsets
        else:
            bounds = np.cumsum([len(out[i]) + 1 for i in fast])[:-1]
            per_text = dict(zip(fast, np.split(fast_offsets, bounds))) | slow_offsets
            offsets = np.concatenate([np.zeros(0, dtype=np.int64)] + [per_text[i] for i in range(len(texts))])
        splits = np.concatenate([[0], np.cumsum([len(o) + 1 for o in out])]).astype(np.int64)
        return out, offsets.astype(np.int64), splits

    def _fast_offsets(self, code_points: np.ndarray, changed: np.ndarray, char_counts: np.ndarray,
                      byte_lengths: list[int]) -> np.ndarray:
        """The offsets of valid UTF-8 texts, all at once: theirs, each followed by its input's length."""
        width = 1 + (code_points >= 0x80) + (code_points >= 0x800) + (code_points >= 0x10000)
        out_width = np.where(changed, self._length[code_points], width)
        lengths = np.asarray(byte_lengths, dtype=np.int64)
        text_starts = np.cumsum(lengths) - lengths
        starts = np.cumsum(width) - width - np.repeat(text_starts, char_counts)
        total = int(out_width.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(out_width) - out_width, out_width)
        body = np.repeat(starts, out_width) + np.where(np.repeat(changed, out_width), 0, within)
        out_ends = np.concatenate([[0], np.cumsum(out_width)])[np.cumsum(char_counts)]
        return np.insert(body, out_ends, lengths)

    def _normalize_bytes(self, text: bytes, get_offsets: bool) -> tuple[bytes, np.ndarray]:
        """NormalizeText, step by step (ill-formed text, or characters normalized to bytes that are not UTF-8)."""
        parts: list[bytes] = []
        offsets: list[int] = []
        for start, end, _ in utf8_steps(text):
            normalized = self._normalized(text[start:end])
            if normalized is None:
                parts.append(text[start:end])
                offsets.extend(range(start, end))
            else:
                parts.append(normalized)
                offsets.extend([start] * len(normalized))
        offsets.append(len(text))
        return b"".join(parts), np.array(offsets if get_offsets else [], dtype=np.int64)


@kernel("FastBertNormalize", devices=("cpu",), outputs=3)
def fast_bert_normalize(xp: Any, input_values: Any, fast_bert_normalizer_model: Any, *,
                        get_offsets: bool = False) -> tuple:
    """Each string normalized for BERT, with the byte offsets from output back to input (get_offsets)."""
    values = np.asarray(input_values)
    if values.ndim != 1:
        raise ValueError(f"input_values must be a vector, got shape {format_dims(values.shape)}")
    normalizer = cached_model(fast_bert_normalizer_model, "fast_bert_normalizer_model", "fast_bert_normalizer",
                              lambda data: FastBertNormalizer(read_fast_bert_normalizer_model(data)))
    out, offsets, splits = normalizer.normalize_all(flat_texts(values), get_offsets)
    return string_array(out, values.shape), offsets, splits
