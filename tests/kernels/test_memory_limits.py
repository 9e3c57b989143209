"""The per-request memory limit of kernels whose output size depends on the values (or shapes) a client
sends: past the limit they raise AllocationTooLarge before allocating; within it, or with no limit, they
compute what they always did. Absurd sizes are refused without integer overflow."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import kernels
from kernels.limits import AllocationTooLarge, check_broadcast, check_shape

MiB = 1 << 20
LIMIT = MiB  # the limit the bombs are run under
F32, I32, I64 = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64)


def run(op: str, inputs: list, attrs: dict, memory_limit: int | None) -> tuple:
    """The CPU kernel of `op`, bound as a plan binds it, with `memory_limit` as its context."""
    bound = kernels.lookup(op, "cpu").bind(np, attrs, {"memory_limit": memory_limit})
    with np.errstate(all="ignore"):
        return bound(*inputs)


def s(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def scalar_string(value: bytes) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = value
    return out


def image_bytes(fmt: str, size: int = 2000) -> np.ndarray:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size)).save(buffer, format=fmt)
    return scalar_string(buffer.getvalue())


def tiny_bmp_declaring(width: int, height: int) -> np.ndarray:
    """A BMP header declaring a large 24-bit image, with no pixel rows behind it."""
    header = bytearray(54)
    header[0:2] = b"BM"
    header[10:14] = (54).to_bytes(4, "little")
    header[14:18] = (40).to_bytes(4, "little")
    header[18:22] = width.to_bytes(4, "little")
    header[22:26] = height.to_bytes(4, "little")
    header[26:28] = (1).to_bytes(2, "little")
    header[28:30] = (24).to_bytes(2, "little")
    return scalar_string(bytes(header))


def f32(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


PARSE_ATTRS = {"Nsparse": 0, "Ndense": 1, "sparse_types": (), "Tdense": (F32,), "dense_shapes": ((100,),)}
SEQUENCE_ATTRS = {"feature_list_dense_missing_assumed_empty": (), "context_sparse_keys": (),
                  "context_dense_keys": ("age",), "feature_list_sparse_keys": (), "feature_list_dense_keys": (),
                  "Ncontext_dense": 1, "Tcontext_dense": (I64,), "context_dense_shapes": ((100,),)}
IMAGE_1x2x2x1 = f32(1, 2, 2, 1)

# (op, bomb inputs, normal inputs, attrs): the bomb asks for far more than LIMIT; the normal inputs for
# far less.
CASES = [
    ("Fill", [np.int32([30000, 30000]), np.float32(1)], [np.int32([2, 3]), np.float32(1)], {}),
    ("Tile", [f32(2, 2), np.int32([100000, 100000])], [f32(2, 2), np.int32([2, 3])], {}),
    ("Range", [np.int64(0), np.int64(10**9), np.int64(1)], [np.int64(0), np.int64(10), np.int64(3)], {}),
    ("Range", [np.float32(0), np.float32(1e9), np.float32(1)], [np.float32(0), np.float32(2), np.float32(0.5)], {}),
    ("BroadcastTo", [f32(1), np.int32([100000, 100000])], [f32(1), np.int32([3, 2])], {}),
    ("Pad", [f32(2, 2), np.int32([[0, 100000], [0, 100000]])], [f32(2, 2), np.int32([[1, 1], [0, 2]])], {}),
    ("PadV2", [f32(2, 2), np.int32([[0, 100000], [0, 100000]]), np.float32(7)],
     [f32(2, 2), np.int32([[1, 1], [0, 2]]), np.float32(7)], {}),
    ("MirrorPad", [f32(200, 200), np.int32([[199, 199], [199, 199]])], [f32(3, 3), np.int32([[1, 1], [2, 2]])],
     {"mode": "REFLECT"}),
    ("OneHot", [np.int32([0, 1, 2]), np.int32(10**9), np.float32(1), np.float32(0)],
     [np.int32([0, 1, 5]), np.int32(4), np.float32(1), np.float32(0)], {}),
    ("ScatterNd", [np.int32([[0]]), np.float32([5]), np.int64([10**9])],
     [np.int32([[1]]), np.float32([5]), np.int64([4])], {}),
    ("UnsortedSegmentSum", [f32(2), np.int32([0, 1]), np.int32(10**9)], [f32(2), np.int32([0, 2]), np.int32(3)], {}),
    ("SegmentSum", [f32(2), np.int32([0, 10**9])], [f32(3), np.int32([0, 0, 2])], {}),
    ("SegmentMean", [f32(2), np.int32([0, 10**9])], [f32(3), np.int32([0, 0, 2])], {}),
    ("SparseSegmentSum", [f32(2, 1), np.int32([0, 1]), np.int32([0, 10**9])],
     [f32(2, 1), np.int32([0, 1]), np.int32([0, 2])], {}),
    ("Bincount", [np.int32([1]), np.int32(10**9), np.zeros(0, np.float32)],
     [np.int32([1, 1, 3]), np.int32(5), np.zeros(0, np.float32)], {}),
    ("DenseBincount", [np.int32([[1], [2]]), np.int32(10**9), np.zeros(0, np.float32)],
     [np.int32([[1], [2]]), np.int32(4), np.zeros(0, np.float32)], {}),
    ("SparseToDense", [np.int64([[0]]), np.int64([10**9]), np.float32([1]), np.float32(0)],
     [np.int64([[2]]), np.int64([4]), np.float32([1]), np.float32(0)], {}),
    ("SparseFillEmptyRows", [np.int64([[0, 0]]), np.float32([1]), np.int64([10**9, 1]), np.float32(0)],
     [np.int64([[1, 0]]), np.float32([1]), np.int64([3, 1]), np.float32(0)], {}),
    ("StatelessRandomUniform", [np.int32([100000, 100000]), np.int64([1, 2])], [np.int32([2, 3]), np.int64([1, 2])],
     {"dtype": F32}),
    ("StatelessRandomNormalV2", [np.int32([100000, 100000]), np.uint64([7]), np.uint64([0, 0]), np.int32(1)],
     [np.int32([4]), np.uint64([7]), np.uint64([0, 0]), np.int32(1)], {"dtype": F32}),
    ("ResizeBilinear", [IMAGE_1x2x2x1, np.int32([50000, 50000])], [IMAGE_1x2x2x1, np.int32([3, 5])], {}),
    ("ResizeNearestNeighbor", [IMAGE_1x2x2x1, np.int32([50000, 50000])], [IMAGE_1x2x2x1, np.int32([3, 5])], {}),
    ("ResizeBicubic", [IMAGE_1x2x2x1, np.int32([50000, 50000])], [IMAGE_1x2x2x1, np.int32([3, 5])], {}),
    ("ResizeArea", [IMAGE_1x2x2x1, np.int32([50000, 50000])], [IMAGE_1x2x2x1, np.int32([3, 5])], {}),
    ("CropAndResize", [IMAGE_1x2x2x1, np.float32([[0, 0, 1, 1]]), np.int32([0]), np.int32([50000, 50000])],
     [IMAGE_1x2x2x1, np.float32([[0, 0, 1, 1]]), np.int32([0]), np.int32([3, 3])], {}),
    ("ScaleAndTranslate", [IMAGE_1x2x2x1, np.int32([50000, 50000]), np.float32([1, 1]), np.float32([0, 0])],
     [IMAGE_1x2x2x1, np.int32([4, 4]), np.float32([2, 2]), np.float32([0, 0])], {}),
    ("ImageProjectiveTransformV3",
     [IMAGE_1x2x2x1, np.float32([[1, 0, 0, 0, 1, 0, 0, 0]]), np.int32([50000, 50000]), np.float32(0)],
     [IMAGE_1x2x2x1, np.float32([[1, 0, 0, 0, 1, 0, 0, 0]]), np.int32([3, 3]), np.float32(0)],
     {"interpolation": "NEAREST"}),
    ("TensorListReserve", [np.int32(-1), np.int32(10**9)], [np.int32(-1), np.int32(3)], {"element_dtype": F32}),
    ("TensorArrayV3", [np.int32(10**9)], [np.int32(3)], {"dtype": F32}),
    ("DecodePaddedRaw", [s(b"ab"), np.int32(10**9)], [s(b"ab", b"c"), np.int32(4)], {"out_type": np.dtype(np.uint8)}),
    ("RaggedRange", [np.int64(0), np.int64(10**9), np.int64(1)], [np.int64([0, 2]), np.int64([3, 5]), np.int64(1)], {}),
    ("Conv2DBackpropInput", [np.int32([1, 100000, 100000, 1]), f32(1, 1, 1, 1), f32(1, 1, 1, 1)],
     [np.int32([1, 4, 4, 1]), f32(1, 1, 1, 1), f32(1, 1, 1, 1) + 2],
     {"strides": (1, 100000, 100000, 1), "padding": "VALID"}),
    ("SpaceToBatchND", [IMAGE_1x2x2x1, np.int32([1, 1]), np.int32([[0, 100000], [0, 100000]])],
     [IMAGE_1x2x2x1, np.int32([2, 2]), np.int32([[0, 0], [0, 2]])], {}),
    # Shape-dependent blow-ups from small inputs.
    ("MatMul", [f32(50000, 1), f32(1, 50000)], [f32(2, 1), f32(1, 3)], {}),
    ("BatchMatMulV2", [f32(2, 50000, 1), f32(1, 1, 50000)], [f32(2, 2, 1), f32(1, 1, 3)], {}),
    ("AddV2", [f32(50000, 1), f32(1, 50000)], [f32(2, 1), f32(1, 3)], {}),
    ("Mul", [f32(50000, 1), f32(50000)], [f32(2, 1), f32(3)], {}),
    ("RealDiv", [f32(50000, 1), f32(1, 50000) + 1], [f32(2, 1), f32(1, 3) + 1], {}),
    ("Equal", [f32(50000, 1), f32(1, 50000)], [f32(2, 1), f32(1, 3)], {}),
    ("SelectV2", [np.ones((200, 1, 1), bool), f32(1, 200, 1), f32(1, 1, 200)],
     [np.ones((2, 1, 1), bool), f32(1, 2, 1), f32(1, 1, 2)], {}),
    # Strings whose output bytes multiply.
    ("StringJoin", [s(*[b"a"] * 1000), scalar_string(b"x" * 2000)], [s(b"a", b"b"), scalar_string(b"x")],
     {"separator": "-", "N": 2}),
    ("ReduceJoin", [s(*[b"a"] * 2000), np.int32([0])], [s(b"a", b"b"), np.int32([0])], {"separator": "x" * 1000}),
    ("RegexReplace", [s(b"a" * 1000), scalar_string(b""), scalar_string(b"x" * 2000)],
     [s(b"abc"), scalar_string(b"b"), scalar_string(b"XY")], {}),
    ("StaticRegexReplace", [s(b"a" * 1000)], [s(b"abc")], {"pattern": "", "rewrite": "x" * 2000}),
    ("ParseExample", [s(*[b""] * 20000), s(), scalar_string(b"x"), np.zeros(100, np.float32)],
     [s(b"", b""), s(), scalar_string(b"x"), np.zeros(100, np.float32)], PARSE_ATTRS),
    ("ParseSequenceExample", [s(*[b""] * 20000), s(), np.zeros(100, np.int64)],
     [s(b"", b""), s(), np.zeros(100, np.int64)], SEQUENCE_ATTRS),
    # Image decoders: the size the header declares, before decoding.
    ("DecodePng", [image_bytes("PNG")], [image_bytes("PNG", 8)], {}),
    ("DecodeJpeg", [image_bytes("JPEG")], [image_bytes("JPEG", 8)], {}),
    ("DecodeGif", [image_bytes("GIF")], [image_bytes("GIF", 8)], {}),
    ("DecodeImage", [image_bytes("PNG")], [image_bytes("PNG", 8)], {"dtype": F32}),
]


def _id(case) -> str:
    return f"{case[0]}-{case[1][0].dtype}" if case[0] == "Range" else case[0]


@pytest.mark.parametrize("op, bomb, normal, attrs", CASES, ids=[_id(c) for c in CASES])
def test_a_bomb_is_refused_before_allocating(op, bomb, normal, attrs):
    with pytest.raises(AllocationTooLarge) as info:
        run(op, bomb, attrs, LIMIT)
    error = info.value
    assert error.limit == LIMIT and error.requested > LIMIT
    assert f"{error.requested} bytes" in str(error) and f"limit of {LIMIT} bytes" in str(error)


@pytest.mark.parametrize("op, bomb, normal, attrs", CASES, ids=[_id(c) for c in CASES])
def test_normal_sizes_compute_the_same_with_and_without_a_limit(op, bomb, normal, attrs):
    unlimited = run(op, normal, attrs, None)
    limited = run(op, normal, attrs, LIMIT)
    assert len(unlimited) == len(limited)
    for a, b in zip(unlimited, limited):
        if isinstance(a, np.ndarray) and a.dtype != object and op not in ("TensorArrayV3",):
            np.testing.assert_array_equal(a, b)


def test_a_bmp_header_declaring_a_large_image_is_refused_before_its_rows_are_read():
    with pytest.raises(AllocationTooLarge, match="DecodeBmp decoded image of shape \\[2000,2000,3\\]"):
        run("DecodeBmp", [tiny_bmp_declaring(2000, 2000)], {"channels": 3}, LIMIT)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Fill", [np.int64([2**62, 2**62]), np.float32(0)], {}),
    ("Tile", [f32(1, 1), np.int64([2**62, 2**62])], {}),
    ("BroadcastTo", [f32(1), np.int64([2**62, 2**62])], {}),
    ("StatelessRandomUniform", [np.int64([2**62, 2**62]), np.int64([1, 2])], {"dtype": F32}),
    ("ScatterNd", [np.int64([[0, 0]]), np.float32([1]), np.int64([2**62, 2**62])], {}),
    ("Range", [np.int64(-(2**62)), np.int64(2**62), np.int64(1)], {}),
])
def test_absurd_shapes_are_refused_without_overflow(op, inputs, attrs):
    """[2**62, 2**62] wraps to 0 in int64 arithmetic: sizes are Python ints, so it is refused as it is."""
    with pytest.raises(AllocationTooLarge) as info:
        run(op, inputs, attrs, 1 << 40)
    assert info.value.requested >= 2**63


def test_zeros_like_needs_no_check_its_input_is_already_allocated():
    """ZerosLike/OnesLike make an array the size of one that exists: no context, nothing to refuse."""
    assert "memory_limit" not in kernels.lookup("ZerosLike", "cpu").context_params
    assert run("ZerosLike", [f32(3, 3)], {}, 1).__len__() == 1


def test_reshape_allocates_nothing_so_it_is_not_limited():
    (out,) = run("Reshape", [f32(4, 4), np.int32([2, 8])], {}, 1)
    assert out.shape == (2, 8)


def test_the_limit_is_unlimited_when_a_kernel_is_bound_outside_a_plan():
    """Constant folding and direct use bind kernels without a plan: no limit, as before."""
    (out,) = kernels.lookup("Fill", "cpu").bind(np, {})(np.int32([300, 300]), np.float32(1))
    assert out.shape == (300, 300)


def test_check_helpers():
    assert check_shape(np.int64([2, 3]), np.float32, 24, "x") == (2, 3)
    with pytest.raises(AllocationTooLarge, match="x of shape \\[2,4\\] would take 32 bytes"):
        check_shape([2, 4], np.float32, 24, "x")
    check_broadcast((f32(3, 1), f32(1, 3)), 36, "sum")
    with pytest.raises(AllocationTooLarge, match="sum of shape \\[4,3\\]"):
        check_broadcast((f32(4, 1), f32(1, 3)), 36, "sum")
    check_broadcast((f32(4, 1), f32(1, 3)), None, "sum")
