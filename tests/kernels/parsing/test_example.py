"""ParseExampleV2, ParseExample and ParseSingleExample: dense (defaults, required, variable length), sparse
and ragged features, TensorFlow's rules for duplicate keys and empty Features, and its errors word for
word (core/util/example_proto_fast_parsing.cc, core/kernels/example_parsing_ops.cc; each message was also
read off TensorFlow 2.21). tests/fixtures/ops/example_parsing/ holds TensorFlow's outputs for more inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.proto import example_pb2
from tests.kernels.checks import assert_outputs, f32, i32, i64
from tests.kernels.example_protos import EMPTY, example, floats, ints, string, strings, strs

F32, I64, STR = np.dtype(np.float32), np.dtype(np.int64), np.dtype(object)
NO_FLOATS = np.zeros([0], np.float32)


def objects(*values) -> np.ndarray:
    return strings(*values)


def parse_v2(run_kernel, serialized, dense=(), sparse=(), ragged=(), names=None) -> dict:
    """ParseExampleV2's outputs by kind. dense: (key, default, shape); sparse: (key, dtype); ragged: (key,
    dtype, splits dtype). A shape's None is the unknown first dim of a variable-length feature."""
    defaults = [np.asarray(d) for _, d, _ in dense]
    outs = run_kernel("ParseExampleV2", serialized, strings() if names is None else names,
                      strings(*[k for k, _ in sparse]), strings(*[k for k, *_ in dense]),
                      strings(*[k for k, *_ in ragged]), *defaults,
                      Tdense=tuple(d.dtype for d in defaults), num_sparse=len(sparse),
                      sparse_types=tuple(np.dtype(t) for _, t in sparse),
                      ragged_value_types=tuple(np.dtype(t) for _, t, _ in ragged),
                      ragged_split_types=tuple(np.dtype(s) for *_, s in ragged),
                      dense_shapes=tuple(tuple(s) for *_, s in dense))
    ns, nd = len(sparse), len(dense)
    return {"sparse": list(zip(outs[:ns], outs[ns:2 * ns], outs[2 * ns:3 * ns])),
            "dense": list(outs[3 * ns:3 * ns + nd]),
            "ragged": list(zip(outs[3 * ns + nd:3 * ns + nd + len(ragged)], outs[3 * ns + nd + len(ragged):]))}


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args, **kwargs)
    return str(e.value)


# --- dense features ----------------------------------------------------------------------------------


def test_dense_features_take_their_values_or_defaults(run_kernel):
    batch = strings(example(("a", floats(1, 2)), ("b", ints(7)), ("c", strs("x"))),
                    example(("c", strs("y"))),
                    example(("a", floats(3, 4)), ("z", ints(0))))
    out = parse_v2(run_kernel, batch, dense=[("a", f32([9, 9]), [2]), ("b", np.int64(-1), []),
                                             ("c", objects("none"), [1]),
                                             ("m", np.arange(6, dtype=np.int64).reshape(2, 3), [2, 3])])
    assert_outputs(out["dense"][:3], [f32([[1, 2], [9, 9], [3, 4]]), i64(7, -1, -1),
                                      np.array([[b"x"], [b"y"], [b"none"]], object)])
    assert out["dense"][3].shape == (3, 2, 3) and (out["dense"][3] == np.arange(6).reshape(2, 3)).all()


def test_required_dense_feature_present_everywhere(run_kernel):
    out = parse_v2(run_kernel, strings(example(("a", floats(1))), example(("a", floats(2)))),
                   dense=[("a", NO_FLOATS, [1])])
    assert_outputs(out["dense"], [f32([[1], [2]])])


def test_variable_length_dense_is_padded_to_the_longest(run_kernel):
    batch = strings(example(("v", floats(1, 2, 3, 4))), example(("v", EMPTY)), example(("v", floats(5, 6))),
                    example(("w", ints(1))))
    out = parse_v2(run_kernel, batch, dense=[("v", np.float32(-1), [None, 2]), ("w", np.int64(0), [None])])
    assert_outputs(out["dense"], [f32([[[1, 2], [3, 4]], [[-1, -1], [-1, -1]], [[5, 6], [-1, -1]],
                                       [[-1, -1], [-1, -1]]]), i64(0, 0, 0, 1).reshape(4, 1)])


