"""Kernels of the XLA ops that move data, as TensorFlow runs them on a CPU outside any jit-compiled cluster.

TensorFlow registers these ops (tensorflow.compiler.tf2xla.python.xla) with a CPU kernel that compiles the
single op with XLA on demand, so graphs holding them run in a plain Session. Keras 3's TensorFlow backend
emits XlaDynamicUpdateSlice for `keras.ops.slice_update`; jax2tf-style and hand-written graphs use the rest.
XLA semantics differ from TensorFlow's own ops in one way that matters: start indices are clamped so the
slice fits, never an error. Dimension numbers come as serialized XLA protos in string attrs, read here
field by field (`read_int_fields`).

    XlaDynamicSlice, XlaDynamicUpdateSlice   a box read or written at clamped start indices
    XlaPad                                   low/high edge padding (negative cuts) and interior padding
    XlaGather                                XLA's general gather, GatherDimensionNumbers included
    XlaSort, XlaKeyValueSort                 ascending along the last dim, floats in IEEE total order
    XlaBroadcastHelper                       the lower-rank operand reshaped to broadcast against the other
    XlaOptimizationBarrier, XlaSharding      identities outside a compiled cluster
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.host import format_dims, host_vector
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = [
    "broadcast_helper",
    "dynamic_slice",
    "dynamic_update_slice",
    "optimization_barrier",
    "read_int_fields",
    "sharding",
    "xla_gather",
    "xla_key_value_sort",
    "xla_pad",
    "xla_sort",
]


# ---------------------------------------------------------------------------------------------------
# Serialized XLA protos


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(raw):
            raise ValueError("truncated varint in a serialized XLA proto")
        byte = raw[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes in a serialized XLA proto")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def read_int_fields(serialized: str | bytes, what: str) -> dict[int, list[int]]:
    """The int64 fields of a serialized proto (such as xla.DotDimensionNumbers) by field number, each a
    list of its values (packed or not); fields of other wire types are skipped. The engine decodes string
    attrs as str when they are valid UTF-8, which a short proto usually is: such a str is encoded back."""
    raw = serialized.encode("utf-8") if isinstance(serialized, str) else bytes(serialized)
    fields: dict[int, list[int]] = {}
    pos = 0
    try:
        while pos < len(raw):
            key, pos = _varint(raw, pos)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = _varint(raw, pos)
                fields.setdefault(number, []).append(_signed(value))
            elif wire == 2:
                length, pos = _varint(raw, pos)
                end = pos + length
                if end > len(raw):
                    raise ValueError("a length-delimited field runs past the end")
                values = fields.setdefault(number, [])
                while pos < end:
                    value, pos = _varint(raw, pos)
                    values.append(_signed(value))
                if pos != end:
                    raise ValueError("a packed field's varints overrun its length")
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                raise ValueError(f"unsupported wire type {wire}")
    except ValueError as e:
        raise ValueError(f"{what} is not a valid serialized proto: {e}") from None
    return fields


# ---------------------------------------------------------------------------------------------------
# Dynamic slices


def _clamped_starts(starts: list[int], shape: tuple[int, ...], sizes: tuple[int, ...]) -> list[int]:
    """XLA clamps each start into [0, dim - size], so the box always lies inside the operand."""
    return [min(max(s, 0), n - k) for s, n, k in zip(starts, shape, sizes)]


def _index_vector(t: Any, rank: int, what: str) -> list[int]:
    if t.ndim != 1 or t.shape[0] != rank:
        raise ValueError(f"{what} must be a vector with one entry per dim of the operand ({rank}), "
                         f"got shape {format_dims(t.shape)}")
    return host_vector(t)


@kernel("XlaDynamicSlice")
def dynamic_slice(xp: Any, input: Any, start_indices: Any, size_indices: Any) -> tuple:
    """The box of extent `size_indices` at `start_indices`, each start clamped into [0, dim - size]."""
    starts = _index_vector(start_indices, input.ndim, "start_indices")
    sizes = tuple(_index_vector(size_indices, input.ndim, "size_indices"))
    for d, (k, n) in enumerate(zip(sizes, input.shape)):
        if not 0 <= k <= n:
            raise ValueError(f"size_indices[{d}] = {k} is not in [0, {n}] for operand shape {format_dims(input.shape)}")
    starts = _clamped_starts(starts, input.shape, sizes)
    return (input[tuple(slice(s, s + k) for s, k in zip(starts, sizes))],)


@kernel("XlaDynamicUpdateSlice")
def dynamic_update_slice(xp: Any, input: Any, update: Any, indices: Any) -> tuple:
    """A copy of `input` with `update` written at `indices`, each clamped into [0, dim - update dim]
    (keras.ops.slice_update)."""
    if update.ndim != input.ndim:
        raise ValueError(f"update rank {update.ndim} differs from input rank {input.ndim}")
    for d, (k, n) in enumerate(zip(update.shape, input.shape)):
        if k > n:
            raise ValueError(f"update shape {format_dims(update.shape)} does not fit in input shape "
                             f"{format_dims(input.shape)} (dim {d})")
    starts = _clamped_starts(_index_vector(indices, input.ndim, "indices"), input.shape, update.shape)
    out = input.copy()
    out[tuple(slice(s, s + k) for s, k in zip(starts, update.shape))] = update
    return (out,)


# ---------------------------------------------------------------------------------------------------
# Pad


@kernel("XlaPad")
def xla_pad(xp: Any, input: Any, padding_value: Any, padding_low: Any, padding_high: Any, padding_interior: Any,
            *, memory_limit: int | None = None) -> tuple:
    """`input` with padding_interior[d] cells of `padding_value` between neighbours along dim d, then
    padding_low[d] / padding_high[d] cells before / after it; a negative edge padding removes cells."""
    if padding_value.ndim != 0:
        raise ValueError(f"padding_value must be a scalar, got shape {format_dims(padding_value.shape)}")
    low = _index_vector(padding_low, input.ndim, "padding_low")
    high = _index_vector(padding_high, input.ndim, "padding_high")
    interior = _index_vector(padding_interior, input.ndim, "padding_interior")
    dilated, out_shape = [], []
    for d, n in enumerate(input.shape):
        if interior[d] < 0:
            raise ValueError(f"padding_interior[{d}] = {interior[d]} must be non-negative")
        dilated.append(n + max(n - 1, 0) * interior[d])
        out_shape.append(low[d] + dilated[d] + high[d])
        if out_shape[d] < 0:
            raise ValueError(f"padding dim {d} of shape {format_dims(input.shape)} with low {low[d]}, high "
                             f"{high[d]} and interior {interior[d]} gives a negative size {out_shape[d]}")
    check_elements(math.prod(out_shape), input.dtype, memory_limit, "XlaPad output", out_shape)
    out = xp.empty(tuple(out_shape), dtype=input.dtype)
    out[...] = padding_value
    # The dilated input's cells that survive negative edges, and where they land in the output.
    src, dst = [], []
    for d in range(input.ndim):
        first, last = max(-low[d], 0), dilated[d] - max(-high[d], 0)  # surviving dilated range
        if last <= first:
            return (out,)
        step = interior[d] + 1
        # Input cells i with first <= i*step < last; their output position is low + i*step.
        i0, i1 = -(-first // step), -(-last // step)
        if i1 <= i0:
            return (out,)
        src.append(slice(i0, i1))
        dst.append(slice(low[d] + i0 * step, low[d] + (i1 - 1) * step + 1, step))
    out[tuple(dst)] = input[tuple(src)]
    return (out,)


# ---------------------------------------------------------------------------------------------------
# Gather


def _gather_dimension_numbers(serialized: str | bytes) -> dict[str, Any]:
    """xla.GatherDimensionNumbers: its fields by name."""
    fields = read_int_fields(serialized, "dimension_numbers")
    return {
        "offset_dims": fields.get(1, []),
        "collapsed_slice_dims": fields.get(2, []),
        "start_index_map": fields.get(3, []),
        "index_vector_dim": fields.get(4, [0])[-1],  # proto3: unset reads 0; the last value wins
        "operand_batching_dims": fields.get(5, []),
        "start_indices_batching_dims": fields.get(6, []),
    }


def _check_gather(operand: Any, idx_shape: tuple[int, ...], sizes: list[int], dn: dict) -> list[int]:
    """The operand dims a slice keeps (window dims), after XLA's shape checks."""
    rank = operand.ndim
    if len(sizes) != rank:
        raise ValueError(f"slice_sizes has {len(sizes)} entries; the operand has rank {rank}")
    for name in ("collapsed_slice_dims", "start_index_map", "operand_batching_dims"):
        for d in dn[name]:
            if not 0 <= d < rank:
                raise ValueError(f"{name} entry {d} is out of range for operand rank {rank}")
    removed = set(dn["collapsed_slice_dims"]) | set(dn["operand_batching_dims"])
    if len(removed) != len(dn["collapsed_slice_dims"]) + len(dn["operand_batching_dims"]):
        raise ValueError("collapsed_slice_dims and operand_batching_dims must be distinct dims")
    for d in removed:
        if sizes[d] > 1:
            raise ValueError(f"slice_sizes[{d}] is {sizes[d]}; a collapsed or batching dim must have slice size <= 1")
    for d, (k, n) in enumerate(zip(sizes, operand.shape)):
        if not 0 <= k <= n:
            raise ValueError(f"slice_sizes[{d}] = {k} is not in [0, {n}]")
    if idx_shape[-1] != len(dn["start_index_map"]):
        raise ValueError(f"the index vector has {idx_shape[-1]} entries; start_index_map names "
                         f"{len(dn['start_index_map'])} dims")
    if len(dn["operand_batching_dims"]) != len(dn["start_indices_batching_dims"]):
        raise ValueError("operand_batching_dims and start_indices_batching_dims differ in length")
    window = [d for d in range(rank) if d not in removed]
    offset_dims = dn["offset_dims"]
    if len(offset_dims) != len(window) or list(offset_dims) != sorted(set(offset_dims)):
        raise ValueError(f"offset_dims {list(offset_dims)} must be sorted and name one output dim per window dim "
                         f"({len(window)})")
    return window


