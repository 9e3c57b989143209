"""Golden fixtures: every graph under tests/fixtures must give the outputs real TensorFlow gave.

The fixtures are written by tools/make_fixtures.py with TensorFlow (tests/fixtures/README.md has the
format). TensorFlow is not needed here: the expected outputs are stored.

`TENSORGATE_TEST_DEVICE=gpu` runs every case on the GPU instead (skipped without cupy and a device),
with float tolerances of at least 1e-4, as tests/engine/devices/test_gpu.py allows: cuBLAS and cupy's
reductions sum in other orders than numpy. The numpy-twin test is CPU-only and stays on the CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import engine
from engine.devices import gpu_available
from tests.golden import FIXTURES, assert_matches, case_dirs, load_case


DEVICE = os.environ.get("TENSORGATE_TEST_DEVICE", "cpu")
GPU_TOLERANCE = 1e-4


@pytest.mark.parametrize("case_dir", case_dirs(), ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_matches_tensorflow(case_dir: Path) -> None:
    on_gpu = DEVICE.startswith("gpu")
    if on_gpu and not gpu_available():
        pytest.skip("TENSORGATE_TEST_DEVICE asks for a GPU: needs cupy and a CUDA device")
    case = load_case(case_dir)
    sess = engine.Session(engine.load_graph(case.model), device=DEVICE)
    outs = sess.run(list(case.fetches), case.feeds)

    assert len(outs) == len(case.fetches)
    rtol, atol = (max(case.rtol, GPU_TOLERANCE), max(case.atol, GPU_TOLERANCE)) if on_gpu else (case.rtol, case.atol)
    for (name, want), actual in zip(case.fetches.items(), outs):
        assert_matches(name, actual, want, rtol, atol)


def _uses_compiled_kernels(case_dir: Path) -> bool:
    """Whether the case's graph, as optimized for the CPU, has a node whose kernel has a compiled loop."""
    try:
        graph = engine.load_graph(load_case(case_dir).model)
    except Exception:  # noqa: BLE001  (a case that cannot load is test_matches_tensorflow's to report)
        return False
    ops = {node.op for node in graph.nodes}
    for function in graph.library.values():
        ops |= {node.op for node in function.graph.nodes}
    # The optimizer writes the fused ops; the ops it fuses from are what the graph holds.
    return bool(ops & COMPILED_SOURCE_OPS)


# Ops whose kernels (or the fused kernels the optimizer turns them into) have compiled loops.
COMPILED_SOURCE_OPS = frozenset({"DepthwiseConv2dNative", "Conv2D", "Softmax", "Erf", "Erfc", "Tanh", "Mean",
                                 "MatMul", "BatchMatMulV2", "Einsum", "ParseExampleV2", "ParseExample",
                                 "NonMaxSuppressionV3", "NonMaxSuppressionV4", "NonMaxSuppressionV5",
                                 "CombinedNonMaxSuppression", "DecodeJpeg", "DecodeImage", "ResizeBilinear",
                                 "ResizeNearestNeighbor", "GatherV2", "Gather", "TopKV2", "Unique",
                                 "UniqueWithCounts", "UniqueV2", "UniqueWithCountsV2", "SparseSegmentSum",
                                 "SparseSegmentMean", "SparseSegmentSqrtN", "SparseSegmentSumWithNumSegments",
                                 "SparseSegmentMeanWithNumSegments", "SparseSegmentSqrtNWithNumSegments",
                                 "SparseFillEmptyRows", "SparseToDense", "SparseCross", "SparseCrossHashed"})


@pytest.mark.parametrize(
    "case_dir", [p for p in case_dirs() if _uses_compiled_kernels(p)], ids=lambda p: p.relative_to(FIXTURES).as_posix()
)
def test_numpy_twins_match_tensorflow(case_dir: Path) -> None:
    """The same cases with the compiled kernels' numpy twins (PlanOptions(compiled_kernels=False)): both
    paths are held to TensorFlow."""
    case = load_case(case_dir)
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=False))
    sess = engine.Session(engine.load_graph(case.model), device="cpu", options=options)
    outs = sess.run(list(case.fetches), case.feeds)
    for (name, want), actual in zip(case.fetches.items(), outs):
        assert_matches(name, actual, want, case.rtol, case.atol)


def test_fixtures_are_present() -> None:
    assert len(case_dirs()) > 100, "tests/fixtures is missing; regenerate with tools/make_fixtures.py"
