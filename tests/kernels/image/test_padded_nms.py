"""_TensorgatePaddedNms (kernels.image.padded_nms): the compiled tiles held to the numpy twin, which computes
TensorFlow's matrices, to the bit, on random score-sorted boxes (zeros after the live ones, boxes wholly below
zero, flipped corners, IoUs exactly at the threshold on a grid), in both spellings, several tile sizes and
batches; and what the op declines (the loop then runs as written). The golden padded NMS loops run through it
in tests/engine/passes/test_padded_nms_loop.py."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit
from kernels.image.padded_nms import OP

SPELLINGS = ("model_garden", "tf_image")


def bind(spelling: str, compiled: bool, max_iterations: int = 1000):
    return kernels.lookup(OP, "cpu").bind(np, {"spelling": spelling, "max_iterations": max_iterations},
                                          {"compiled": compiled})


def sorted_boxes(rng: np.random.Generator, batch: int, n: int, live: int, grid: int) -> np.ndarray:
    """[batch, n, 4]: `live` boxes around a few centres on a 1/grid grid, then zeros (as a score sort leaves
    boxes under the score threshold); a few flipped, a few wholly below zero."""
    centres = rng.uniform(0.2, 0.8, (batch, int(rng.integers(2, 12)), 2))
    pick = rng.integers(0, centres.shape[1], (batch, live))
    centre = np.take_along_axis(centres, pick[..., None], axis=1) + rng.normal(0, 0.03, (batch, live, 2))
    half = rng.uniform(0.02, 0.15, (batch, live, 2))
    boxes = np.zeros((batch, n, 4), np.float32)
    boxes[:, :live] = np.round(np.concatenate([centre - half, centre + half], axis=-1) * grid) / grid
    flip = rng.random((batch, live)) < 0.03
    boxes[:, :live][flip] = boxes[:, :live][flip][:, [2, 3, 0, 1]]
    boxes[:, :live][rng.random((batch, live)) < 0.03] -= 2.0
    return boxes


def run(spelling: str, compiled: bool, boxes: np.ndarray, threshold: float, most: int, tile: int, start: int = 0,
        sizes: np.ndarray | None = None, max_iterations: int = 1000) -> tuple:
    batch, n = boxes.shape[:2]
    sizes = np.zeros(batch, np.int32) if sizes is None else sizes
    return bind(spelling, compiled, max_iterations)(
        boxes, sizes, np.int32(start), np.float32(threshold), np.int32(most), np.int32(n // tile), np.int32(tile))


@pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")
@pytest.mark.parametrize("seed", range(40))
def test_compiled_tiles_match_the_twin(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tile = int(rng.choice([8, 32, 64, 512]))
    tiles = int(rng.integers(1, 5))
    n = tile * tiles
    boxes = sorted_boxes(rng, int(rng.integers(1, 5)), n, int(rng.integers(0, n + 1)), int(rng.choice([8, 16, 1000])))
    spelling = SPELLINGS[seed % 2]
    threshold = float(rng.choice([0.5, 0.3, 0.45, 0.7, 1 / 3]))
    most = int(rng.integers(1, n + 2))
    twin = run(spelling, False, boxes, threshold, most, tile)
    got = run(spelling, True, boxes, threshold, most, tile)
    assert int(twin[3]) >= 0
    for want, actual in zip(twin, got):
        assert np.asarray(actual).dtype == np.asarray(want).dtype
        np.testing.assert_array_equal(actual, want)


@pytest.mark.parametrize("compiled", [False, True] if jit.AVAILABLE else [False])
def test_suppresses_within_and_across_tiles(compiled: bool) -> None:
    # tile 0: box 0, box 1 (IoU 1/2 with box 0: suppressed at 0.5), box 2 apart; tile 1: a copy of box 2
    # (suppressed by it across tiles), a box apart, a box wholly below zero (never counted).
    boxes = np.zeros((1, 8, 4), np.float32)
    boxes[0, :3] = [[0, 0, 1, 1], [0, 0, 1, 2], [5, 5, 6, 6]]
    boxes[0, 4:7] = [[5, 5, 6, 6], [10, 10, 11, 11], [-3, -3, -2, -2]]
    before = boxes.copy()
    for spelling in SPELLINGS:
        out, sizes, idx, iterations = run(spelling, compiled, boxes, 0.5, 10, 4)
        assert (int(iterations), int(idx), sizes.tolist()) == (2, 2, [3])
        kept = np.any(out[0] != 0, axis=1)
        assert kept.tolist() == [True, False, True, False, False, True, True, False]
        np.testing.assert_array_equal(boxes, before)  # the input is left alone


@pytest.mark.parametrize("compiled", [False, True] if jit.AVAILABLE else [False])
def test_stops_when_every_image_has_enough(compiled: bool) -> None:
    rng = np.random.default_rng(7)
    boxes = sorted_boxes(rng, 2, 256, 256, 1000)
    boxes[:, 0] = [0.1, 0.1, 0.2, 0.2]  # each image keeps its first box
    out, sizes, idx, iterations = run("tf_image", compiled, boxes, 0.5, 1, 64)
    assert int(iterations) == 1 and int(idx) == 1 and sizes.min() >= 1
    np.testing.assert_array_equal(out[:, 64:], boxes[:, 64:])
    _, sizes0, idx0, none = run("tf_image", compiled, boxes, 0.5, 1, 64, sizes=np.ones(2, np.int32))
    assert int(none) == 0 and int(idx0) == 0 and sizes0.tolist() == [1, 1]


@pytest.mark.parametrize("compiled", [False, True] if jit.AVAILABLE else [False])
def test_declines_what_the_loop_must_run(compiled: bool) -> None:
    boxes = np.zeros((1, 8, 4), np.float32)
    boxes[0, 0] = [0, 0, 1, 1]
    # A box of area exactly -1e-8 beside zero boxes: its IoU with them is 0 / 0.
    nan_boxes = boxes.copy()
    nan_boxes[0, 1] = [0, 0, 1, -np.float32(1e-8)]
    assert int(run("tf_image", compiled, nan_boxes, 0.5, 10, 4)[3]) == -1
    assert int(run("tf_image", compiled, boxes, 0.0, 10, 4)[3]) == -1  # threshold not above 0
    assert int(run("tf_image", compiled, boxes[:, :6], 0.5, 10, 4)[3]) == -1  # 6 boxes in tiles of 4
    assert int(run("tf_image", compiled, boxes, 0.5, 10, 4, max_iterations=1)[3]) == -1  # two iterations
    assert int(run("tf_image", compiled, boxes, 0.5, 10, 4, max_iterations=2)[3]) == 2
