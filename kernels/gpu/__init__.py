"""GPU-only kernels: CUDA implementations (cupy ElementwiseKernels) that replace the shared numpy/cupy
bodies on device "gpu" where those would be slow there.

The shared bodies are written for numpy: they walk a window's taps or split work into cache-sized chunks,
which on a GPU becomes dozens of small launches. Here each op is one or two launches: convolution is an
im2col gather plus one cuBLAS GEMM per chunk (a 1x1 convolution is the GEMM alone), depthwise convolution
and pooling are one thread per output element, and the fused ops finish the product with one
bias / batch-norm / residual / activation kernel. Dtypes these kernels do not cover fall back to the
shared body.

`kernels/__init__.py` imports this package only when cupy is importable; it imports cupy itself.
"""

from __future__ import annotations

from kernels.gpu import conv, fused, pooling, special  # noqa: F401  (registers the overrides)
