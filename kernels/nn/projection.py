"""Projections: `_TensorgateProjection`, `_TensorgateSplitProjection` and `_TensorgateGatedProjection`, which
engine/passes/fuse_projection.py writes for the bias-free dense layers of decoder and T5 blocks, and for
projections of one input side by side.

`_TensorgateProjection(x, weights[, bias][, addend], axes=a, has_bias=..., has_addend=...)` contracts x's last
`a` axes with the weights' first `a`, x [..., K1..Ka] and weights [K1..Ka, *units] giving [..., *units], plus a
bias and an addend where the graph added them to the product (a residual connection), as one 2-D matmul over
all rows (Keras freezes a bias-free Dense on 3-D data to Tensordot's ten small ops around a MatMul, or to a
batched matmul that numpy runs as one GEMM per batch item; EinsumDense's attention projections,
'abc,cde->abde' and 'abcd,cde->abe', to Einsum). A large product is made in tiles of rows shared out to the
engine's pool threads (kernels.pool.run_tasks), each tile's bias and addend added while it is in cache.

`_TensorgateSplitProjection(x, weights[, bias], sizes=..., units=..., ranks=..., has_bias=...)` is several
projections of the same x (an attention's queries, keys and values) as one matmul against their weights side
by side, plus their biases side by side where they have them (BERT's, ViT's): output i is columns
[sum(sizes[:i]), sum(sizes[:i + 1])) of the product, [..., *units_i], a view (strided rows) of it. One
matmul of N columns runs faster than three of N / 3 (at batch 1, 0.17 against 0.29 ms for T5's).

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
from collections.abc import Callable
from typing import Any, Literal

import numpy

from kernels import blas
from kernels.jit import use_compiled
from kernels.math.elementwise import sigmoid
from kernels.nn import gelu, transformer_rows
from kernels.pool import chunks, run_tasks
from kernels.registry import kernel

__all__ = ["gated_projection", "projection", "split_projection"]

Gate = Literal["Silu", "GeluExact", "GeluApproximate", "Relu"]

# Product elements per tile of rows: 512 KiB of float32, in L2 between the matmul and what follows it (the
# gate, a bias, an addend). Tiles are shared out to the pool's threads (kernels.pool.run_tasks).
_TILE_PRODUCT = 1 << 17
# Products of fewer multiply-adds run as one single-threaded GEMM, not split over the pool by kernels.blas:
# a batch-1 decoder's products (64 x 256 x 256: 4M, 0.09 ms) gain nothing from two halves once the hand-off
# is paid, and lose much where other processes hold the cores (measured on the 2-core machine, busy: T5 at
# batch 1 17 ms with its 28 projections in one piece each, 25 ms split; 64 x 256 x 1024 0.37 ms against 0.51).
_SPLIT_MIN_MACS = 1 << 25


def _tiles_on_the_pool(rows: int, cols: int, tile: Callable[[int, int], None]) -> None:
    """tile(r0, r1) over tiles of rows of a [rows, cols] product, shared out to the engine's pool threads."""
    run_tasks(lambda part: tile(part.b0, part.b1), chunks(rows, 1, max(cols, 1), _TILE_PRODUCT))


def _rows_product(xp: Any, x: Any, weights: Any, axes: int = 1) -> Any:
    if axes < 1 or weights.ndim <= axes or x.ndim < axes or tuple(x.shape[x.ndim - axes:]) != tuple(weights.shape[:axes]):
        raise ValueError(f"projection: x {list(x.shape)} cannot contract its last {axes} axes with the first of "
                         f"weights {list(weights.shape)}")
    depth = math.prod(weights.shape[:axes])
    rows, w = x.reshape(-1, depth), weights.reshape(depth, -1)
    if rows.shape[0] * depth * w.shape[1] < _SPLIT_MIN_MACS or xp is not numpy or not blas.blas_threads_limited():
        return xp.matmul(rows, w)  # one piece; or BLAS's own threads, where the session left them
    # Tiles of rows shared out to the pool's threads rather than one half each (kernels.blas): where another
    # process holds a core, the caller goes on with the tiles instead of waiting for a half not yet begun.
    return _rows_product_plus(xp, rows, w, None, None)


