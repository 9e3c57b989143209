"""The parsing tests run each kernel case on the numpy twin and, for kernels with a compiled path (the
tf.Example batch parsers: kernels.parsing.example_wire_walk), on that path too: both must give the same
outputs and the same errors."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit
from tests.kernels.conftest import _backends, _host_only


def _paths():
    for param in _backends():
        device, xp = param.values[0]
        yield pytest.param((device, xp, False), id=param.id)
        if device == "cpu" and jit.AVAILABLE:
            yield pytest.param((device, xp, True), id=f"{param.id}-compiled")


@pytest.fixture(params=list(_paths()))
def run_kernel(request):
    """run_kernel("Op", *inputs, **attrs) -> tuple of numpy arrays, computed on the parametrized backend
    and path (the `-compiled` cases bind the kernel with compiled loops allowed, as a plan does; they are
    skipped for kernels without any)."""
    device, xp, compiled = request.param

    def run(op, *inputs, **attrs):
        if device != "cpu" and (not kernels.has_op(op, device) or _host_only([*inputs, *attrs.values()])):
            pytest.skip(f"{op} with these dtypes runs on the CPU only")
        kdef = kernels.lookup(op, device)
        if compiled and "compiled" not in kdef.context_params:
            pytest.skip(f"{op}'s kernel has no compiled path")
        fn = kdef.bind(xp, attrs, {"compiled": compiled} if compiled else None)
        outs = fn(*[xp.asarray(x) for x in inputs])
        return tuple(np.asarray(o.get() if hasattr(o, "get") else o) for o in outs)

    return run