def test_each_call_takes_its_own_defaults(run_kernel):
    """The kernel keeps the features it was asked for between calls: the same keys with other defaults (or
    other dtypes) are another request."""
    batch = strings(example(("b", ints(7))), example(("q", ints(1))))
    for default in (np.int64(-1), np.int64(5), np.int64(-1)):
        out = parse_v2(run_kernel, batch, dense=[("b", default, [])])
        assert_outputs(out["dense"], [i64(7, int(default))])
    for default in (string("x"), string("y")):
        out = parse_v2(run_kernel, strings(example(("q", ints(1)))), dense=[("b", default, [])])
        assert_outputs(out["dense"], [objects(default.item().decode())])


def test_variable_length_strings_pad_with_the_default(run_kernel):
    out = parse_v2(run_kernel, strings(example(("t", strs("a"))), example(("t", strs("b", "c")))),
                   dense=[("t", string("<pad>"), [None])])
    assert_outputs(out["dense"], [np.array([[b"a", b"<pad>"], [b"b", b"c"]], object)])


# --- sparse and ragged features -----------------------------------------------------------------------


def test_sparse_features_absent_from_some_examples(run_kernel):
    batch = strings(example(("s", ints(3, 1, 4))), example(("q", ints(1))), example(("s", ints())),
                    example(("s", ints(5, 9))))
    (indices, values, shape), = parse_v2(run_kernel, batch, sparse=[("s", I64)])["sparse"]
    assert_outputs((indices, values, shape), [np.array([[0, 0], [0, 1], [0, 2], [3, 0], [3, 1]], np.int64),
                                              i64(3, 1, 4, 5, 9), i64(4, 3)])


def test_ragged_features_with_int32_and_int64_splits(run_kernel):
    batch = strings(example(("r", strs("a", "b"))), example(("q", ints(1))), example(("r", strs("c"))))
    out = parse_v2(run_kernel, batch, ragged=[("r", STR, np.int32), ("f", F32, np.int64)])
    (values, splits), (fvalues, fsplits) = out["ragged"]
    assert_outputs((values, splits, fvalues, fsplits), [objects("a", "b", "c"), i32(0, 2, 2, 3), NO_FLOATS,
                                                        i64(0, 0, 0, 0)])


def test_empty_batch(run_kernel):
    out = parse_v2(run_kernel, strings(), dense=[("d", f32([1, 2]), [2]), ("v", string(""), [None, 3])],
                   sparse=[("s", I64)], ragged=[("r", F32, np.int32)])
    assert_outputs(out["dense"], [np.zeros((0, 2), np.float32), np.zeros((0, 0, 3), object)])
    assert_outputs(out["sparse"][0], [np.zeros((0, 2), np.int64), i64(), i64(0, 0)])
    assert_outputs(out["ragged"][0], [NO_FLOATS, i32(0)])


def test_scalar_serialized_has_no_batch_dim(run_kernel):
    record = string(example(("d", floats(1, 2)), ("v", floats(1, 2, 3, 4)), ("s", ints(5, 6)), ("r", strs("x"))))
    out = parse_v2(run_kernel, record, dense=[("d", NO_FLOATS, [2]), ("v", np.float32(0), [None, 2]),
                                              ("m", f32([7]), [1])],
                   sparse=[("s", I64)], ragged=[("r", STR, np.int64)])
    assert_outputs(out["dense"], [f32([1, 2]), f32([[1, 2], [3, 4]]), f32([7])])
    assert_outputs(out["sparse"][0], [np.array([[0], [1]], np.int64), i64(5, 6), i64(2)])
    assert_outputs(out["ragged"][0], [objects("x"), i64()])


# --- duplicate keys and empty Features ----------------------------------------------------------------


def test_the_last_entry_of_a_key_wins(run_kernel):
    record = example(("d", floats(1)), ("s", ints(1, 2)), ("d", floats(2)), ("s", ints(3)))
    out = parse_v2(run_kernel, strings(record), dense=[("d", NO_FLOATS, [1])], sparse=[("s", I64)])
    assert_outputs([out["dense"][0], out["sparse"][0][1]], [f32([[2]]), i64(3)])


def test_an_empty_last_entry_is_skipped_by_dense_but_taken_by_sparse(run_kernel):
    record = example(("d", floats(1)), ("s", ints(1, 2)), ("d", EMPTY), ("s", EMPTY))
    out = parse_v2(run_kernel, strings(record), dense=[("d", f32([9]), [1])], sparse=[("s", I64)])
    assert_outputs([out["dense"][0], out["sparse"][0][1]], [f32([[1]]), i64()])


def test_a_scalar_input_skips_empty_entries_of_every_kind(run_kernel):
    record = example(("s", ints(1, 2)), ("s", EMPTY))
    out = parse_v2(run_kernel, string(record), sparse=[("s", I64)])
    assert_outputs([out["sparse"][0][1]], [i64(1, 2)])


