"""Matrix products: MatMul (2-D, optional transposes) and BatchMatMul V1-V3 (batched, optional adjoints).

Transposes are taken as views, so BLAS reads the operands in place with no copy. BatchMatMulV2/V3
broadcast the batch dimensions as numpy's matmul does; V3 also casts the product to `Tout`.
"""

from __future__ import annotations

from typing import Any

from kernels import blas
from kernels.registry import kernel

__all__ = ["mat_mul", "batch_mat_mul", "batch_mat_mul_v3"]


def _adjoint(xp: Any, x: Any, adjoint: bool) -> Any:
    """The conjugate transpose of the last two axes (a view for real dtypes), or x itself."""
    if not adjoint:
        return x
    t = xp.swapaxes(x, -1, -2)
    return xp.conj(t) if xp.iscomplexobj(t) else t


@kernel("MatMul")
def mat_mul(xp, a, b, *, transpose_a: bool = False, transpose_b: bool = False):
    """a @ b, either operand transposed first (plain transpose: MatMul never conjugates); a large product
    may run with BLAS's threads (kernels.blas)."""
    return (blas.matmul(xp, a.T if transpose_a else a, b.T if transpose_b else b),)


@kernel("BatchMatMul", "BatchMatMulV2")
def batch_mat_mul(xp, x, y, *, adj_x: bool = False, adj_y: bool = False):
    """Batched x @ y over the leading axes, either operand replaced by its adjoint."""
    return (xp.matmul(_adjoint(xp, x, adj_x), _adjoint(xp, y, adj_y)),)


@kernel("BatchMatMulV3")
def batch_mat_mul_v3(xp, x, y, *, adj_x: bool = False, adj_y: bool = False, Tout: Any = None):
    """BatchMatMulV2 whose operands (possibly of different dtypes, e.g. int8) are cast to Tout first."""
    if Tout is not None and (x.dtype != Tout or y.dtype != Tout):
        x, y = x.astype(Tout), y.astype(Tout)
    return (xp.matmul(_adjoint(xp, x, adj_x), _adjoint(xp, y, adj_y)),)
