"""The kernel registry: registration, device overrides, CPU-only ops, lookup errors, attr binding, and the
generated op list."""

import importlib.util
import os
import subprocess
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


def _private_registry(monkeypatch):
    from kernels import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # keep test ops out of the real one


def test_device_override_replaces_the_shared_body_on_that_device_only(monkeypatch):
    _private_registry(monkeypatch)

    def shared(xp, x, *, scale: float = 1.0):
        return (x * scale,)

    def gpu_only(xp, x, *, scale: float = 1.0):
        return (x * scale + 1,)

    register("_TestOnlyOp", shared, outputs=1, stateful=True)
    register("_TestOnlyOp", gpu_only, devices=("gpu",), override=True)
    assert kernels.lookup("_TestOnlyOp", "cpu").fn is shared
    gpu = kernels.lookup("_TestOnlyOp", "gpu")
    assert gpu.fn is gpu_only and gpu.replaces.fn is shared
    assert gpu.stateful and gpu.num_outputs({}) == 1  # what the op is does not change with the device
    assert "_TestOnlyOp" in kernels.overridden_ops("gpu") and "_TestOnlyOp" not in kernels.overridden_ops("cpu")
    with pytest.raises(DuplicateKernelError, match="op '_TestOnlyOp' on device 'gpu'"):
        register("_TestOnlyOp", gpu_only, devices=("gpu",), override=True)


def test_override_needs_a_kernel_to_replace_and_the_same_attrs(monkeypatch):
    _private_registry(monkeypatch)
    register("_TestOnlyCpuOp", lambda xp, x: (x,), devices=("cpu",))
    with pytest.raises(KernelNotFoundError, match="op '_TestOnlyCpuOp' on device 'gpu'"):
        register("_TestOnlyCpuOp", lambda xp, x: (x,), devices=("gpu",), override=True)
    with pytest.raises(ValueError, match="takes attrs \\['mode'\\]"):
        register("Relu", lambda xp, x, *, mode="a": (x,), devices=("gpu",), override=True)
    for restated in ({"outputs": 2}, {"stateful": True}):
        with pytest.raises(ValueError, match="keeps the output count and statefulness"):
            register("Relu", lambda xp, x: (x,), devices=("gpu",), override=True, **restated)


def test_host_only_ops_have_no_gpu_kernel():
    for op in ("TensorListGetItem", "TensorListFromTensor", "TensorArrayV3", "TensorArrayReadV3", "Assert", "BroadcastArgs"):
        assert kernels.has_op(op, "cpu") and not kernels.has_op(op, "gpu"), op
    for op in ("Conv2D", "MatMul", "Shape", "Reshape", "Const", "Switch", "StatefulPartitionedCall"):
        assert kernels.has_op(op, "gpu"), op


def test_cpu_only_install_never_imports_cupy():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("cupy is installed here")
    code = "import sys, kernels; assert 'cupy' not in sys.modules and 'kernels.gpu' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_gpu_overrides_register_against_the_shared_kernels(tmp_path):
    """With a stand-in cupy on the path (no GPU needed), importing kernels loads kernels.gpu, whose
    overrides must each replace a shared kernel with the same attrs; docs/ops.md lists the same ops."""
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_ops_doc

    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text('"""A stand-in: kernels.gpu touches cupy only when kernels run."""\n')
    expected = sorted(op for ops in gen_ops_doc.gpu_overrides().values() for op in ops)
    code = "import kernels; print(sorted(kernels.overridden_ops('gpu')))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == str(expected)
    assert "Conv2D" in expected and "_FusedMatMul" in expected