def test_an_empty_feature_counts_as_missing(run_kernel):
    out = parse_v2(run_kernel, strings(example(("d", EMPTY))), dense=[("d", f32([7]), [1])])
    assert_outputs(out["dense"], [f32([[7]])])


def test_concatenated_examples_merge(run_kernel):
    record = example(("a", floats(1)), ("b", ints(1))) + example(("a", floats(2)))
    out = parse_v2(run_kernel, strings(record), dense=[("a", NO_FLOATS, [1]), ("b", i64(0), [1])])
    assert_outputs(out["dense"], [f32([[2]]), i64(1).reshape(1, 1)])


def test_a_key_asked_for_twice_finds_nothing(run_kernel):
    # TensorFlow's feature index gives up on a duplicated key and stays empty.
    out = parse_v2(run_kernel, strings(example(("a", floats(1)), ("b", floats(2)))),
                   dense=[("a", f32([0]), [1]), ("b", f32([5]), [1])], sparse=[("a", F32)])
    assert_outputs([*out["dense"], out["sparse"][0][1]], [f32([[0]]), f32([[5]]), NO_FLOATS])


# --- wire forms ------------------------------------------------------------------------------------


def test_unpacked_lists_and_extreme_varints(run_kernel):
    batch = strings(example(("f", floats(1.5, -2.5, packed=False)), ("i", ints(-1, 2**63 - 1, -2**63, packed=False))),
                    example(("f", floats(0.5)), ("i", ints(-5, 127, 128, 16384, -2**63))), b"")
    out = parse_v2(run_kernel, batch, sparse=[("f", F32), ("i", I64)])
    assert_outputs([out["sparse"][0][1], out["sparse"][1][1]],
                   [f32([1.5, -2.5, 0.5]), i64(-1, 2**63 - 1, -2**63, -5, 127, 128, 16384, -2**63)])


def test_a_broken_feature_nobody_asks_for_is_ignored(run_kernel):
    record = example(("broken", b"\x1a\x05\x08"), ("f", floats(3)))
    out = parse_v2(run_kernel, strings(record), dense=[("f", NO_FLOATS, [1])])
    assert_outputs(out["dense"], [f32([[3]])])


def test_matches_protobuf_on_random_examples(run_kernel):
    rng = np.random.default_rng(3)
    messages = []
    for _ in range(50):
        message = example_pb2.Example()
        features = message.features.feature
        features["i"].int64_list.value.extend(rng.integers(-2**63, 2**63 - 1, rng.integers(0, 6)).tolist())
        features["f"].float_list.value.extend(rng.standard_normal(rng.integers(0, 6)).astype(np.float32).tolist())
        features["b"].bytes_list.value.extend(bytes(rng.integers(0, 256, rng.integers(0, 9), np.uint8))
                                              for _ in range(rng.integers(0, 4)))
        messages.append(message)
    out = parse_v2(run_kernel, strings(*[m.SerializeToString() for m in messages]),
                   ragged=[("i", I64, np.int64), ("f", F32, np.int32), ("b", STR, np.int64)])
    for (values, splits), (key, kind) in zip(out["ragged"], [("i", "int64_list"), ("f", "float_list"),
                                                              ("b", "bytes_list")]):
        expected = [list(getattr(m.features.feature[key], kind).value) for m in messages]
        assert splits.tolist() == np.cumsum([0] + [len(e) for e in expected]).tolist()
        assert values.tolist() == [v for e in expected for v in e]


# --- errors -------------------------------------------------------------------------------------------

