"""Devices: where a node runs, named as TensorFlow names them, and the array module that runs there.

A device has a kind, which is what kernels are registered under ("cpu" or "gpu"), and an index.
Names are accepted in our short form (`cpu`, `cpu:1`, `gpu`) and in TensorFlow's (`/device:CPU:1`,
`/job:localhost/replica:0/task:0/device:GPU:0`); the canonical name is `cpu:0`, `gpu:0`.

Several *logical* CPU devices (`cpu:0`, `cpu:1`, ...) exist when a session asks for them: they share
the host and numpy but are separate devices for placement and partitioning, which is how the
Send/Recv machinery is exercised on machines without a GPU. GPU devices use cupy and exist only when
cupy imports and sees a CUDA device.

    >>> parse_device("/job:localhost/replica:0/task:0/device:GPU:0")
    ('gpu', 0)
    >>> canonical_device("cpu")
    'cpu:0'
"""

from __future__ import annotations

import functools
import re
from types import ModuleType

import numpy as np

__all__ = ["DeviceError", "parse_device", "canonical_device", "device_kind", "array_module", "gpu_available"]

_SHORT = re.compile(r"^(cpu|gpu)(?::(\d+))?$", re.IGNORECASE)
_TF = re.compile(r"(?:^|/)device:(CPU|GPU)(?::(\d+|\*))?$", re.IGNORECASE)
_TF_LEGACY = re.compile(r"(?:^|/)(cpu|gpu):(\d+|\*)$", re.IGNORECASE)


class DeviceError(ValueError):
    """A device name that cannot be parsed, or a device this process does not have."""


def parse_device(spec: str) -> tuple[str, int]:
    """(kind, index) of a device name in our form or TensorFlow's; DeviceError otherwise."""
    text = spec.strip()
    for pattern in (_SHORT, _TF, _TF_LEGACY):
        m = pattern.search(text)
        if m:
            index = m.group(2)
            return m.group(1).lower(), 0 if index in (None, "*") else int(index)
    raise DeviceError(f"'{spec}' is not a device name (expected cpu, cpu:N, gpu, gpu:N or /device:CPU:N)")


def canonical_device(spec: str) -> str:
    """`kind:index`, e.g. `cpu:0` for `cpu` or `/device:CPU:0`."""
    kind, index = parse_device(spec)
    return f"{kind}:{index}"


def device_kind(spec: str) -> str:
    """The kernel registry's key for a device: "cpu" or "gpu"."""
    return parse_device(spec)[0]


@functools.lru_cache(maxsize=1)
def _cupy() -> ModuleType | None:
    try:
        import cupy  # the optional GPU backend: pip install tensorgate[gpu]

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # not installed, no driver, no device: no GPU backend
        return None


def gpu_available() -> bool:
    """Whether cupy is installed and sees at least one CUDA device."""
    return _cupy() is not None


def gpu_count() -> int:
    cp = _cupy()
    return 0 if cp is None else int(cp.cuda.runtime.getDeviceCount())


def array_module(spec: str) -> ModuleType:
    """numpy for CPU devices, cupy for GPU devices; DeviceError when the GPU backend is missing."""
    if device_kind(spec) == "cpu":
        return np
    cp = _cupy()
    if cp is None:
        raise DeviceError(f"device '{spec}' is not available: the GPU backend needs cupy and a CUDA device "
                          "(pip install 'tensorgate[gpu]')")
    return cp
