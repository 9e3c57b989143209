"""The kernel registry: registration, lookup errors, attr binding, and the generated op list."""

import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

import kernels
from engine.errors import DuplicateKernelError, KernelNotFoundError
from kernels.registry import AttrBindError, register

ROOT = Path(__file__).resolve().parents[2]


def test_missing_kernel_names_op_and_device():
    with pytest.raises(KernelNotFoundError, match="op 'NoSuchOp' on device 'cpu'"):
        kernels.lookup("NoSuchOp", "cpu")


def test_duplicate_registration_is_an_error():
    with pytest.raises(DuplicateKernelError, match="op 'Const' on device 'cpu'"):
        register("Const", lambda xp: (), devices=("cpu",))


def test_attr_binding(monkeypatch):
    from kernels import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # keep the test op out of the real one

    def fake(xp, x, *, mode: Literal["a", "b"], scale=2.0):
        return (x * scale,)

    register("_TestOnlyOp", fake, devices=("cpu",))
    kdef = kernels.lookup("_TestOnlyOp", "cpu")
    assert kdef.bind(np, {"mode": "a", "T": np.float32})(np.float32(3))[0] == 6.0
    assert kdef.bind_attrs({"mode": "b", "scale": 1.0}) == {"mode": "b", "scale": 1.0}
    with pytest.raises(AttrBindError, match="attr 'mode' is required"):
        kdef.bind_attrs({})
    with pytest.raises(AttrBindError, match="attr 'mode' is 'c'; expected one of \\['a', 'b'\\]"):
        kdef.bind_attrs({"mode": "c"})


def test_ops_doc_is_current():
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_ops_doc

    assert (ROOT / "docs" / "ops.md").read_text() == gen_ops_doc.render(), "run tools/gen_ops_doc.py"