@kernel("_TensorgateProjection")
def projection(xp, x, weights, *extra, axes: int = 1, has_bias: bool = False, has_addend: bool = False):
    """x [..., K1..Ka] . weights [K1..Ka, *units] -> [..., *units], a = `axes`; then + bias [*units] if has_bias,
    then + the addend (a residual connection: Add(projection, addend), broadcasting as Add does) if has_addend.
    `extra` holds the bias, then the addend."""
    if len(extra) != int(has_bias) + int(has_addend):
        raise ValueError(f"_TensorgateProjection: has_bias={has_bias}, has_addend={has_addend}, with {len(extra)} "
                         "inputs after the weights")
    if x.ndim < axes or tuple(x.shape[x.ndim - axes:]) != tuple(weights.shape[:axes]):
        raise ValueError(f"projection: x {list(x.shape)} cannot contract its last {axes} axes with the first of "
                         f"weights {list(weights.shape)}")
    units = tuple(weights.shape[axes:])
    shape = tuple(x.shape[:x.ndim - axes]) + units
    bias = extra[0] if has_bias else None
    addend = extra[-1] if has_addend else None
    if bias is not None and tuple(bias.shape) != units:
        raise ValueError(f"_TensorgateProjection: bias has shape {list(bias.shape)}; expected {list(units)}")
    dtype = numpy.result_type(x.dtype, weights.dtype)
    in_place = addend is None or (tuple(addend.shape) == shape and addend.dtype == dtype)
    if bias is None and in_place and addend is None:
        return (_rows_product(xp, x, weights, axes).reshape(shape),)
    depth = math.prod(weights.shape[:axes])
    w = weights.reshape(depth, -1)
    rows = addend.reshape(-1, w.shape[1]) if addend is not None and in_place else None
    y = _rows_product_plus(xp, x.reshape(-1, depth), w, None if bias is None else bias.reshape(-1), rows).reshape(shape)
    return (y if in_place else y + addend,)


def _split_outputs(attrs: dict) -> int:
    return len(attrs["sizes"])


def _rows_product_plus(xp: Any, rows: Any, weights: Any, bias: Any | None, addend: Any | None) -> Any:
    """rows [R, K] . weights [K, N] + bias [N] (if given) + addend [R, N] (if given): [R, N]. On numpy, tile by
    tile of rows on the engine's pool, each tile's additions made while its product is in cache (one pass over
    a product of Keras' queries, keys and values at batch 32, 6 MiB, would come back from memory, on one
    core); the product first, then the bias, then the addend, as the graph adds them."""
    if xp is not numpy:
        y = xp.matmul(rows, weights)
        y = y if bias is None else y + bias
        return y if addend is None else y + addend
    y = numpy.empty((rows.shape[0], weights.shape[1]), numpy.result_type(rows.dtype, weights.dtype))

    def tile(r0: int, r1: int) -> None:
        block = y[r0:r1]
        numpy.matmul(rows[r0:r1], weights, out=block)
        if bias is not None:
            numpy.add(block, bias, out=block)
        if addend is not None:
            numpy.add(block, addend[r0:r1], out=block)

    if rows.shape[0] * rows.shape[1] * weights.shape[1] < _SPLIT_MIN_MACS:
        tile(0, rows.shape[0])  # small: one piece on this thread (see _SPLIT_MIN_MACS)
    else:
        _tiles_on_the_pool(rows.shape[0], weights.shape[1], tile)
    return y


@kernel("_TensorgateSplitProjection", outputs=_split_outputs)
def split_projection(xp, x, weights, *bias, sizes: list[int], units: list[int], ranks: list[int],
                     has_bias: bool = False):
    """x [..., K] . weights [K, sum(sizes)] (+ bias [sum(sizes)] if has_bias), cut into one output per size,
    each reshaped to [..., *units_i] (units: every output's dims, one after another; ranks: how many dims each
    has)."""
    if weights.ndim != 2 or weights.shape[1] != sum(sizes) or len(ranks) != len(sizes) or sum(ranks) != len(units):
        raise ValueError(f"_TensorgateSplitProjection: weights {list(weights.shape)} do not hold outputs of sizes "
                         f"{list(sizes)} with dims {list(units)} (ranks {list(ranks)})")
    if len(bias) != int(has_bias) or (has_bias and tuple(bias[0].shape) != (weights.shape[1],)):
        raise ValueError(f"_TensorgateSplitProjection: has_bias={has_bias}, with {len(bias)} bias inputs of shapes "
                         f"{[list(b.shape) for b in bias]}; expected one of [{weights.shape[1]}] with has_bias")
    if x.ndim < 1 or x.shape[-1] != weights.shape[0]:
        raise ValueError(f"_TensorgateSplitProjection: x {list(x.shape)} cannot contract its last axis with weights "
                         f"{list(weights.shape)}")
    if has_bias:
        y = _rows_product_plus(xp, x.reshape(-1, x.shape[-1]), weights, bias[0], None)
    else:
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
        if rows.shape[0] * weights.shape[1] <= _TILE_PRODUCT:  # one tile: one product
            transformer_rows.gated_into(_rows_product(numpy, rows, w), gate, out)
        else:
            _tiles_on_the_pool(rows.shape[0], weights.shape[1],
                               lambda r0, r1: transformer_rows.gated_into(numpy.matmul(rows[r0:r1], w), gate, out[r0:r1]))
        return (out.reshape(shape),)
    y = _rows_product(xp, x, weights)
    a = _gate_twin(xp, y[:, :units], gate)
    a *= y[:, units:]
    return (a.reshape(shape),)
