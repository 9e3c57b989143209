"""Hashed feature crosses as one compiled loop: the outputs of SparseCross (hashed_output) and SparseCrossHashed
once each feature is a 64-bit fingerprint, where the twin (kernels.sparse.cross) walks the cartesian products
in Python, one `FingerprintCat64` chain per output value.

The columns come as one array of fingerprints with a table of where each column's lie: a sparse column's
fingerprints and the row index of each (its entries' indices[:, 0]), read as TensorFlow walks them (while
the rows are non-decreasing and within the batch); a dense column's fingerprints row by row, `width` per row.
Row b of the output lists the products of b's features, the last column varying fastest, each chained from
`start` (or from its first feature) and taken modulo `num_buckets` (2^63 - 1 when 0), as the twin does.
"""

from __future__ import annotations

import numpy as np

from kernels.jit import compiled

__all__ = ["hashed_crosses"]

_K_MUL = np.uint64(0xC6A4A7935BD1E995)
_SHIFT = np.uint64(47)
_INT64_MAX = np.uint64(2**63 - 1)

_UINT64S = "Array(uint64, 1, 'C', readonly=True)"
_INT64S = "Array(int64, 1, 'C', readonly=True)"
_TABLE = "Array(int64, 2, 'C', readonly=True)"


@compiled(f"Tuple((int64[:, ::1], int64[::1], int64))({_UINT64S}, {_INT64S}, {_TABLE}, int64, uint64, boolean, int64)",
          ops=("SparseCross", "SparseCrossHashed"))
def _crosses(fingerprints, rows, table, batch, start, from_start, num_buckets):  # pragma: no cover - compiled
    """table[c] = (first fingerprint, count, first row index or -1 for a dense column, dense width)."""
    columns = table.shape[0]
    firsts = np.zeros((columns, batch), np.int64)  # each row's first feature in `fingerprints`, per column
    counts = np.zeros((columns, batch), np.int64)
    for c in range(columns):
        begin, count, row_at, width = table[c, 0], table[c, 1], table[c, 2], table[c, 3]
        if row_at < 0:
            for b in range(batch):
                firsts[c, b] = begin + b * width
                counts[c, b] = width
            continue
        previous = 0
        for i in range(count):
            row = rows[row_at + i]
            if row < previous or row >= batch:
                break  # TensorFlow's walk stops at the first entry out of order or out of range
            if counts[c, row] == 0:
                firsts[c, row] = begin + i
            counts[c, row] += 1
            previous = row
    total = 0
    widest = 0
    for b in range(batch):
        product = 1
        for c in range(columns):
            product *= counts[c, b]
        total += product
        widest = max(widest, product)
    indices = np.empty((total, 2), np.int64)
    values = np.empty(total, np.int64)
    digits = np.zeros(columns, np.int64)
    buckets = np.uint64(num_buckets) if num_buckets > 0 else _INT64_MAX
    at = 0
    for b in range(batch):
        product = 1
        for c in range(columns):
            product *= counts[c, b]
        for c in range(columns):
            digits[c] = 0
        for p in range(product):
            hashed = start
            for c in range(columns):
                feature = fingerprints[firsts[c, b] + digits[c]]
                if c == 0 and not from_start:
                    hashed = feature
                    continue
                mixed = feature * _K_MUL  # FingerprintCat64(hashed, feature)
                mixed = (mixed ^ (mixed >> _SHIFT)) * _K_MUL
                result = (hashed ^ _K_MUL ^ mixed) * _K_MUL
                result = (result ^ (result >> _SHIFT)) * _K_MUL
                hashed = result ^ (result >> _SHIFT)
            indices[at, 0] = b
            indices[at, 1] = p
            values[at] = np.int64(hashed % buckets)
            at += 1
            c = columns - 1  # the next product: the last column varies fastest
            while c >= 0:
                digits[c] += 1
                if digits[c] < counts[c, b]:
                    break
                digits[c] = 0
                c -= 1
    return indices, values, widest


def hashed_crosses(sparse: list[tuple[np.ndarray, np.ndarray]], dense: list[np.ndarray], batch: int, start: int | None,
                   num_buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hashed crosses of sparse columns (each its rows, indices[:, 0], and one uint64 fingerprint per entry)
    and dense ones (uint64 fingerprints [batch, width]): (indices, int64 values, dense shape). Chained from
    `start`, or from each product's first feature when None."""
    table, parts, row_parts, begin, row_at = [], [], [], 0, 0
    for rows, fingerprints in sparse:
        table.append((begin, fingerprints.size, row_at, 0))
        parts.append(fingerprints)
        row_parts.append(rows)
        begin += fingerprints.size
        row_at += rows.size
    for fingerprints in dense:
        table.append((begin, fingerprints.size, -1, fingerprints.shape[1]))
        parts.append(fingerprints.reshape(-1))
        begin += fingerprints.size
    all_fingerprints = np.concatenate(parts) if len(parts) > 1 else np.ascontiguousarray(parts[0])
    all_rows = np.concatenate(row_parts).astype(np.int64, copy=False) if row_parts else np.zeros(0, np.int64)
    indices, values, widest = _crosses(all_fingerprints, all_rows, np.array(table, np.int64).reshape(-1, 4), batch,
                                       np.uint64(0 if start is None else start), start is not None, num_buckets)
    return indices, values, np.array([batch, widest], np.int64)