@kernel("XlaGather")
def xla_gather(xp: Any, operand: Any, start_indices: Any, slice_sizes: Any, *, dimension_numbers: str | bytes,
               indices_are_sorted: bool) -> tuple:
    """XLA's gather: for each index vector of `start_indices` (along index_vector_dim), the slice of
    extent `slice_sizes` starting there (starts clamped so the slice fits), collapsed dims dropped and the
    remaining window dims placed at offset_dims of the output."""
    sizes = host_vector(slice_sizes)
    dn = _gather_dimension_numbers(dimension_numbers)
    ivd = dn["index_vector_dim"]
    if not 0 <= ivd <= start_indices.ndim:
        raise ValueError(f"index_vector_dim {ivd} is out of range for start_indices of rank {start_indices.ndim}")
    # Index vectors on the last axis: [batch..., K].
    idx = start_indices[..., None] if ivd == start_indices.ndim else xp.moveaxis(start_indices, ivd, -1)
    window = _check_gather(operand, idx.shape, sizes, dn)
    batch_shape = idx.shape[:-1]
    nb, nw = len(batch_shape), len(window)
    idx = idx.astype(np.int64, copy=False)
    index = []
    for d in range(operand.ndim):
        if d in dn["start_index_map"]:
            start = idx[..., dn["start_index_map"].index(d)]
        elif d in dn["operand_batching_dims"]:
            s_dim = dn["start_indices_batching_dims"][dn["operand_batching_dims"].index(d)]
            b = s_dim if s_dim < ivd else s_dim - 1  # its position among the batch dims
            start = xp.arange(batch_shape[b], dtype=np.int64).reshape([-1 if i == b else 1 for i in range(nb)])
        else:
            start = xp.zeros((1,) * nb, dtype=np.int64)
        start = xp.clip(start, 0, operand.shape[d] - sizes[d]).reshape(start.shape + (1,) * nw)
        if d in window:
            w = window.index(d)
            along = [-1 if i == nb + w else 1 for i in range(nb + nw)]
            start = start + xp.arange(sizes[d], dtype=np.int64).reshape(along)
        index.append(start)
    shape = tuple(batch_shape) + tuple(sizes[d] for d in window)
    gathered = operand[tuple(xp.broadcast_to(i, shape) for i in index)] if operand.ndim else operand
    # [batch..., window...] -> output order: window dims at offset_dims, batch dims elsewhere in order.
    perm, batch_axis, window_axis = [], 0, nb
    for o in range(nb + nw):
        if o in dn["offset_dims"]:
            perm.append(window_axis)
            window_axis += 1
        else:
            perm.append(batch_axis)
            batch_axis += 1
    return (xp.ascontiguousarray(xp.transpose(gathered, perm)),)


