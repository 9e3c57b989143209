"""GELU, the Gaussian error linear unit of transformer feed-forward layers: `_TensorgateGelu`, the op the
optimizer (engine/passes/fuse_gelu.py) writes in place of the elementwise chains TensorFlow freezes GELU to.

    exact:        0.5 * x * erfc(-x / sqrt(2))                 (= 0.5 * x * (1 + erf(x / sqrt(2))))
    approximate:  0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

The exact form is computed, for float32, with the rational approximation of erf that Eigen (and so
TensorFlow's own float Erf kernel) uses: odd degree-13 over even degree-8 polynomials in x, clamped to
|x| <= 4, absolute error below 5e-7 against a float64 erf, and about 20 times faster than the Erf
kernel's float64 route (GELU's erf is most of a BERT feed-forward layer's time otherwise). Other dtypes
go through the Erfc kernel, as Keras 3 freezes it (0.5 * x * erfc(-x / sqrt(2))). The underscore marks an op
of ours, not TensorFlow's; graphs never contain it until the optimizer writes it.

The numpy code here is the twin of the compiled loop in kernels/nn/compiled_rows.py, which computes the same
float32 formula in one pass (bit for bit for the exact form).
"""

from __future__ import annotations

import math
from typing import Any

from kernels.jit import use_compiled
from kernels.math import special
from kernels.nn import compiled_rows
from kernels.registry import kernel

__all__ = ["gelu", "gelu_approximate_into", "gelu_exact_into"]

_MINUS_SQRT1_2 = -1 / math.sqrt(2)
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


# erf(x) ~ x * P(x^2) / Q(x^2) on [-4, 4] in float32 (Eigen's generic_fast_erf_float), highest power first.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _erf_float32_into(xp: Any, x: Any) -> None:
    """x <- erf(x), in place, for a float32 array (NaN stays NaN)."""
    f = x.dtype.type
    xp.clip(x, f(-4), f(4), out=x)
    x2 = x * x
    p = x2 * f(_ERF_P[0])
    p += f(_ERF_P[1])
    for c in _ERF_P[2:]:
        p *= x2
        p += f(c)
    q = x2 * f(_ERF_Q[0])
    q += f(_ERF_Q[1])
    for c in _ERF_Q[2:]:
        q *= x2
        q += f(c)
    x *= p
    x /= q


def gelu_exact_into(xp: Any, y: Any) -> None:
    """y <- 0.5 * y * (1 + erf(y / sqrt(2))), in place."""
    if y.dtype == xp.float32:
        t = y * y.dtype.type(-_MINUS_SQRT1_2)
        _erf_float32_into(xp, t)
        t += y.dtype.type(1)
    else:
        (t,) = special.erfc(xp, y * y.dtype.type(_MINUS_SQRT1_2))
    y *= y.dtype.type(0.5)
    y *= t


def gelu_approximate_into(xp: Any, y: Any) -> None:
    """y <- 0.5 * y * (1 + tanh(sqrt(2 / pi) * (y + 0.044715 * y^3))), in place."""
    t = y * y
    t *= y
    t *= y.dtype.type(0.044715)
    t += y
    t *= y.dtype.type(_SQRT_2_OVER_PI)
    xp.tanh(t, out=t)
    t += y.dtype.type(1)
    y *= y.dtype.type(0.5)
    y *= t


@kernel("_TensorgateGelu")
def gelu(xp, features, *, approximate: bool = False, compiled: bool = False):
    """GELU of `features`, elementwise: exact (through erfc) or, with `approximate`, the tanh form."""
    if use_compiled(xp, compiled, features.dtype) and features.size:
        return (compiled_rows.activation(features, "GeluApproximate" if approximate else "GeluExact"),)
    y = features.astype(features.dtype, copy=True)
    # On a 1-D view: arithmetic on a 0-d array gives scalars, which the in-place steps cannot write to.
    (gelu_approximate_into if approximate else gelu_exact_into)(xp, y.reshape(-1))
    return (y,)
