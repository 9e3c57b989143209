"""Kernels of the ops that read, build or overwrite diagonals: Diag and DiagPart (the diagonal of a
rank-2k tensor), and the batched-matrix family MatrixDiag, MatrixDiagPart and MatrixSetDiag in their
versions V1 (the main diagonal), V2 and V3 (a band of diagonals k = [lower, upper]).

In V2 and V3 a band is stored as [..., num_diags, max_diag_len], the uppermost diagonal first. A diagonal
shorter than max_diag_len is padded on one side, chosen by `align`: its first word for diagonals k >= 0,
its second for those below. V2 packs every diagonal to the LEFT, and V3 defaults to RIGHT_LEFT. Every
kernel turns that layout into index arrays over the innermost matrix and gathers or scatters once.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from kernels.host import format_dims, host_scalar, host_vector
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = [
    "diag",
    "diag_part",
    "matrix_diag",
    "matrix_diag_part",
    "matrix_diag_part_v2",
    "matrix_diag_part_v3",
    "matrix_diag_v2",
    "matrix_diag_v3",
    "matrix_set_diag",
    "matrix_set_diag_v2",
    "matrix_set_diag_v3",
]

Align = Literal["LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT"]


# ---------------------------------------------------------------------------------------------------
# Diag / DiagPart


@kernel("Diag")
def diag(xp: Any, diagonal: Any, *, memory_limit: int | None = None) -> tuple:
    """A rank-2k tensor, zero except out[i1..ik, i1..ik] = diagonal[i1..ik]."""
    if diagonal.ndim < 1:
        raise ValueError(f"Input must be at least rank 1, got {diagonal.ndim}")
    n = diagonal.size
    out_shape = diagonal.shape + diagonal.shape
    check_elements(n * n, diagonal.dtype, memory_limit, "Diag output", out_shape)
    out = xp.zeros((n, n), dtype=diagonal.dtype)
    out[xp.arange(n), xp.arange(n)] = diagonal.reshape(-1)
    return (out.reshape(out_shape),)


@kernel("DiagPart")
def diag_part(xp: Any, input: Any) -> tuple:
    """The diagonal of a tensor of shape [D1..Dk, D1..Dk]: out[i1..ik] = input[i1..ik, i1..ik]."""
    if input.ndim % 2:
        raise ValueError(f"The rank of the tensor should be even and positive, got shape {format_dims(input.shape)}")
    k = input.ndim // 2
    for d in range(k):
        if input.shape[d] != input.shape[d + k]:
            raise ValueError(f"Invalid shape {format_dims(input.shape)}: dimensions {d} and {d + k} do not match.")
    n = math.prod(input.shape[:k])
    return (input.reshape(n, n)[xp.arange(n), xp.arange(n)].reshape(input.shape[:k]),)


# ---------------------------------------------------------------------------------------------------
# The band layout shared by the Matrix* ops


def _diag_range(k: Any) -> tuple[int, int]:
    """(lower, upper) from the `k` input: a scalar, or a vector of one or two diagonal indices."""
    if k.ndim > 1:
        raise ValueError(f"diag_index must be a scalar or vector, received shape: {format_dims(k.shape)}")
    values = host_vector(k)
    if not values:
        raise ValueError("Expected diag_index to have at least 1 element")
    if len(values) > 2:
        raise ValueError(f"diag_index must have only one or two elements, received {len(values)} elements.")
    return values[0], values[-1]


def _check_range(lower: int, upper: int, rows: int, cols: int) -> None:
    for name, d in (("lower_diag_index", lower), ("upper_diag_index", upper)):
        # An index of 0 is allowed on empty matrices too.
        if not (-rows < d < cols or d == 0):
            raise ValueError(f"{name} is out of bound: {d}. It must be between {-rows} and {cols}")
    if lower > upper:
        raise ValueError(f"lower_diag_index must not be larger than upper_diag_index: {lower} > {upper}")


def _max_diag_len(lower: int, upper: int, rows: int, cols: int) -> int:
    return min(rows + min(upper, 0), cols - max(lower, 0))


def _band(xp: Any, lower: int, upper: int, rows: int, cols: int, align: str) -> tuple[Any, Any, Any, Any]:
    """For each slot [num_diags, max_diag_len] of the stored band: its (row, col) in the matrix (clipped
    into range where the slot is padding) and whether it holds an element."""
    max_len = _max_diag_len(lower, upper, rows, cols)
    left_super, left_sub = align in ("LEFT_LEFT", "LEFT_RIGHT"), align in ("LEFT_LEFT", "RIGHT_LEFT")
    ks = np.arange(upper, lower - 1, -1).reshape(-1, 1)
    lengths = np.minimum(rows + np.minimum(ks, 0), cols - np.maximum(ks, 0))
    left = np.where(ks >= 0, left_super, left_sub)
    offsets = np.where(left, 0, max_len - lengths)
    n = np.arange(max_len).reshape(1, -1) - offsets  # position along the diagonal
    valid = (n >= 0) & (n < lengths)
    r = np.clip(n + np.maximum(-ks, 0), 0, max(rows - 1, 0))
    c = np.clip(n + np.maximum(ks, 0), 0, max(cols - 1, 0))
    return xp.asarray(r), xp.asarray(c), xp.asarray(valid), max_len


def _padding_scalar(padding_value: Any) -> Any:
    if padding_value.ndim != 0:
        raise ValueError("Padding must be scalar.")
    return padding_value


# ---------------------------------------------------------------------------------------------------
# MatrixDiagPart


def _diag_part(xp: Any, input: Any, lower: int, upper: int, padding: Any, align: str) -> Any:
    if input.ndim < 2:
        raise ValueError(f"input must be at least 2-dim, received shape: {format_dims(input.shape)}")
    rows, cols = input.shape[-2:]
    _check_range(lower, upper, rows, cols)
    r, c, valid, max_len = _band(xp, lower, upper, rows, cols, align)
    batch = input.shape[:-2]
    if input.size == 0 or max_len <= 0:
        out = xp.empty(batch + (upper - lower + 1, max(max_len, 0)), dtype=input.dtype)
        out[...] = padding
    else:
        out = xp.where(valid, input[..., r, c], padding)
    return out[..., 0, :] if lower == upper else out


@kernel("MatrixDiagPart")
def matrix_diag_part(xp: Any, input: Any) -> tuple:
    """The main diagonal of each innermost matrix: [..., min(M, N)]."""
    return (_diag_part(xp, input, 0, 0, xp.zeros((), dtype=input.dtype), "LEFT_LEFT"),)


@kernel("MatrixDiagPartV2")
def matrix_diag_part_v2(xp: Any, input: Any, k: Any, padding_value: Any) -> tuple:
    """Diagonals k[0]..k[-1] of each innermost matrix, packed to the left, padded with padding_value."""
    lower, upper = _diag_range(k)
    return (_diag_part(xp, input, lower, upper, _padding_scalar(padding_value), "LEFT_LEFT"),)


@kernel("MatrixDiagPartV3")
def matrix_diag_part_v3(xp: Any, input: Any, k: Any, padding_value: Any, *, align: Align = "RIGHT_LEFT") -> tuple:
    """MatrixDiagPartV2 with the side each diagonal is packed to chosen by `align`."""
    lower, upper = _diag_range(k)
    return (_diag_part(xp, input, lower, upper, _padding_scalar(padding_value), align),)


# ---------------------------------------------------------------------------------------------------
# MatrixDiag


def _output_size(num_rows: Any, num_cols: Any, lower: int, upper: int, max_len: int) -> tuple[int, int]:
    """TensorFlow's rule for the matrix size: given sizes must fit, -1 means as small as fits (square when
    both are -1), and one of the two must be the smallest that fits."""
    for name, t in (("num_rows", num_rows), ("num_cols", num_cols)):
        if t is not None and t.ndim != 0:
            raise ValueError(f"{name} must be a scalar")
    rows = host_scalar(num_rows, "num_rows must be a scalar") if num_rows is not None else -1
    cols = host_scalar(num_cols, "num_cols must be a scalar") if num_cols is not None else -1
    min_rows, min_cols = max_len - min(upper, 0), max_len + max(lower, 0)
    if rows != -1 and rows < min_rows:
        raise ValueError("The number of rows is too small.")
    if cols != -1 and cols < min_cols:
        raise ValueError("The number of columns is too small.")
    if rows == -1 and cols == -1:
        rows = cols = max(min_rows, min_cols)
    elif rows == -1:
        rows = min_rows
    elif cols == -1:
        cols = min_cols
    if rows != min_rows and cols != min_cols:
        raise ValueError("The number of rows or columns is not consistent with the specified d_lower, d_upper, "
                         "and diagonal.")
    return rows, cols


def _matrix_diag(xp: Any, diagonal: Any, lower: int, upper: int, num_rows: Any, num_cols: Any, padding: Any,
                 align: str, memory_limit: int | None) -> Any:
    if diagonal.ndim < 1:
        raise ValueError(f"diagonal must be at least 1-dim, received shape: {format_dims(diagonal.shape)}")
    if lower > upper:
        raise ValueError(f"lower_diag_index must not be larger than upper_diag_index: {lower} > {upper}")
    num_diags = upper - lower + 1
    if lower != upper and (diagonal.ndim < 2 or diagonal.shape[-2] != num_diags):
        raise ValueError("The number of diagonals provided in the input does not match the lower_diag_index and "
                         "upper_diag_index range.")
    band = diagonal[..., None, :] if lower == upper else diagonal
    max_len = band.shape[-1]
    rows, cols = _output_size(num_rows, num_cols, lower, upper, max_len)
    out_shape = band.shape[:-2] + (rows, cols)
    check_elements(math.prod(out_shape), diagonal.dtype, memory_limit, "MatrixDiag output", out_shape)
    out = xp.empty(out_shape, dtype=diagonal.dtype)
    out[...] = padding
    if rows and cols and max_len:
        r, c, valid, _ = _band(xp, lower, upper, rows, cols, align)
        slots = xp.nonzero(valid)
        out[..., r[slots], c[slots]] = band[..., slots[0], slots[1]]
    return out


@kernel("MatrixDiag")
def matrix_diag(xp: Any, diagonal: Any, *, memory_limit: int | None = None) -> tuple:
    """Square matrices [..., N, N] with `diagonal` [..., N] on the main diagonal, zeros elsewhere."""
    zero = xp.zeros((), dtype=diagonal.dtype)
    return (_matrix_diag(xp, diagonal, 0, 0, None, None, zero, "LEFT_LEFT", memory_limit),)


@kernel("MatrixDiagV2")
def matrix_diag_v2(xp: Any, diagonal: Any, k: Any, num_rows: Any, num_cols: Any, padding_value: Any, *,
                   memory_limit: int | None = None) -> tuple:
    """Matrices with diagonals k[0]..k[-1] taken from `diagonal` (packed to the left) and padding_value
    elsewhere; num_rows / num_cols of -1 are inferred."""
    lower, upper = _diag_range(k)
    padding = _padding_scalar(padding_value)
    return (_matrix_diag(xp, diagonal, lower, upper, num_rows, num_cols, padding, "LEFT_LEFT", memory_limit),)


@kernel("MatrixDiagV3")
def matrix_diag_v3(xp: Any, diagonal: Any, k: Any, num_rows: Any, num_cols: Any, padding_value: Any, *,
                   align: Align = "RIGHT_LEFT", memory_limit: int | None = None) -> tuple:
    """MatrixDiagV2 with the side each diagonal is packed to chosen by `align`."""
    lower, upper = _diag_range(k)
    padding = _padding_scalar(padding_value)
    return (_matrix_diag(xp, diagonal, lower, upper, num_rows, num_cols, padding, align, memory_limit),)


# ---------------------------------------------------------------------------------------------------
# MatrixSetDiag


def _set_diag(xp: Any, input: Any, diagonal: Any, lower: int, upper: int, align: str) -> Any:
    if input.ndim < 2:
        raise ValueError(f"input must be at least 2-dim, received shape: {format_dims(input.shape)}")
    rows, cols = input.shape[-2:]
    _check_range(lower, upper, rows, cols)
    num_diags = upper - lower + 1
    max_len = _max_diag_len(lower, upper, rows, cols)
    if lower != upper and (diagonal.ndim < 2 or diagonal.shape[-2] != num_diags):
        raise ValueError("The number of diagonals provided in `diag` is not consistent with `lower_diag_index` "
                         "and `upper_diag_index`")
    expected = input.shape[:-2] + ((max_len,) if lower == upper else (num_diags, max_len))
    if diagonal.shape != expected:
        raise ValueError(
            "Either first dimensions of diagonal don't match input.shape[:-2], or diagonal.shape[:-1] is not "
            "equal to the longests diagonal in range [lower_diag_index:upper_diag_index]. Input shape: "
            f"{format_dims(input.shape)}, diagonal shape: {format_dims(diagonal.shape)}, expected diagonal "
            f"shape: {format_dims(expected)}"
        )
    out = input.copy()
    if input.size and max_len > 0:
        band = diagonal[..., None, :] if lower == upper else diagonal
        r, c, valid, _ = _band(xp, lower, upper, rows, cols, align)
        slots = xp.nonzero(valid)
        out[..., r[slots], c[slots]] = band[..., slots[0], slots[1]]
    return out


@kernel("MatrixSetDiag")
def matrix_set_diag(xp: Any, input: Any, diagonal: Any) -> tuple:
    """`input` with the main diagonal of each innermost matrix replaced by `diagonal` [..., min(M, N)]."""
    return (_set_diag(xp, input, diagonal, 0, 0, "LEFT_LEFT"),)


@kernel("MatrixSetDiagV2")
def matrix_set_diag_v2(xp: Any, input: Any, diagonal: Any, k: Any) -> tuple:
    """`input` with diagonals k[0]..k[-1] replaced from `diagonal` (packed to the left)."""
    lower, upper = _diag_range(k)
    return (_set_diag(xp, input, diagonal, lower, upper, "LEFT_LEFT"),)


@kernel("MatrixSetDiagV3")
def matrix_set_diag_v3(xp: Any, input: Any, diagonal: Any, k: Any, *, align: Align = "RIGHT_LEFT") -> tuple:
    """MatrixSetDiagV2 with the side each diagonal is packed to chosen by `align`."""
    lower, upper = _diag_range(k)
    return (_set_diag(xp, input, diagonal, lower, upper, align),)
