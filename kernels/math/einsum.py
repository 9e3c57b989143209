"""Einsum: a tensor contraction written in Einstein notation, such as Keras MultiHeadAttention's
'abc,cde->abde' projections and 'aecd,abcd->acbe' attention scores.

A two-operand equation is lowered to one batched matmul: labels in both inputs and the output are batch
axes, labels in both inputs only are contracted, the rest are the free axes of one side. Each operand is
permuted (a view) and reshaped to [batch..., rows, cols], so BLAS does the work and numpy copies only
when axes cannot be merged in place. On CPU, a product whose axes the output permutes is written
through a strided view of the output rather than transposed afterwards. Equations this does not cover
(a label repeated within one operand, more than two operands) go to the array module's own einsum.
"""

from __future__ import annotations

import math
from typing import Any

import numpy

from kernels.registry import kernel

__all__ = ["einsum", "parse_equation"]


def parse_equation(equation: str, ndims: list[int]) -> tuple[list[str], str]:
    """The input label strings and the output labels, with any '...' expanded to explicit labels
    (right-aligned, so operands with fewer ellipsis axes broadcast as numpy does)."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"einsum equation '{equation}' names {len(terms)} operands, got {len(ndims)}")
    used = set(equation) - {".", ",", "-", ">"}
    spare = (chr(c) for c in range(0x100, 0x10000) if chr(c) not in used)  # labels no equation uses
    ellipsis_rank = max((n - (len(t) - 3) for t, n in zip(terms, ndims) if "..." in t), default=0)
    ellipsis = "".join(next(spare) for _ in range(ellipsis_rank))
    expanded = []
    for term, n in zip(terms, ndims):
        if "..." in term:
            k = n - (len(term) - 3)
            term = term.replace("...", ellipsis[ellipsis_rank - k :])
        if len(term) != n:
            raise ValueError(f"einsum term '{term}' has {len(term)} labels for an operand of rank {n}")
        expanded.append(term)
    if arrow:
        out = out.replace("...", ellipsis)
    else:  # implicit output: ellipsis axes, then the labels used once, alphabetically
        counts = {c: "".join(expanded).count(c) for c in set("".join(expanded))}
        out = ellipsis + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ellipsis))
    return expanded, out


def _sum_unused(xp: Any, x: Any, labels: str, keep: str) -> tuple[Any, str]:
    """Sum out the axes whose labels appear nowhere in `keep` (neither the other operand nor the output)."""
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    return x.sum(axis=axes), "".join(c for c in labels if c in keep)


def _as_matrices(x: Any, labels: str, batch: str, rows: str, cols: str) -> Any:
    """x permuted to (batch, rows, cols) label order and reshaped to [batch sizes..., rows, cols]."""
    perm = [labels.index(c) for c in batch + rows + cols]
    t = x.transpose(perm)
    nb = len(batch)
    shape = t.shape[:nb] + (math.prod(t.shape[nb : nb + len(rows)]), math.prod(t.shape[nb + len(rows) :]))
    return t.reshape(shape)


def _contract_pair(xp: Any, a: Any, la: str, b: Any, lb: str, out: str) -> Any:
    a, la = _sum_unused(xp, a, la, lb + out)
    b, lb = _sum_unused(xp, b, lb, la + out)
    batch = "".join(c for c in out if c in la and c in lb)
    contract = "".join(c for c in la if c in lb and c not in out)
    free_a = "".join(c for c in out if c in la and c not in lb)
    free_b = "".join(c for c in out if c in lb and c not in la)
    # Put first the operand whose free axes come first in the output, so the product needs no transpose.
    if free_a and free_b and out.index(free_b[0]) < out.index(free_a[0]):
        a, la, b, lb, free_a, free_b = b, lb, a, la, free_b, free_a
    size = {}
    for x, labels in ((a, la), (b, lb)):
        for c, n in zip(labels, x.shape):
            size[c] = max(size.get(c, 1), n)  # batch axes of size 1 broadcast
    a, b = _as_matrices(a, la, batch, free_a, contract), _as_matrices(b, lb, batch, contract, free_b)
    labels = batch + free_a + free_b
    if xp is numpy and labels != out:
        into = _product_in_output_order(a, b, labels, out, size)
        if into is not None:
            return into
    product = xp.matmul(a, b).reshape(tuple(size[c] for c in labels))
    return product.transpose([labels.index(c) for c in out])


def _product_in_output_order(a: Any, b: Any, labels: str, out: str, size: dict[str, int]) -> Any | None:
    """a @ b written straight into a contiguous array in `out`'s axis order, or None where numpy's matmul
    could not write there through BLAS.

    Attention's `BNTS,BSNH->BTNH` multiplies per (B, N) and lays the product out as BTNH: matmul writes
    each [T, H] matrix through a strided view of the BTNH result (its rows are N*H apart), so the
    result needs no transposing copy afterwards (the Reshape that merges its heads is then free)."""
    result = numpy.empty(tuple(size[c] for c in out), numpy.result_type(a.dtype, b.dtype))
    if result.size == 0:
        return None
    shape = tuple(size[c] for c in labels[: a.ndim - 2]) + (a.shape[-2], b.shape[-1])
    try:
        target = result.transpose([out.index(c) for c in labels]).reshape(shape, copy=False)
    except ValueError:  # the free axes are not adjacent in the output: a view cannot merge them
        return None
    item = result.itemsize
    # numpy's matmul calls BLAS only on matrices with unit-stride rows; elsewhere it loops in C, slowly.
    if target.strides[-1] != item or target.strides[-2] % item or target.strides[-2] < target.shape[-1] * item:
        return None
    numpy.matmul(a, b, out=target)
    return result


@kernel("Einsum")
def einsum(xp, *inputs, equation: str):
    """The contraction `equation` describes, of one or two operands."""
    terms, out = parse_equation(equation, [x.ndim for x in inputs])
    simple = len(inputs) == 2 and all(len(set(t)) == len(t) for t in terms) and len(set(out)) == len(out)
    if simple and set(out) <= set(terms[0]) | set(terms[1]):
        return (_contract_pair(xp, inputs[0], terms[0], inputs[1], terms[1], out),)
    if len(inputs) == 1 and len(set(terms[0])) == len(terms[0]):
        x, labels = _sum_unused(xp, inputs[0], terms[0], out)
        return (x.transpose([labels.index(c) for c in out]),)
    # Diagonals, traces and other rare forms: the array module's einsum, with the labels made plain ASCII.
    alphabet = {c: chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i, c in enumerate(dict.fromkeys("".join(terms) + out))}
    plain = ",".join("".join(alphabet[c] for c in t) for t in terms) + "->" + "".join(alphabet[c] for c in out)
    return (xp.einsum(plain, *inputs, optimize=len(inputs) > 2),)
