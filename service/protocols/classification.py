"""Triton's classification extension: an output asked for with `"parameters": {"classification": k}` comes
back as its top k classes instead of its values, a BYTES tensor of "<value>:<index>[:<label>]" strings,
[batch, k] for a model that batches (each row's classes), [k] for one that does not (the whole output's).

Values are ordered as the output's type orders them, largest first, ties by the lower index (Triton sorts
without saying; this is deterministic). A value is written as C++'s std::to_string writes it, as Triton
does: integers as they are, floats with six decimals ("3.300000"). Only integer, FP32 and FP64 outputs can
be classified, as in Triton.

    >>> top_k(np.array([[1.1, 3.3, 0.5, 2.4]], np.float32), 2, batched=True)
    array([[b'3.300000:1', b'2.400000:3']], dtype=object)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.errors import BadRequest
from service.protocols.codecs.v2_tensors import datatype_of

__all__ = ["classification_count", "top_k"]


def classification_count(parameters: dict, output: str) -> int:
    """The `classification` parameter of a requested output: 0 when absent; BadRequest unless a count >= 0."""
    count = parameters.get("classification", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise BadRequest(f"output '{output}': parameter 'classification' must be a count of classes, got {count!r}")
    return count


def _text(value: np.generic) -> str:
    return f"{float(value):f}" if value.dtype.kind == "f" else str(int(value))


def _classes(row: np.ndarray, k: int, labels: Sequence[str] | None) -> list[bytes]:
    order = sorted(range(row.size), key=lambda i: row[i], reverse=True)  # stable: ties keep the lower index first
    classes = []
    for index in order[:k]:
        text = f"{_text(row[index])}:{index}"
        if labels is not None and index < len(labels):
            text += f":{labels[index]}"
        classes.append(text.encode())
    return classes


def top_k(values: np.ndarray, k: int, *, batched: bool, labels: Sequence[str] | None = None) -> np.ndarray:
    """The top `k` classes of `values` (of each row when `batched`) as a BYTES array; BadRequest for a type
    without an order Triton classifies by."""
    if values.dtype.kind not in "iuf" or values.dtype == np.float16:
        raise BadRequest(f"class result not available for output due to unsupported type '{datatype_of(values.dtype)}'")
    if batched and values.ndim >= 1:
        rows = values.reshape(values.shape[0], -1)
        count = min(k, rows.shape[1])
        out = np.empty((rows.shape[0], count), dtype=object)
        for b, row in enumerate(rows):
            out[b] = _classes(row, count, labels)
        return out
    flat = values.reshape(-1)
    out = np.empty((min(k, flat.size),), dtype=object)
    out[:] = _classes(flat, out.size, labels)
    return out
