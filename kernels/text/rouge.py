"""The kernel of TF Text's RougeL (text.metrics.rouge_l): ROUGE-L between each hypothesis row and reference row
of two ragged tensors, from the length of their longest common subsequence.

Per row, as rouge_l_kernel.cc computes it: p = lcs / (len(hyp) + 1e-12) and r = lcs / (len(ref) + 1e-12)
(in double, stored as float), F = p * r / (alpha * r + (1 - alpha) * p) in float (0 when that is not
positive), or with alpha < 0 tensor2tensor's F (beta = p / (r + 1e-12)).

    >>> f, p, r = rouge_l(np, np.array([b"a", b"b", b"c"], dtype=object), np.array([0, 3]),
    ...                   np.array([b"a", b"c"], dtype=object), np.array([0, 2]), np.float32(0.5))
    >>> round(float(f[0]), 4), round(float(p[0]), 4), round(float(r[0]), 4)
    (0.8, 0.6667, 1.0)
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from kernels.registry import kernel

__all__ = ["rouge_l"]

F32 = np.float32


def _lcs_length(hyp: list, ref: list) -> int:
    previous = [0] * (len(ref) + 1)
    for h in hyp:
        current = [0]
        for j, r in enumerate(ref, 1):
            current.append(previous[j - 1] + 1 if h == r else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def _measures(lhyp: int, lref: int, lcs: int, alpha: np.float32) -> tuple[np.float32, np.float32, np.float32]:
    p, r = F32(lcs / (float(F32(lhyp)) + 1e-12)), F32(lcs / (float(F32(lref)) + 1e-12))
    if alpha < 0:  # tensor2tensor's F
        beta = F32(float(p) / (float(r) + 1e-12))
        numerator = (F32(1) + beta * beta) * r * p
        denominator = r + (beta * beta) * p
        return (numerator / denominator if denominator > 0 else F32(0)), p, r
    denominator = alpha * r + (F32(1) - alpha) * p
    return ((p * r) / denominator if denominator > 0 else denominator), p, r


def _vector(values: Any, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{what} must be a vector")
    return array


@kernel("RougeL", devices=("cpu",), outputs=3)
def rouge_l(xp: Any, hyp_values: Any, hyp_splits: Any, ref_values: Any, ref_splits: Any, alpha: Any) -> tuple:
    """F, precision and recall (float32) of each row."""
    alpha = F32(np.asarray(alpha, np.float32))
    if not alpha <= 1:
        raise ValueError(f"alpha must be <1 but was={alpha}")
    hyp, ref = _vector(hyp_values, "hypotheses values").tolist(), _vector(ref_values, "references values").tolist()
    hs = _vector(hyp_splits, "hypotheses splits").astype(np.int64).tolist()
    rs = _vector(ref_splits, "references splits").astype(np.int64).tolist()
    if len(rs) != len(hs):
        raise ValueError(f"ref splits len={len(rs)}must equal hyp splits len={len(hs)}")
    if not rs:
        raise ValueError("ref splits len=0; must have at least 1 split")
    for name, splits, values in (("hypotheses", hs, hyp), ("references", rs, ref)):
        if splits[0] < 0 or splits[-1] > len(values) or any(b < a for a, b in itertools.pairwise(splits)):
            raise ValueError(f"{name} splits must be non-decreasing within [0, {len(values)}]; they are {splits}")
    out = np.zeros((3, len(rs) - 1), np.float32)
    for i in range(1, len(rs)):
        row_hyp, row_ref = hyp[hs[i - 1]:hs[i]], ref[rs[i - 1]:rs[i]]
        out[:, i - 1] = _measures(len(row_hyp), len(row_ref), _lcs_length(row_hyp, row_ref), alpha)
    return out[0], out[1], out[2]
