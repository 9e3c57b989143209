"""The compiled walk over a batch of serialized tf.Examples (kernels.parsing.example_wire_walk) held to its
twin, the per-Example parser of kernels.parsing.example_parser: on generated batches (random keys, types,
lengths, packed and unpacked lists, duplicate keys, empty Features, missing required features, non-ASCII
keys, unusual and malformed wire bytes) both paths give the same tensors, or the same error word for word;
the walk takes the usual batches itself; and both paths give TensorFlow's outputs on the golden cases.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import engine
from kernels import jit
from kernels.limits import AllocationTooLarge
from kernels.parsing import example_wire_walk
from kernels.parsing.example_parser import ExampleConfig, dense_specs, list_specs, parse_example_batch
from tests.golden import assert_matches, case_dirs, load_case
from tests.kernels.example_protos import EMPTY, example, field, floats, ints, strs

pytestmark = pytest.mark.skipif(not (jit.AVAILABLE and example_wire_walk.AVAILABLE), reason="needs numba")

F32, I64, STR = np.dtype(np.float32), np.dtype(np.int64), np.dtype(object)
KEYS = ["a", "b", "c", "dd", "", "ключ", "日本語", "k" * 40]


# --- generated Examples ---------------------------------------------------------------------------------


def _values(rng, dtype, count):
    if dtype == F32:
        values = rng.standard_normal(count).astype(np.float32)
        if count and rng.random() < 0.2:
            values[0] = np.float32(["nan", "inf", "-0.0"][rng.integers(3)])
        return [float(v) for v in values]
    if dtype == I64:
        wide = [0, 1, -1, 127, 128, -(1 << 63), (1 << 63) - 1, 1 << 40]
        return [int(rng.choice(wide)) if rng.random() < 0.3 else int(rng.integers(-1000, 1000)) for _ in range(count)]
    return [bytes(rng.integers(0, 256, rng.integers(0, 6), dtype=np.uint8)) for _ in range(count)]


def _feature(rng, dtype, count):
    values = _values(rng, dtype, count)
    packed = bool(rng.random() < 0.7)
    if dtype == F32:
        return floats(*values, packed=packed)
    if dtype == I64:
        return ints(*values, packed=packed)
    return strs(*values)


def _entry(rng, key, dtype, count):
    """A map entry; now and then an empty Feature, a missing value or key field, or the value before the key."""
    r = rng.random()
    feature = EMPTY if r < 0.1 else _feature(rng, dtype, count)
    key_field = b"" if key == "" and rng.random() < 0.3 else field(1, key.encode())
    value_field = b"" if not feature and rng.random() < 0.5 else field(2, feature)
    body = value_field + key_field if rng.random() < 0.1 else key_field + value_field
    return field(1, body)


def _example(rng, schema):
    """A serialized Example of some of `schema`'s features (key -> (dtype, count)), plus unrequested
    ones, in random order, some keys twice."""
    entries = []
    for key, (dtype, count) in schema.items():
        if rng.random() < 0.85:
            entries.append(_entry(rng, key, dtype, count(rng)))
            if rng.random() < 0.1:  # the key again: the last entry wins
                entries.append(_entry(rng, key, dtype, count(rng)))
    if rng.random() < 0.3:
        entries.append(_entry(rng, "unrequested", I64, 2))
    rng.shuffle(entries)
    if rng.random() < 0.05:  # Example.features twice: protobuf merges their entries
        cut = len(entries) // 2
        return field(1, b"".join(entries[:cut])) + field(1, b"".join(entries[cut:]))
    return field(1, b"".join(entries)) if entries or rng.random() < 0.5 else b""


def _unusual(rng, serialized):
    """The Example made unusual or malformed in one of the ways TensorFlow's parser sees."""
    how = rng.integers(7)
    if how == 0 and serialized:
        return serialized[:rng.integers(len(serialized))]  # cut short
    if how == 1 and serialized:
        data = bytearray(serialized)
        data[rng.integers(len(data))] ^= 1 << int(rng.integers(8))  # a flipped bit
        return bytes(data)
    if how == 2:
        return serialized + b"\x10\x01"  # an unknown varint field in the Example
    if how == 3:
        return serialized + field(1, field(1, field(1, b"a") + field(1, b"a") + field(2, floats(1))))  # key twice
    if how == 4:
        return serialized + field(1, field(1, field(1, b"b") + field(2, b"\x22\x00")))  # no such list
    if how == 5:
        return serialized + field(1, field(1, field(1, b"a") + field(2, floats(1) + b"\x08\x01")))  # bytes after it
    return serialized + field(1, field(1, field(1, b"c") + field(2, field(3, field(1, b"\xff" * 9 + b"\x7f")))))  # wide


