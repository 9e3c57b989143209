"""Kernels of the ops that need special functions numpy lacks: the error function and its complement.

Erf and Erfc follow W. J. Cody's rational Chebyshev approximations (Math. Comp. 23, 1969; SPECFUN
CALERF), evaluated in float64 whatever the input dtype and rounded back to it, so float32 results are
correctly rounded nearly everywhere (relative error ~1e-16 before rounding). Three ranges of |x|:
|x| <= 0.46875 (erf as x * R(x^2)), 0.46875 < |x| <= 4 and |x| > 4 (erfc as exp(-x^2) * R(|x|)).
Each range is evaluated only on its own elements, so a call costs a few passes over the tensor.

Inputs narrower than float64 (float32, half, bfloat16: GELU's hot path) take a faster route with no
masked scatter: Cody's small-|x| form and a single erfc formula valid for every |x| (Numerical
Recipes' Chebyshev fit, relative error < 1.2e-7, still computed in float64), joined by one `where`.
That is within two float32 ulp (TensorFlow's own float erf is an approximation of that order)
and about twice as fast as the masked route.
"""

from __future__ import annotations

from typing import Any

from kernels.registry import kernel

__all__ = ["erf", "erfc"]

# |x| at or below which erf is evaluated directly; above it, through erfc.
_SMALL = 0.46875
# |x| above which the asymptotic (1/x^2) form of erfc takes over.
_TAIL = 4.0
_ONE_OVER_SQRT_PI = 5.6418958354775628695e-1

# erf(x) = x * P(x^2) / Q(x^2) for |x| <= 0.46875.
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03, 1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
# erfc(y) = exp(-y^2) * P(y) / Q(y) for 0.46875 < y <= 4.
_C = (
    5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
    8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
    2.15311535474403846e-8,
)
_D = (
    1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
    3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03,
)
# erfc(y) = exp(-y^2) / y * (1/sqrt(pi) + 1/y^2 * P(1/y^2) / Q(1/y^2)) for y > 4.
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1, 6.05183413124413191e-2, 2.33520497626869185e-3)


def _erf_small(x: Any) -> Any:
    """erf(x) for |x| <= 0.46875."""
    z = x * x
    num, den = _A[4] * z, z
    for a, b in zip(_A[:3], _B[:3]):
        num = (num + a) * z
        den = (den + b) * z
    return x * (num + _A[3]) / (den + _B[3])


def _exp_minus_square(xp: Any, y: Any, exact: bool) -> Any:
    """exp(-y * y). With `exact`, Cody's split y = h + d (h a multiple of 1/16, so h * h is exact)
    keeps the rounding of y * y (relative error ~y^2 * 2^-53) out of a float64 result; a float32
    result cannot see that error, so it is skipped there."""
    if not exact:
        return xp.exp(-y * y)
    head = xp.trunc(y * 16.0) / 16.0
    return xp.exp(-head * head) * xp.exp(-(y - head) * (y + head))


def _erfc_mid(xp: Any, y: Any, exact: bool) -> Any:
    """erfc(y) for 0.46875 < y <= 4."""
    num, den = _C[8] * y, y
    for c, d in zip(_C[:7], _D[:7]):
        num = (num + c) * y
        den = (den + d) * y
    return _exp_minus_square(xp, y, exact) * (num + _C[7]) / (den + _D[7])


def _erfc_tail(xp: Any, y: Any, exact: bool) -> Any:
    """erfc(y) for y > 4 (and for inf and NaN, which fall through to here): 0 at inf, NaN at NaN."""
    z = 1.0 / (y * y)
    num, den = _P[5] * z, z
    for p, q in zip(_P[:4], _Q[:4]):
        num = (num + p) * z
        den = (den + q) * z
    r = z * (num + _P[4]) / (den + _Q[4])
    # erfc underflows to 0 long before y reaches inf; at inf the split below would make inf - inf.
    y = xp.minimum(y, 40.0)
    return _exp_minus_square(xp, y, exact) * ((_ONE_OVER_SQRT_PI - r) / y)


def _erfc_large(xp: Any, y: Any, exact: bool) -> Any:
    """erfc(y) for y > 0.46875, y = |x| (NaN included)."""
    out = xp.empty_like(y)
    mid = y <= _TAIL
    out[mid] = _erfc_mid(xp, y[mid], exact)
    tail = ~mid
    out[tail] = _erfc_tail(xp, y[tail], exact)
    return out


# erfc(y) ~ t * exp(-y^2 + P(t)), t = 1 / (1 + y/2), for every y >= 0 (Numerical Recipes, erfcc).
_NR = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223)


def _erfc_any(xp: Any, y: Any) -> Any:
    """erfc(y) for y = |x| >= 0 (inf -> 0, NaN -> NaN), relative error < 1.2e-7."""
    # In place on fresh temporaries: on large tensors, allocating a new array per step costs more
    # than the arithmetic.
    t = 0.5 * y
    t += 1.0
    xp.reciprocal(t, out=t)
    poly = t * _NR[0]
    for c in _NR[1:-1]:
        poly += c
        poly *= t
    poly += _NR[-1]
    poly -= y * y
    xp.exp(poly, out=poly)
    poly *= t
    return poly


def _float64(xp: Any, x: Any) -> Any:
    return x.astype(xp.float64, copy=False)


@kernel("Erf")
def erf(xp: Any, x: Any) -> tuple[Any]:
    """The error function, elementwise, in the input's floating dtype."""
    x64 = _float64(xp, x)
    y = xp.abs(x64)
    if x.dtype != xp.float64:
        large = xp.copysign((0.5 - _erfc_any(xp, y)) + 0.5, x64)
        return (xp.where(y <= _SMALL, _erf_small(x64), large).astype(x.dtype, copy=False),)
    small = y <= _SMALL
    out = xp.empty_like(x64)
    out[small] = _erf_small(x64[small])
    large = ~small
    # erf(x) = sign(x) * (1 - erfc(|x|)); (0.5 - e) + 0.5 is Cody's rounding-friendly form of 1 - e.
    out[large] = xp.copysign((0.5 - _erfc_large(xp, y[large], x.dtype == xp.float64)) + 0.5, x64[large])
    return (out.astype(x.dtype, copy=False),)


@kernel("Erfc")
def erfc(xp: Any, x: Any) -> tuple[Any]:
    """The complementary error function 1 - erf(x), elementwise, accurate where it is tiny (x >> 0)."""
    x64 = _float64(xp, x)
    y = xp.abs(x64)
    if x.dtype != xp.float64:
        e = _erfc_any(xp, y)
        large = xp.where(x64 < 0, 2.0 - e, e)
        return (xp.where(y <= _SMALL, 1.0 - _erf_small(x64), large).astype(x.dtype, copy=False),)
    small = y <= _SMALL
    out = xp.empty_like(x64)
    out[small] = 1.0 - _erf_small(x64[small])
    large = ~small
    e = _erfc_large(xp, y[large], x.dtype == xp.float64)
    # erfc(-y) = 2 - erfc(y)
    out[large] = xp.where(x64[large] < 0, 2.0 - e, e)
    return (out.astype(x.dtype, copy=False),)