# ---------------------------------------------------------------------------------------------------
# Sorts


_TOTAL_ORDER_BITS = {2: (np.int16, 0x7FFF), 4: (np.int32, 0x7FFFFFFF), 8: (np.int64, 0x7FFFFFFFFFFFFFFF)}


def _sort_key(xp: Any, keys: Any) -> Any:
    """Keys in XLA's sort order: integers and bools as they are; floats in IEEE total order (-NaN < -inf <
    ... < -0 < +0 < ... < inf < +NaN), read as signed integers with the magnitude bits of negatives flipped."""
    if keys.dtype.kind in "iub":
        return keys
    is_float = keys.dtype.kind == "f" or keys.dtype.name == "bfloat16"  # ml_dtypes' bfloat16 is not kind "f"
    if not is_float or keys.dtype.itemsize not in _TOTAL_ORDER_BITS:
        raise TypeError(f"XLA sort does not compare {keys.dtype} keys")
    int_type, magnitude = _TOTAL_ORDER_BITS[keys.dtype.itemsize]
    bits = keys.view(int_type)
    return xp.where(bits < 0, bits ^ int_type(magnitude), bits)


def _sort_order(xp: Any, keys: Any) -> Any:
    if keys.ndim == 0:
        raise ValueError("XLA sort needs at least a vector: the input is a scalar")
    return xp.argsort(_sort_key(xp, keys), axis=-1, kind="stable")


