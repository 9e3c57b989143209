"""Op kernels: numpy on CPU (cupy on GPU later), registered by (op type, device).

Importing this package imports every kernel module in it, which registers their kernels.
"""

from __future__ import annotations

import importlib
import pkgutil

from kernels.registry import DEVICES, KernelDef, has_op, kernel, lookup, register, registered_ops

__all__ = ["DEVICES", "KernelDef", "has_op", "kernel", "lookup", "register", "registered_ops"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module != "registry" and not _module.startswith("_"):
        importlib.import_module(f"kernels.{_module}")
