"""The image kernels' compiled loops held to their numpy twins and to TensorFlow: NonMaxSuppression V1-V5 and
CombinedNonMaxSuppression (kernels.image.nms_compiled), JPEG's fancy upsampling (jpeg_upsample), bilinear and
nearest resizing (resize_compiled). The twins are the living definition: the compiled paths must select the
same boxes in the same order, and give the same pixels and values to the bit, on random inputs with ties,
degenerate and flipped boxes, NaNs, odd sizes and crops. The golden cases run on the twins too (the default
plans, which test_golden runs, take the compiled loops)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import engine
from kernels import jit
from kernels.image import codecs, combined_nms, jpeg, nms, resize
from tests.golden import FIXTURES, assert_matches, case_dirs, load_case
from tests.kernels.image.test_detection import random_boxes

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

IMAGE_CASES = case_dirs("ops/detection") + case_dirs("ops/images") + case_dirs("ops/resize")


@pytest.mark.parametrize("case_dir", IMAGE_CASES, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_numpy_twins_match_tensorflow(case_dir: Path) -> None:
    case = load_case(case_dir)
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=False))
    outs = engine.Session(engine.load_graph(case.model), device="cpu", options=options).run(
        list(case.fetches), case.feeds)
    for (name, want), actual in zip(case.fetches.items(), outs):
        assert_matches(name, actual, want, case.rtol, case.atol)


def assert_same(twin: tuple, got: tuple) -> None:
    assert len(twin) == len(got)
    for want, actual in zip(twin, got):
        assert actual.dtype == want.dtype and actual.shape == want.shape
        np.testing.assert_array_equal(actual, want)


# --- NonMaxSuppression V1-V5 ------------------------------------------------------------------------------


def nms_case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Boxes on a coarse grid (equal IoUs, some exactly at a threshold), flipped corners, zero areas; scores
    rounded (ties), some NaN or infinite."""
    n = int(rng.integers(0, 250))
    boxes = random_boxes(rng, n, grid=int(rng.choice([4, 10, 20, 1000])))
    flat = rng.random(n) < 0.1
    boxes[flat, 2] = boxes[flat, 0]  # zero height
    scores = np.round(rng.uniform(0, 1, n), int(rng.integers(1, 4))).astype(np.float32)
    scores[rng.random(n) < 0.05] = np.nan
    scores[rng.random(n) < 0.02] = np.inf
    return boxes, scores


@pytest.mark.parametrize("seed", range(4))
def test_nms_compiled_equals_twin(seed):
    rng = np.random.default_rng(seed)
    selected = 0
    for _ in range(150):
        boxes, scores = nms_case(rng)
        iou = np.float32(rng.choice([0.0, 0.3, 0.5, 1 / 3, 0.7, 1.0]))
        score = np.float32(rng.choice([-np.inf, 0.0, 0.05, 0.3]))
        sigma = np.float32(rng.choice([0.0, 0.0, 0.1, 0.5, 2.0]))
        inputs = (boxes, scores, np.int32(rng.integers(0, 120)), iou, score, sigma)
        pad = bool(rng.random() < 0.5)
        twin = nms.non_max_suppression_v5(np, *inputs, pad_to_max_output_size=pad, compiled=False)
        assert_same(twin, nms.non_max_suppression_v5(np, *inputs, pad_to_max_output_size=pad, compiled=True))
        assert_same(nms.non_max_suppression_v3(np, *inputs[:5], compiled=False),
                    nms.non_max_suppression_v3(np, *inputs[:5], compiled=True))
        selected += int(twin[2])
    assert selected > 1000  # the cases select boxes, not only empty sets


def v3(boxes, scores, max_output=10, iou=0.5, score=float("-inf")):
    (out,) = nms.non_max_suppression_v3(np, np.asarray(boxes, np.float32), np.asarray(scores, np.float32),
                                        np.int32(max_output), np.float32(iou), np.float32(score), compiled=True)
    return out.tolist()