BATCH_ERRORS = [
    pytest.param(example(("b", floats(1))), dict(dense=[("a", NO_FLOATS, [1])]),
                 "Name: <unknown>, Feature: a (data type: float) is required but could not be found.", id="required"),
    pytest.param(example(("a", EMPTY)), dict(dense=[("a", NO_FLOATS, [1])]),
                 "Name: <unknown>, Feature: a (data type: float) is required but could not be found.",
                 id="required-empty-feature"),
    pytest.param(example(("a", floats(1, 2))), dict(dense=[("a", NO_FLOATS, [1])]),
                 "Name: <unknown>, Key: a, Index: 0.  Number of float values != expected.  Values size: 2 but output "
                 "shape: [1]", id="too-many-floats"),
    pytest.param(example(("a", ints())), dict(dense=[("a", i64(5), [1])]),
                 "Name: <unknown>, Key: a, Index: 0.  Number of int64 values != expected.  Values size: 0 but output "
                 "shape: [1]", id="empty-int64-list"),
    pytest.param(example(("a", strs("x"))), dict(dense=[("a", objects(), [2])]),
                 "Name: <unknown>, Key: a, Index: 0.  Number of bytes values != expected.  Values size: 1 but output "
                 "shape: [2]", id="too-few-bytes"),
    pytest.param(example(("a", strs("x", "y"))), dict(dense=[("a", objects(), [1])]),
                 "Name: <unknown>, Key: a, Index: 0.  Can't parse serialized Example.", id="too-many-bytes"),
    pytest.param(example(("a", ints(1))), dict(dense=[("a", NO_FLOATS, [1])]),
                 "Name: <unknown>, Key: a, Index: 0.  Data types don't match. Data type: int64 but expected type: "
                 "float", id="dense-type"),
    pytest.param(example(("a", ints(1))), dict(sparse=[("a", F32)]),
                 "Name: <unknown>, Key: a, Index: 0.  Data types don't match. Expected type: float, Actual type: "
                 "int64", id="sparse-type"),
    pytest.param(example(("a", floats())), dict(ragged=[("a", STR, np.int32)]),
                 "Name: <unknown>, Key: a, Index: 0.  Data types don't match. Expected type: string, Actual type: "
                 "float", id="ragged-type-of-an-empty-list"),
    pytest.param(example(("a", floats(1, 2, 3))), dict(dense=[("a", np.float32(0), [None, 2])]),
                 "Name: <unknown>, Key: a, Index: 0.  Number of float values is not a multiple of stride length. Saw 3 "
                 "values but output shape is: [?,2]", id="stride"),
    pytest.param(b"\x0a\x05abc", dict(dense=[("a", f32([0]), [1])]),
                 "Could not parse example input, value: '\n\x05abc'", id="bad-bytes"),
    pytest.param(example(("b", b"\x1a\x05\x08")), dict(sparse=[("b", I64)]),
                 "Name: <unknown>, Key: b, Index: 0.  Can't parse serialized Example.", id="broken-feature"),
    pytest.param(example(("b", b"\x22\x00")), dict(sparse=[("b", I64)]), "Unsupported datatype.",
                 id="unknown-list"),
]


@pytest.mark.parametrize("record, features, message", BATCH_ERRORS)
def test_batch_errors(run_kernel, record, features, message):
    assert error_of(parse_v2, run_kernel, strings(record), **features) == message


def test_errors_name_the_first_failing_example(run_kernel):
    batch = strings(example(("a", floats(1))), example(("a", floats(1, 2))), example(("b", floats(1))))
    message = error_of(parse_v2, run_kernel, batch, dense=[("a", NO_FLOATS, [1])], names=strings("x", "y", "z"))
    assert message == "Name: y, Key: a, Index: 1.  Number of float values != expected.  Values size: 2 but output " \
                      "shape: [1]"


def test_stride_errors_count_the_values_of_the_minibatch(run_kernel):
    # Ten examples make eight minibatches of TensorFlow's; the last holds examples 8 and 9.
    batch = strings(*[example(("a", floats(1, 2, 3, 4)))] * 9, example(("a", floats(1, 2, 3))))
    message = error_of(parse_v2, run_kernel, batch, dense=[("a", np.float32(0), [None, 2])])
    assert message == "Name: <unknown>, Key: a, Index: 9.  Number of float values is not a multiple of stride " \
                      "length. Saw 7 values but output shape is: [?,2]"


SCALAR_ERRORS = [
    pytest.param(example(("b", floats(1))), dict(dense=[("a", NO_FLOATS, [1])]),
                 "Feature: a (data type: float) is required but could not be found.", id="required"),
    pytest.param(example(("a", floats(1, 2))), dict(dense=[("a", NO_FLOATS, [1])]),
                 "Key: a.  Can't parse serialized Example: Some float_list slice was not parsed.", id="count"),
    pytest.param(example(("a", ints(1, 2))), dict(dense=[("a", i64(), [1])]),
                 "Key: a.  Can't parse serialized Example: Some int64_list slice was not parsed.", id="count-int64"),
    pytest.param(example(("a", strs("x", "y"))), dict(dense=[("a", objects(), [1])]),
                 "Key: a.  Can't parse serialized Example: Parsing bytes_list failed.", id="too-many-bytes"),
    pytest.param(example(("a", strs("x"))), dict(dense=[("a", objects(), [2])]),
                 "Key: a.  Can't parse serialized Example: Some bytes_list slice was not parsed.", id="too-few-bytes"),
    pytest.param(example(("a", ints(1))), dict(dense=[("a", NO_FLOATS, [1])]),
                 "Key: a.  Data types don't match. Data type: int64 but expected type: float", id="dense-type"),
    pytest.param(example(("a", ints(1))), dict(sparse=[("a", F32)]),
                 "Key: a.  Data types don't match. Expected type: float, Actual type: int64", id="sparse-type"),
    pytest.param(example(("a", floats(1, 2, 3))), dict(dense=[("a", np.float32(0), [None, 2])]),
                 "Error while parsing feature with key a: number of elements should be divisible by 2, found 3 "
                 "instead", id="stride"),
    pytest.param(example(("b", b"\x1a\x05\x08")), dict(sparse=[("b", I64)]),
                 "Key: b.  Can't parse serialized Example: Parsing int64_list failed.", id="broken-feature"),
    pytest.param(b"\x0a\x05abc", dict(dense=[("a", f32([0]), [1])]),
                 "Could not parse example input, value: '\n\x05abc'", id="bad-bytes"),
]


