"""Matrix products: MatMul (2-D, optional transposes) and BatchMatMul V1-V3 (batched, optional adjoints).

Transposes are taken as views, so BLAS reads the operands in place with no copy. BatchMatMulV2/V3
broadcast the batch dimensions as numpy's matmul does; V3 also casts the product to `Tout`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels import blas
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["mat_mul", "batch_mat_mul", "batch_mat_mul_v3"]


def _adjoint(xp: Any, x: Any, adjoint: bool) -> Any:
    """The conjugate transpose of the last two axes (a view for real dtypes), or x itself."""
    if not adjoint:
        return x
    t = xp.swapaxes(x, -1, -2)
    return xp.conj(t) if xp.iscomplexobj(t) else t


def _check_product(x: Any, y: Any, memory_limit: int | None, op: str) -> None:
    """[N,1] @ [1,N] makes N*N elements from 2N: refuse a product over the memory limit. The sizes'
    product over the inner dim squared bounds the output; only past the limit is its shape worked out."""
    if memory_limit is None or x.ndim < 2 or y.ndim < 2:
        return
    inner = max(x.shape[-1], 1)
    if (x.size // inner) * (y.size // inner) * 16 <= memory_limit:
        return
    try:
        batch = math.prod(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    except ValueError:
        return  # shapes that do not broadcast: the product refuses them with its own message
    shape = (batch, x.shape[-2], y.shape[-1])
    check_elements(math.prod(shape), np.result_type(x.dtype, y.dtype), memory_limit, f"{op} output", shape)


@kernel("MatMul")
def mat_mul(xp, a, b, *, transpose_a: bool = False, transpose_b: bool = False, memory_limit: int | None = None):
    """a @ b, either operand transposed first (plain transpose: MatMul never conjugates); a large product
    may run with BLAS's threads (kernels.blas)."""
    a, b = a.T if transpose_a else a, b.T if transpose_b else b
    _check_product(a, b, memory_limit, "MatMul")
    return (blas.matmul(xp, a, b),)


@kernel("BatchMatMul", "BatchMatMulV2")
def batch_mat_mul(xp, x, y, *, adj_x: bool = False, adj_y: bool = False, memory_limit: int | None = None):
    """Batched x @ y over the leading axes, either operand replaced by its adjoint."""
    x, y = _adjoint(xp, x, adj_x), _adjoint(xp, y, adj_y)
    _check_product(x, y, memory_limit, "BatchMatMul")
    return (xp.matmul(x, y),)


@kernel("BatchMatMulV3")
def batch_mat_mul_v3(xp, x, y, *, adj_x: bool = False, adj_y: bool = False, Tout: Any = None,
                     memory_limit: int | None = None):
    """BatchMatMulV2 whose operands (possibly of different dtypes, e.g. int8) are cast to Tout first."""
    if Tout is not None and (x.dtype != Tout or y.dtype != Tout):
        x, y = x.astype(Tout), y.astype(Tout)
    x, y = _adjoint(xp, x, adj_x), _adjoint(xp, y, adj_y)
    _check_product(x, y, memory_limit, "BatchMatMulV3")
    return (xp.matmul(x, y),)
