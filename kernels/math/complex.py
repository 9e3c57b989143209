"""Kernels of the complex-number ops: building complex tensors and taking them apart."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import kernel

_COMPLEX_OF = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


@kernel("Complex")
def complex_(xp: Any, real: Any, imag: Any, *, Tout: np.dtype | None = None) -> tuple[Any]:
    out = Tout or _COMPLEX_OF[np.dtype(real.dtype)]
    return ((real + 1j * imag).astype(out, copy=False),)


@kernel("Real")
def real(xp: Any, input: Any, *, Tout: np.dtype | None = None) -> tuple[Any]:
    return (xp.ascontiguousarray(xp.real(input)),)


@kernel("Imag")
def imag(xp: Any, input: Any, *, Tout: np.dtype | None = None) -> tuple[Any]:
    return (xp.ascontiguousarray(xp.imag(input)),)


@kernel("ComplexAbs")
def complex_abs(xp: Any, x: Any, *, Tout: np.dtype | None = None) -> tuple[Any]:
    return (xp.abs(x),)


@kernel("Conj")
def conj(xp: Any, input: Any) -> tuple[Any]:
    # Conj of a real tensor is the tensor itself (TensorFlow allows it for variant/real inputs).
    return (xp.conj(input) if input.dtype.kind == "c" else input,)


@kernel("Angle")
def angle(xp: Any, input: Any, *, Tout: np.dtype | None = None) -> tuple[Any]:
    return (xp.angle(input).astype(input.real.dtype, copy=False),)
