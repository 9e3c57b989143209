"""Op kernels: numpy on CPU and cupy on GPU, registered by (op type, device).

Importing this package imports every kernel module in it, which registers their kernels (one shared body
per op for both array modules). When cupy is importable, it then imports `kernels.gpu`, whose CUDA kernels
override the shared bodies on the GPU where those would be slow there; a CPU-only install never imports
cupy.

On the CPU, some kernels call compiled loops (numba, through `kernels.jit`) where numpy would make one pass
over memory per operation; each keeps its numpy code as a twin (the definition, and what runs without
numba, on other dtypes, on a GPU, or in plans built with `PlanOptions(compiled_kernels=False)`). Large
kernels share one thread pool (kernels.conv.run_tasks); BLAS runs single-threaded except for one large
product at a time from outside that pool (kernels.blas).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from kernels.registry import (
    DEVICES,
    KernelDef,
    has_op,
    kernel,
    lookup,
    overridden_ops,
    register,
    registered_ops,
)

__all__ = ["DEVICES", "KernelDef", "has_op", "kernel", "lookup", "overridden_ops", "register", "registered_ops"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg):
    if _module != "registry" and not _module.startswith("_"):
        importlib.import_module(f"kernels.{_module}")


def _cupy_importable() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy  # noqa: F401
    except Exception:  # installed but broken (no CUDA runtime): the GPU is unusable anyway
        return False
    return True


if _cupy_importable():
    importlib.import_module("kernels.gpu")
