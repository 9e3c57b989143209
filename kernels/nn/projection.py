"""Projections without a bias: `_TensorgateProjection` and `_TensorgateGatedProjection`, which
engine/passes/fuse_projection.py writes for the bias-free dense layers of decoder and T5 blocks.

`_TensorgateProjection(x, weights, axes=a)` contracts x's last `a` axes with the weights' first `a`, x
[..., K1..Ka] and weights [K1..Ka, *units] giving [..., *units], as one 2-D matmul over all rows (Keras
freezes a bias-free Dense on 3-D data to Tensordot's ten small ops around a MatMul, or to a batched
matmul that numpy runs as one GEMM per batch item; EinsumDense's attention projections, 'abc,cde->abde'
and 'abcd,cde->abe', to Einsum).

`_TensorgateSplitProjection(x, weights, sizes=..., units=..., ranks=...)` is several projections of the same
x (an attention's queries, keys and values) as one matmul against their weights side by side: output i is
columns [sum(sizes[:i]), sum(sizes[:i + 1])) of the product, [..., *units_i], a view (strided rows) of it.
One matmul of N columns runs faster than three of N / 3 (at batch 1, 0.17 against 0.29 ms for T5's).

`_TensorgateGatedProjection(x, weights, gate=...)` is a gated feed-forward layer's two projections of the
same x and their product: weights [K, 2 * F] hold the gate's projection in the first F columns and the
other's in the last F, and the output is gate(x . w_gate) * (x . w_up), [..., F]: SwiGLU (gate "Silu",
x * sigmoid(x); Llama, Mistral), GeGLU ("GeluExact", "GeluApproximate"; Gemma) and ReGLU ("Relu"; T5).
One matmul makes both products, and on CPU (float32) one compiled pass over each row applies the gate
and the product (kernels/nn/transformer_rows.py), tile by tile of rows on the engine's thread pool, so that
the [rows, 2F] product of a tile is still in cache when its gate runs (Llama's at batch 32 is 16 MiB whole);
the numpy code is its twin.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy

from kernels import blas
from kernels.jit import use_compiled
from kernels.math.elementwise import sigmoid
from kernels.nn import gelu, transformer_rows
from kernels.pool import chunks, run_chunks
from kernels.registry import kernel

__all__ = ["gated_projection", "projection", "split_projection"]

Gate = Literal["Silu", "GeluExact", "GeluApproximate", "Relu"]

# Product elements per tile of rows: 512 KiB of float32, in L2 between the matmul and the gate.
_TILE_PRODUCT = 1 << 17
# Products of fewer multiply-adds run as one single-threaded GEMM, not split over the pool by kernels.blas:
# a batch-1 decoder's products (64 x 256 x 256: 4M, 0.09 ms) gain nothing from two halves once the hand-off
# is paid, and lose much where other processes hold the cores (measured on the 2-core machine, busy: T5 at
# batch 1 17 ms with its 28 projections in one piece each, 25 ms split; 64 x 256 x 1024 0.37 ms against 0.51).
_SPLIT_MIN_MACS = 1 << 25


def _rows_product(xp: Any, x: Any, weights: Any, axes: int = 1) -> Any:
    if axes < 1 or weights.ndim <= axes or x.ndim < axes or tuple(x.shape[x.ndim - axes:]) != tuple(weights.shape[:axes]):
        raise ValueError(f"projection: x {list(x.shape)} cannot contract its last {axes} axes with the first of "
                         f"weights {list(weights.shape)}")
    depth = math.prod(weights.shape[:axes])
    rows, w = x.reshape(-1, depth), weights.reshape(depth, -1)
    if rows.shape[0] * depth * w.shape[1] < _SPLIT_MIN_MACS:
        return xp.matmul(rows, w)
    return blas.matmul(xp, rows, w)


@kernel("_TensorgateProjection")
def projection(xp, x, weights, *, axes: int = 1):
    """x [..., K1..Ka] . weights [K1..Ka, *units] -> [..., *units], a = `axes`."""
    y = _rows_product(xp, x, weights, axes)
    return (y.reshape(tuple(x.shape[:x.ndim - axes]) + tuple(weights.shape[axes:])),)


def _split_outputs(attrs: dict) -> int:
    return len(attrs["sizes"])


@kernel("_TensorgateSplitProjection", outputs=_split_outputs)
def split_projection(xp, x, weights, *, sizes: list[int], units: list[int], ranks: list[int]):
    """x [..., K] . weights [K, sum(sizes)], cut into one output per size, each reshaped to [..., *units_i]
    (units: every output's dims, one after another; ranks: how many dims each has)."""
    if weights.ndim != 2 or weights.shape[1] != sum(sizes) or len(ranks) != len(sizes) or sum(ranks) != len(units):
        raise ValueError(f"_TensorgateSplitProjection: weights {list(weights.shape)} do not hold outputs of sizes "
                         f"{list(sizes)} with dims {list(units)} (ranks {list(ranks)})")
    y = _rows_product(xp, x, weights)
    outputs, column, dim = [], 0, 0
    for size, rank in zip(sizes, ranks):
        shape = tuple(units[dim:dim + rank])
        if math.prod(shape) != size:
            raise ValueError(f"_TensorgateSplitProjection: dims {list(shape)} do not hold {size} columns")
        outputs.append(y[:, column:column + size].reshape(tuple(x.shape[:-1]) + shape))
        column, dim = column + size, dim + rank
    return tuple(outputs)


def _gate_twin(xp: Any, g: Any, gate: str) -> Any:
    """gate(g) into a new array."""
    if gate == "Silu":
        return g * sigmoid(xp, g)[0]
    a = g.copy()
    if gate == "Relu":
        return xp.maximum(a, a.dtype.type(0), out=a)
    (gelu.gelu_approximate_into if gate == "GeluApproximate" else gelu.gelu_exact_into)(xp, a.reshape(-1))
    return a


@kernel("_TensorgateGatedProjection")
def gated_projection(xp, x, weights, *, gate: Gate, compiled: bool = False):
    """gate(x . weights[:, :F]) * (x . weights[:, F:]), x [..., K], weights [K, 2F] -> [..., F]."""
    if weights.ndim != 2 or weights.shape[1] % 2:
        raise ValueError(f"_TensorgateGatedProjection: weights have shape {list(weights.shape)}; expected [K, 2F]")
    units = weights.shape[1] // 2
    shape = tuple(x.shape[:-1]) + (units,)
    if use_compiled(xp, compiled, x.dtype, weights.dtype) and x.size and weights.size:
        rows = numpy.ascontiguousarray(x).reshape(-1, x.shape[-1])
        w = numpy.ascontiguousarray(weights)
        out = numpy.empty((rows.shape[0], units), numpy.float32)
        parts = chunks(rows.shape[0], 1, weights.shape[1], _TILE_PRODUCT)
        if len(parts) == 1:  # one tile: one product (split over the pool by kernels.blas when it is large)
            transformer_rows.gated_into(_rows_product(numpy, rows, w), gate, out)
        else:
            run_chunks(numpy, lambda p: transformer_rows.gated_into(numpy.matmul(rows[p.b0:p.b1], w), gate, out[p.b0:p.b1]),
                       parts)
        return (out.reshape(shape),)
    y = _rows_product(xp, x, weights)
    a = _gate_twin(xp, y[:, :units], gate)
    a *= y[:, units:]
    return (a.reshape(shape),)
