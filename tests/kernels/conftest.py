"""Kernel tests run every case on each backend present: numpy always, cupy when a GPU is there."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from engine import attrs as _attrs  # noqa: F401  (imports engine first, as the server does)


def _backends():
    yield pytest.param(("cpu", np), id="numpy")
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            yield pytest.param(("gpu", cupy), id="cupy")
    except Exception:  # cupy missing, or no device: GPU cases are simply absent
        return


@pytest.fixture(params=list(_backends()))
def run_kernel(request):
    """run_kernel("Op", *inputs, **attrs) -> tuple of numpy arrays, computed on the parametrized backend."""
    device, xp = request.param

    def run(op, *inputs, **attrs):
        kdef = kernels.lookup(op, device)
        fn = kdef.bind(xp, attrs)
        outs = fn(*[xp.asarray(x) for x in inputs])
        return tuple(np.asarray(o.get() if hasattr(o, "get") else o) for o in outs)

    return run
