"""Op kernels: numpy on CPU and cupy on GPU, registered by (op type, device).

A subpackage per op family, as TensorFlow's own core/kernels/ has them; each subpackage's docstring lists
its modules:

    array/         constants and identities, shapes, slicing, indexing, scatter-style updates, positions,
                   diagonals, joining, space/depth and patches, unique, XLA ops run outside XLA
    math/          elementwise math, reductions, matrix products, einsum, special functions, complex,
                   segment reductions, bincount, bucketize, fake quantization, XLA's dot and precision ops
    nn/            convolutions (direct, depthwise, Winograd), pooling, normalisation, activations,
                   fused epilogues and blocks, and the window geometry they share
    image/         codecs (JPEG, PNG, GIF, BMP), resizing, projective transforms, crops, colour,
                   non-max suppression and box drawing
    strings/       manipulation, regex, Unicode, hashing, conversions, formatting, splitting
    parsing/       tf.Example and SequenceExample, CSV, JSON Examples, raw bytes
    sparse/        SparseTensors: building, reordering, arithmetic, crosses, sets
    ragged/        ragged tensors: row splits, dense conversion, variants, crosses
    random/        Philox and the stateless random ops
    state/         resource variables, lookup tables, TensorArrays and TensorLists
    control_flow/  Switch/Merge/Enter/Exit and the functional If/While/calls
    text/          TensorFlow Text: normalizers, tokenizers (WordPiece, fast WordPiece, SentencePiece, ...),
                   trimmers, n-grams and the other ops TF Text serving graphs hold
    forests/       TensorFlow Decision Forests' inference ops, run by YDF
    gpu/           CUDA kernels that override the shared bodies on the GPU

The modules at this level are the machinery every family uses, and import no family:

    registry       kernels as pure functions keyed by (op type, device); `@kernel` registers one
    jit            the compiled-kernel layer (numba), each compiled loop with its numpy twin
    pool           the engine's kernel thread pool and the chunks work is cut into for it
    blas           BLAS threading: single-threaded, but for one large product at a time
    limits         memory limits: sizes a request decides, checked before anything is allocated
    host           small shape-like inputs read on the host as Python ints
    partial_shape  TensorFlow's PartialTensorShape (None for an unknown dim or rank)

Importing this package imports every module of every family subpackage, which registers their kernels
(one shared body per op for both array modules). When cupy is importable, it then imports `kernels.gpu`,
whose CUDA kernels override the shared bodies on the GPU where those would be slow there; a CPU-only
install never imports cupy.

On the CPU, some kernels call compiled loops (numba, through `kernels.jit`) where numpy would make one pass
over memory per operation; each keeps its numpy code as a twin (the definition, and what runs without
numba, on other dtypes, on a GPU, or in plans built with `PlanOptions(compiled_kernels=False)`). Large
kernels share one thread pool (kernels.pool.run_tasks); BLAS runs single-threaded except for one large
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

# Imported only when cupy is: see below.
_GPU_PACKAGE = "gpu"


def _family_modules() -> list[str]:
    """Every module of every family subpackage, in name order (the families' kernels register on import)."""
    found = []
    for family in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and m.name != _GPU_PACKAGE):
        package = importlib.import_module(f"kernels.{family}")
        found += [f"kernels.{family}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if not m.ispkg]
    return sorted(found)


for _module in _family_modules():
    importlib.import_module(_module)


def _cupy_importable() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy  # noqa: F401
    except Exception:  # installed but broken (no CUDA runtime): the GPU is unusable anyway
        return False
    return True


if _cupy_importable():
    importlib.import_module(f"kernels.{_GPU_PACKAGE}")