def test_nms_compiled_keeps_tensorflows_rules():
    assert v3([[0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [2, 2, 3, 3]], [0.5, 0.9, 0.7, 0.1]) == [1, 3]  # flipped
    assert v3([[0, 0, 1, 1], [2, 2, 3, 3], [0, 0, 1, 1], [4, 4, 5, 5]], [0.5] * 4) == [0, 1, 3]  # ties: lower index
    boxes = [[0, 0, 1, 1], [0, 0, 1, 2], [0, 0, 1, 3]]  # IoUs exactly 1/2 and float32(1/3)
    assert v3(boxes, [0.9, 0.8, 0.7], iou=0.5) == [0, 1]
    assert v3(boxes, [0.9, 0.8, 0.7], iou=float(np.float32(1 / 3))) == [0, 2]
    assert v3([[0, 0, 1, 1], [0.5, 0.5, 0.5, 0.9], [0.2, 0.2, 0.2, 0.2]], [0.9, 0.8, 0.7], iou=0.0) == [0, 1, 2]
    assert v3([[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5]], [np.nan, 0.3, 0.7], score=0.3) == [2]
    # A NaN IoU puts the candidate back with a zero score (TensorFlow's loop, which the twin runs).
    assert v3([[0, 0, 1, 1], [np.nan, 0, 1, 1], [5, 5, 6, 6]], [0.9, 0.8, 0.1]) == [0, 2, 1]


def test_soft_nms_compiled_decays_as_the_twin():
    boxes = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 0.5, 1, 1.5], [3, 3, 4, 4]], np.float32)
    scores = np.array([0.9, 0.85, 0.8, 0.3], np.float32)
    inputs = (boxes, scores, np.int32(4), np.float32(0.5), np.float32(0.05), np.float32(0.5))
    twin = nms.non_max_suppression_v5(np, *inputs, compiled=False)
    got = nms.non_max_suppression_v5(np, *inputs, compiled=True)
    assert_same(twin, got)
    assert got[1][1] < scores[1]  # decayed, not dropped


# --- CombinedNonMaxSuppression -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_combined_nms_compiled_equals_twin(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        batch, n, classes = int(rng.integers(1, 4)), int(rng.integers(0, 60)), int(rng.integers(1, 6))
        q = 1 if rng.random() < 0.6 else classes
        boxes = np.stack([random_boxes(rng, n * q, grid=int(rng.choice([4, 20, 1000]))) for _ in range(batch)])
        boxes = boxes.reshape(batch, n, q, 4)
        if n and rng.random() < 0.2:
            boxes[0, rng.integers(0, n), 0, rng.integers(0, 4)] = np.nan
        scores = np.round(rng.uniform(0, 1, (batch, n, classes)), int(rng.integers(1, 3))).astype(np.float32)
        scores[rng.random(scores.shape) < 0.05] = np.nan
        inputs = (boxes, scores, np.int32(rng.integers(1, 30)), np.int32(rng.integers(1, 60)),
                  np.float32(rng.choice([0.0, 0.3, 0.5, 1.0])), np.float32(rng.choice([-np.inf, 0.0, 0.3])))
        attrs = {"pad_per_class": bool(rng.random() < 0.5), "clip_boxes": bool(rng.random() < 0.7)}
        twin = combined_nms.combined_non_max_suppression(np, *inputs, **attrs, compiled=False)
        assert_same(twin, combined_nms.combined_non_max_suppression(np, *inputs, **attrs, compiled=True))


# --- JPEG ---------------------------------------------------------------------------------------------------


def photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([np.sin(x / rng.uniform(2, 9) + y / rng.uniform(2, 9) + k) for k in range(3)], axis=-1)
    return np.clip(128 + 100 * base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


def scalar(data: bytes) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = data
    return out


@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
def test_jpeg_decode_compiled_equals_twin(subsampling):
    rng = np.random.default_rng(subsampling)
    for _ in range(40):
        h, w = int(rng.integers(1, 80)), int(rng.integers(1, 80))
        out = io.BytesIO()
        Image.fromarray(photo(rng, h, w)).save(out, "JPEG", quality=int(rng.integers(30, 100)), subsampling=subsampling)
        data = scalar(out.getvalue())
        for attrs in ({}, {"channels": 3}, {"ratio": 2}, {"fancy_upscaling": False}, {"channels": 1}):
            assert_same(codecs.decode_jpeg(np, data, **attrs, compiled=False),
                        codecs.decode_jpeg(np, data, **attrs, compiled=True))
        if h > 2 and w > 2:
            cy, cx = int(rng.integers(0, h - 1)), int(rng.integers(0, w - 1))
            window = np.array([cy, cx, rng.integers(1, h - cy + 1), rng.integers(1, w - cx + 1)], np.int32)
            assert_same(codecs.decode_and_crop_jpeg(np, data, window, compiled=False),
                        codecs.decode_and_crop_jpeg(np, data, window, compiled=True))


@pytest.mark.parametrize("factors", [(2, 2), (2, 1), (1, 2)])
def test_fancy_upsampling_compiled_equals_twin_for_every_factor(factors):
    """Draft-decoded YCbCr (chroma replicated over fh x fv blocks) at odd sizes, whole and cropped."""
    rng = np.random.default_rng(sum(factors))
    fh, fv = factors
    for _ in range(30):
        h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        ycc = rng.integers(0, 256, (h, w, 4)).astype(np.uint8)
        for k in (1, 2):
            chroma = rng.integers(0, 256, (-(-h // fv), -(-w // fh))).astype(np.uint8)
            ycc[:, :, k] = np.repeat(np.repeat(chroma, fv, axis=0), fh, axis=1)[:h, :w]
        view = ycc[:, :, :3]  # the decoder's buffer keeps 4 bytes a pixel
        crops = [None] + ([(0, int(rng.integers(1, w)), h, 1 + int(rng.integers(0, w - 1)))] if w > 2 else [])
        for crop in crops:
            if crop is not None and crop[1] + crop[3] > w:
                continue
            twin = jpeg._fancy_rgb(view, [factors, factors], crop, 8 * fh, compiled=False)
            np.testing.assert_array_equal(jpeg._fancy_rgb(view, [factors, factors], crop, 8 * fh, compiled=True), twin)


def test_truncated_jpeg_decodes_the_rows_it_has_on_both_paths():
    rng = np.random.default_rng(7)
    out = io.BytesIO()
    Image.fromarray(photo(rng, 64, 48)).save(out, "JPEG", quality=90)
    cut = scalar(out.getvalue()[: len(out.getvalue()) // 2])
    twin = codecs.decode_jpeg(np, cut, acceptable_fraction=0.01, compiled=False)
    assert_same(twin, codecs.decode_jpeg(np, cut, acceptable_fraction=0.01, compiled=True))
    assert 0 < np.flatnonzero(twin[0].reshape(64, -1).any(axis=1)).max() < 63


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's Exif reader, on the damaged copies
def test_jpeg_headers_read_without_pillows_parser_are_pillows(monkeypatch):
    """read_header's own marker scan gives what Pillow's parser gives (or refuses what it refuses), on
    files with Exif, ICC profiles, comments, progressive and CMYK frames, and on damaged copies."""
    rng = np.random.default_rng(3)
    corpus = []
    for _ in range(60):
        mode = str(rng.choice(["RGB", "L", "CMYK"]))
        channels = {"RGB": 3, "L": 1, "CMYK": 4}[mode]
        pixels = rng.integers(0, 256, (int(rng.integers(1, 40)), int(rng.integers(1, 40)), channels)).astype(np.uint8)
        options = {"quality": int(rng.integers(10, 100)), "progressive": bool(rng.random() < 0.3)}
        if rng.random() < 0.3:
            exif = Image.Exif()
            exif[0x0110] = "camera"
            options["exif"] = exif.tobytes()
        if rng.random() < 0.3:
            options["dpi"] = (72, 72)
        if rng.random() < 0.2:
            options["icc_profile"] = bytes(rng.integers(0, 256, int(rng.integers(0, 2000))).astype(np.uint8))
        if rng.random() < 0.2:
            options["comment"] = b"hello"
        out = io.BytesIO()
        Image.fromarray(pixels[:, :, 0] if mode == "L" else pixels, mode).save(out, "JPEG", **options)
        data = out.getvalue()
        corpus.append(data)
        for _ in range(5):
            damaged = bytearray(data)
            at = int(rng.integers(0, min(len(damaged), 600)))
            if rng.random() < 0.5:
                damaged[at] = int(rng.integers(0, 256))
            else:
                del damaged[at:]
            corpus.append(bytes(damaged))

    def header(data: bytes):
        try:
            return jpeg.read_header(data)
        except jpeg.JpegError:
            return "refused"

    scanned = [header(data) for data in corpus]
    assert sum(jpeg._scan_header(data) is not None for data in corpus) > len(corpus) // 4  # the scan is used
    monkeypatch.setattr(jpeg, "_scan_header", lambda data: None)
    assert scanned == [header(data) for data in corpus]


# --- resizing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("align_corners,half_pixel_centers", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_resize_compiled_equals_twin(align_corners, half_pixel_centers, dtype):
    rng = np.random.default_rng(int(align_corners) + 2 * int(half_pixel_centers))
    shapes = [((b, h, w, c), (oh, ow)) for b, h, w, c, oh, ow in rng.integers(1, 14, (25, 6))]
    shapes += [((2, 150, 97, 3), (301, 203)), ((1, 240, 320, 3), (224, 224))]  # run in blocks of rows
    for shape, size in shapes:
        images = rng.uniform(0, 255, shape) if dtype == np.uint8 else rng.normal(0, 100, shape)
        images = images.astype(dtype)
        if dtype == np.float32:
            images[rng.random(shape) < 0.01] = np.nan
        attrs = {"align_corners": align_corners, "half_pixel_centers": half_pixel_centers}
        for op in (resize.resize_bilinear, resize.resize_nearest_neighbor):
            twin = op(np, images, np.array(size, np.int32), **attrs, compiled=False)
            assert_same(twin, op(np, images, np.array(size, np.int32), **attrs, compiled=True))
