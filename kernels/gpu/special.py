"""Erf and Erfc on the GPU: CUDA's own erf/erfc (float for float16/32 data, double for float64), one
launch each. The shared body evaluates Cody's approximation in float64 over a dozen array passes; CUDA's
erff/erfcf are within 2 ulp, as the shared float path is.
"""

from __future__ import annotations

import cupy

from kernels.gpu.source import FLOAT_DTYPES, compute_type, elementwise
from kernels.math import special as shared
from kernels.registry import kernel

__all__ = ["erf", "erfc"]


def _apply(fn: str, x):
    out = cupy.empty_like(x)
    elementwise(fn, "T x", "T y", f"y = (T){fn}((F)x);", compute_type(x.dtype))(x, out)
    return out


@kernel("Erf", devices=("gpu",), override=True)
def erf(xp, x):
    """The error function, elementwise."""
    if x.dtype not in FLOAT_DTYPES:
        return shared.erf(xp, x)
    return (_apply("erf", x),)


@kernel("Erfc", devices=("gpu",), override=True)
def erfc(xp, x):
    """The complementary error function, elementwise."""
    if x.dtype not in FLOAT_DTYPES:
        return shared.erfc(xp, x)
    return (_apply("erfc", x),)