@pytest.mark.parametrize("record, features, message", SCALAR_ERRORS)
def test_scalar_errors(run_kernel, record, features, message):
    assert error_of(parse_v2, run_kernel, string(record), **features) == message


INPUT_ERRORS = [
    pytest.param(np.array([[example()]], object), {}, dict(dense=[("a", f32([1]), [1])]),
                 "Expected serialized to be a scalar or vector, got shape: [1,1]", id="serialized-rank"),
    pytest.param(strings(example()), dict(names=strings("a", "b")), dict(dense=[("a", f32([1]), [1])]),
                 "Expected names have the same shape as serialized: name.shape=[2], serialized.shape=[1]",
                 id="names-shape"),
    pytest.param(strings(example()), {}, dict(dense=[("a", f32([1, 2]), [2, 1])]),
                 "def_value[0].shape() == [2] is not compatible with dense_shapes_[0] == [2,1]", id="default-shape"),
    pytest.param(strings(example()), {}, dict(dense=[("a", f32([1, 2]), [None])]),
                 "dense_shape[0] is a variable length shape: [?], therefore def_value[0] must contain a single element "
                 "(the padding element).  But its shape is: [2]", id="padding-element"),
    pytest.param(strings(example()), {}, dict(dense=[("a", np.float32(0), [2, None])]),
                 "dense_shapes[0] has unknown rank or unknown inner dimensions: [2,?]", id="unknown-inner-dim"),
]


@pytest.mark.parametrize("serialized, extra, features, message", INPUT_ERRORS)
def test_input_errors(run_kernel, serialized, extra, features, message):
    assert error_of(parse_v2, run_kernel, serialized, **features, **extra) == message


# --- ParseExample (v1) and ParseSingleExample ------------------------------------------------------------


def test_parse_example_v1_takes_keys_as_scalar_inputs(run_kernel):
    batch = strings(example(("a", floats(1, 2)), ("b", ints(1, 2))), example(("b", ints(3))))
    outs = run_kernel("ParseExample", batch, strings(), string("b"), string("a"), f32([0, 0.5]), Nsparse=1, Ndense=1,
                      sparse_types=(I64,), Tdense=(F32,), dense_shapes=((2,),))
    assert_outputs(outs, [np.array([[0, 0], [0, 1], [1, 0]], np.int64), i64(1, 2, 3), i64(2, 2),
                          f32([[1, 2], [0, 0.5]])])


def test_parse_example_v1_wants_a_vector(run_kernel):
    message = error_of(run_kernel, "ParseExample", string(example()), strings(), Nsparse=0, Ndense=0,
                       sparse_types=(), Tdense=(), dense_shapes=())
    assert message == "Expected serialized to be a vector, got shape: []"


def test_parse_single_example_takes_keys_as_attrs(run_kernel):
    record = string(example(("a", floats(1, 2)), ("s", strs("p", "q"))))
    outs = run_kernel("ParseSingleExample", record, f32([0, 0]), i64(3), num_sparse=2, sparse_keys=("s", "t"),
                      dense_keys=("a", "b"), sparse_types=(STR, F32), Tdense=(F32, I64), dense_shapes=((2,), (1,)))
    assert_outputs(outs, [np.array([[0], [1]], np.int64), np.zeros((0, 1), np.int64), objects("p", "q"), NO_FLOATS,
                          i64(2), i64(0), f32([1, 2]), i64(3)])


def test_parse_single_example_wants_a_scalar(run_kernel):
    message = error_of(run_kernel, "ParseSingleExample", strings(example()), num_sparse=0, sparse_keys=(),
                       dense_keys=(), sparse_types=(), Tdense=(), dense_shapes=())
    assert message == "Expected serialized to be a scalar, got shape: [1]"