@kernel("XlaSort")
def xla_sort(xp: Any, input: Any) -> tuple:
    """`input` sorted ascending along its last dim."""
    return (xp.take_along_axis(input, _sort_order(xp, input), axis=-1),)


@kernel("XlaKeyValueSort", outputs=2)
def xla_key_value_sort(xp: Any, keys: Any, values: Any) -> tuple:
    """`keys` sorted ascending along the last dim and `values` permuted alike. XLA's sort is not stable:
    the order of values under equal keys is unspecified there; here it is their input order."""
    if keys.shape != values.shape:
        raise ValueError(f"Sort keys and values dimensions must match. Keys shape is {format_dims(keys.shape)}, "
                         f"values shape is {format_dims(values.shape)}")
    order = _sort_order(xp, keys)
    return (xp.take_along_axis(keys, order, axis=-1), xp.take_along_axis(values, order, axis=-1))


# ---------------------------------------------------------------------------------------------------
# Broadcasting and identities


@kernel("XlaBroadcastHelper", outputs=2)
def broadcast_helper(xp: Any, lhs: Any, rhs: Any, broadcast_dims: Any) -> tuple:
    """(lhs, rhs) with the lower-rank one reshaped so that its dim i sits at broadcast_dims[i] of the
    other's rank (size-1 dims elsewhere), ready for numpy broadcasting; equal ranks pass unchanged."""
    dims = host_vector(broadcast_dims)
    if broadcast_dims.ndim != 1:
        raise ValueError(f"broadcast_dims must be a vector, got shape {format_dims(broadcast_dims.shape)}")
    if lhs.ndim == rhs.ndim:
        return (lhs, rhs)
    small, big = (lhs, rhs) if lhs.ndim < rhs.ndim else (rhs, lhs)
    if len(dims) != small.ndim:
        raise ValueError(f"broadcast_dims has {len(dims)} entries; the lower-rank operand has rank {small.ndim}")
    shape = [1] * big.ndim
    for i, d in enumerate(dims):
        if not 0 <= d < big.ndim or shape[d] != 1 or (i and d <= dims[i - 1]):
            raise ValueError(f"broadcast_dims {dims} must be increasing dims of the rank-{big.ndim} operand")
        shape[d] = small.shape[i]
    reshaped = small.reshape(shape)
    return (reshaped, rhs) if lhs.ndim < rhs.ndim else (lhs, reshaped)


@kernel("XlaOptimizationBarrier", outputs=lambda attrs: len(attrs.get("T") or ()))
def optimization_barrier(xp: Any, *input: Any) -> tuple:
    """Its inputs: the barrier only orders work inside an XLA computation."""
    return tuple(input)


@kernel("XlaSharding")
def sharding(xp: Any, input: Any, *, sharding: str | bytes = "", unspecified_dims: tuple = ()) -> tuple:
    """Its input: a sharding annotation means nothing outside a partitioned XLA computation."""
    return (input,)