def _config(rng, schema):
    """Some of `schema`'s features asked for as dense (fixed or variable length, required or not), sparse
    or ragged."""
    dense, sparse, ragged = [], [], []
    for key, (dtype, _) in schema.items():
        kind = rng.integers(5)
        if kind == 0:
            continue
        if kind == 1:
            stride = int(rng.integers(1, 3))
            required = rng.random() < 0.3
            default = np.zeros(0, dtype) if required else np.array(_values(rng, dtype, stride), dtype)
            dense.append((key, dtype, (stride,), default))
        elif kind == 2:
            stride = int(rng.integers(1, 3))
            dense.append((key, dtype, (None, stride), np.array(_values(rng, dtype, 1), dtype)))
        elif kind == 3:
            sparse.append((key, dtype))
        else:
            ragged.append((key, dtype, np.dtype(rng.choice([np.int32, np.int64]))))
    return ExampleConfig(
        dense_specs([k.encode() for k, *_ in dense], tuple(d for _, d, *_ in dense), tuple(s for *_, s, _ in dense),
                    tuple(v for *_, v in dense)),
        list_specs([k.encode() for k, _ in sparse], tuple(d for _, d in sparse)),
        list_specs([k.encode() for k, *_ in ragged], tuple(d for _, d, _ in ragged), tuple(s for *_, s in ragged)))


def _schema(rng):
    """Keys with a type and a count: fixed (as a fixed-length dense feature needs) or varying."""
    schema = {}
    for key in rng.choice(KEYS, size=rng.integers(1, 5), replace=False):
        dtype = [F32, I64, STR][rng.integers(3)]
        fixed = int(rng.integers(0, 4))
        schema[str(key)] = (dtype, (lambda r, f=fixed: f) if rng.random() < 0.6 else (lambda r: int(r.integers(0, 5))))
    return schema


def _outcome(config, batch, names, compiled):
    try:
        return parse_example_batch(config, batch, names, compiled=compiled).outputs()
    except ValueError as e:
        return str(e)


def _assert_same(twin, walked):
    if isinstance(twin, str) or isinstance(walked, str):
        assert twin == walked
        return
    assert len(twin) == len(walked)
    for want, got in zip(twin, walked):
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        if want.dtype == F32:  # bit for bit: NaN payloads and -0.0 included
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_and_its_twin_agree_on_generated_batches(seed):
    rng = np.random.default_rng(seed)
    for _ in range(10):
        schema = _schema(rng)
        config = _config(rng, schema)
        batch = [_example(rng, schema) for _ in range(rng.integers(1, 9))]
        if rng.random() < 0.3:
            i = int(rng.integers(len(batch)))
            batch[i] = _unusual(rng, batch[i])
        names = [f"ex{i}".encode() for i in range(len(batch))] if rng.random() < 0.5 else []
        _assert_same(_outcome(config, batch, names, False), _outcome(config, batch, names, True))


# --- the walk takes the usual batches ------------------------------------------------------------------


def _walk(batch, keys, dtypes, kinds=None, strides=None, required=None):
    n = len(keys)
    kinds = kinds or [example_wire_walk.LIST] * n
    return example_wire_walk.walk_batch(batch, [k.encode() for k in keys], dtypes, kinds, strides or [0] * n,
                                        required or [False] * n)


def test_the_walk_reads_packed_and_unpacked_lists_and_keeps_the_last_entry():
    batch = [example(("ключ", floats(1.5, -2, packed=False)), ("b", ints(-1, 1 << 62)), ("s", strs("x", b"\xff"))),
             example(("b", ints(3, packed=False)), ("b", EMPTY), ("ключ", floats(7))),
             field(1, field(1, field(2, strs("v")) + field(1, b"s")))]  # value before key
    walked = _walk(batch, ["ключ", "b", "s"], [F32, I64, STR])
    assert walked is not None
    (f_found, f_values), (i_found, i_values), (s_found, s_values) = walked
    np.testing.assert_array_equal(f_found, [2, 1, -1])
    np.testing.assert_array_equal(f_values, np.array([1.5, -2, 7], np.float32))
    np.testing.assert_array_equal(i_found, [2, 0, -1])  # the empty Feature came last: an empty list
    np.testing.assert_array_equal(i_values, [-1, 1 << 62])
    np.testing.assert_array_equal(s_found, [2, -1, 1])
    assert list(s_values) == [b"x", b"\xff", b"v"]


def test_a_context_example_before_an_example_is_merged_into_it():
    """Classify and regress feed a context Example's bytes followed by each Example's: protobuf merges the
    two, and a key in both takes the Example's value."""
    walked = _walk([example(("a", floats(1)), ("c", strs("ctx"))) + example(("a", floats(2, 3)))], ["a", "c"],
                   [F32, STR])
    assert walked is not None
    np.testing.assert_array_equal(walked[0][1], np.array([2, 3], np.float32))
    assert list(walked[1][1]) == [b"ctx"]


