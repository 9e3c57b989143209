"""Building and caching cupy ElementwiseKernels whose arithmetic type depends on the data's dtype.

A kernel body names `F`, the type it computes in: float for float16 and float32 data (as TensorFlow's
GPU kernels accumulate half in float), double for float64. One kernel object is compiled per (name, F).
"""

from __future__ import annotations

import functools
from typing import Any

import cupy
import numpy as np

__all__ = ["FLOAT_DTYPES", "compute_dtype", "compute_type", "elementwise"]

# The dtypes the float kernels here handle; other dtypes go to the shared body.
FLOAT_DTYPES = frozenset({np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)})


def compute_type(dtype: Any) -> str:
    """The C type to compute in for data of `dtype`."""
    return "double" if np.dtype(dtype) == np.float64 else "float"


def compute_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype of `compute_type(dtype)`."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


@functools.cache
def elementwise(name: str, in_params: str, out_params: str, body: str, f: str = "float", preamble: str = "") -> Any:
    """A cached `cupy.ElementwiseKernel` with `F` defined as the C type `f` for its body."""
    return cupy.ElementwiseKernel(
        in_params,
        out_params,
        body,
        f"tensorgate_{name}_{f}",
        preamble=f"typedef {f} F;\n{preamble}",
    )