def test_a_dense_feature_skips_an_empty_feature_given_last():
    batch = [example(("a", floats(1, 2)), ("a", EMPTY))]
    walked = _walk(batch, ["a"], [F32], [example_wire_walk.FIXED], [2], [True])
    assert walked is not None
    np.testing.assert_array_equal(walked[0][1], [1, 2])


@pytest.mark.parametrize("unusual", [
    example(("a", floats(1) + b"\x08\x01")),  # more bytes after the list
    example(("a", b"\x22\x00")),  # no list of that tag
    example(("a", field(2, field(1, b"\x00\x00\x80")))),  # a packed float run of 3 bytes
    example(("a", ints(1))),  # a float feature given int64s
    field(1, field(1, field(1, b"a") + field(1, b"a") + field(2, floats(1)))),  # an entry with its key twice
    example(("a", floats(1))) + b"\x10\x01",  # an unknown field
    example(("a", floats(1)))[:-1],  # cut short
    example(("a", field(3, field(1, b"\xff" * 9 + b"\x02")))),  # an int64 with bits past 64
], ids=["trailing", "tag", "ragged-run", "type", "key-twice", "unknown-field", "cut", "wide-varint"])
def test_the_walk_leaves_unusual_examples_to_the_twin(unusual):
    dtype = I64 if unusual.endswith(b"\x02") else F32
    assert _walk([example(("a", floats(1))), unusual], ["a"], [dtype]) is None


def test_the_walk_leaves_a_missing_required_feature_or_a_wrong_count_to_the_twin():
    batch = [example(("a", floats(1, 2))), example(("b", floats(1)))]
    assert _walk(batch, ["a"], [F32], [example_wire_walk.FIXED], [2], [False]) is not None
    assert _walk(batch, ["a"], [F32], [example_wire_walk.FIXED], [2], [True]) is None
    assert _walk(batch, ["a"], [F32], [example_wire_walk.FIXED], [3], [False]) is None
    assert _walk(batch, ["a"], [F32], [example_wire_walk.VARLEN], [2], [False]) is not None
    assert _walk([example(("a", floats(1, 2, 3)))], ["a"], [F32], [example_wire_walk.VARLEN], [2], [False]) is None


def test_errors_name_the_example_on_both_paths():
    config = ExampleConfig(dense_specs([b"a"], (F32,), ((1,),), (np.zeros(0, np.float32),)))
    batch = [example(("a", floats(1))), example(("a", floats(1))), example(("a", ints(2)))]
    for compiled in (False, True):
        with pytest.raises(ValueError, match=r"^Name: ex2, Key: a, Index: 2\.  Data types don't match"):
            parse_example_batch(config, batch, [b"ex0", b"ex1", b"ex2"], compiled=compiled)


def test_the_memory_limit_holds_on_both_paths():
    """Tiny Examples with a large default make large dense outputs: both paths refuse them before building
    them, and parse them alike under a limit they fit in."""
    config = ExampleConfig(dense_specs([b"a"], (F32,), ((1000,),), (np.zeros(1000, np.float32),)),
                           list_specs([b"s"], (I64,)))
    batch = [b""] * 2000 + [example(("s", ints(1, 2)))]
    for compiled in (False, True):
        with pytest.raises(AllocationTooLarge, match="dense outputs of 2001 Examples"):
            parse_example_batch(config, batch, [], memory_limit=1 << 20, compiled=compiled)
    _assert_same(parse_example_batch(config, batch, [], memory_limit=1 << 24, compiled=False).outputs(),
                 parse_example_batch(config, batch, [], memory_limit=1 << 24, compiled=True).outputs())


# --- golden cases -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True], ids=["twin", "compiled"])
@pytest.mark.parametrize("case_dir", case_dirs("ops/example_parsing/v2") + case_dirs("ops/example_parsing/v1"),
                         ids=lambda p: p.name)
def test_both_paths_match_tensorflow(case_dir, compiled):
    case = load_case(case_dir)
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
    outs = engine.Session(engine.load_graph(case.model), device="cpu", options=options).run(list(case.fetches),
                                                                                           case.feeds)
    for (name, want), actual in zip(case.fetches.items(), outs):
        assert_matches(name, actual, want, case.rtol, case.atol)


def test_floats_keep_their_bits():
    bits = [0x7FC00001, 0xFF800000, 0x80000000, 0x00000001]  # a NaN payload, -inf, -0.0, a denormal
    feature = field(2, field(1, struct.pack("<4I", *bits)))
    walked = _walk([example(("a", feature))], ["a"], [F32])
    assert walked is not None
    np.testing.assert_array_equal(walked[0][1].view(np.uint32), bits)
