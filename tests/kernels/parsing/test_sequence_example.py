"""ParseSequenceExampleV2, ParseSequenceExample and ParseSingleSequenceExample: context features and
feature lists (dense, sparse, ragged), the `*_missing_assumed_empty` rules, and TensorFlow's errors word
for word (core/util/example_proto_fast_parsing.cc for the first two, the older kernel of
core/kernels/example_parsing_ops.cc for the last; each message was also read off TensorFlow 2.21).
tests/fixtures/ops/example_parsing/sequence_*/ and single_sequence/ hold TensorFlow's outputs for more.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64
from tests.kernels.example_protos import EMPTY, floats, ints, sequence_example, string, strings, strs

F32, I64, STR = np.dtype(np.float32), np.dtype(np.int64), np.dtype(object)
NO_FLOATS = np.zeros([0], np.float32)


def parse_seq(run_kernel, serialized, cd=(), cs=(), cr=(), fd=(), fs=(), fr=(), names=None) -> list:
    """ParseSequenceExampleV2's outputs in order. cd: (key, default, shape); fd: (key, dtype, shape, may be
    missing); cs/fs: (key, dtype); cr/fr: (key, dtype, splits dtype)."""
    defaults = [np.asarray(d) for _, d, _ in cd]
    return list(run_kernel(
        "ParseSequenceExampleV2", serialized, strings() if names is None else names,
        strings(*[k for k, _ in cs]), strings(*[k for k, *_ in cd]), strings(*[k for k, *_ in cr]),
        strings(*[k for k, _ in fs]), strings(*[k for k, *_ in fd]), strings(*[k for k, *_ in fr]),
        np.array([m for *_, m in fd], bool).reshape(-1), *defaults,
        Ncontext_sparse=len(cs), Tcontext_dense=tuple(d.dtype for d in defaults),
        context_sparse_types=tuple(t for _, t in cs), context_ragged_value_types=tuple(t for _, t, _ in cr),
        context_ragged_split_types=tuple(np.dtype(s) for *_, s in cr), context_dense_shapes=tuple(s for *_, s in cd),
        Nfeature_list_sparse=len(fs), Nfeature_list_dense=len(fd), feature_list_dense_types=tuple(t for _, t, *_ in fd),
        feature_list_sparse_types=tuple(t for _, t in fs), feature_list_ragged_value_types=tuple(t for _, t, _ in fr),
        feature_list_ragged_split_types=tuple(np.dtype(s) for *_, s in fr),
        feature_list_dense_shapes=tuple(s for _, _, s, _ in fd)))


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args, **kwargs)
    return str(e.value)


A = sequence_example(context=[("c", floats(1, 2)), ("s", strs("x")), ("r", ints(1, 2, 3))],
                     lists=[("f", [floats(1, 2), floats(3, 4), floats(5, 6)]), ("g", [ints(1), ints(), ints(2, 3)]),
                            ("h", [strs("a"), EMPTY, strs("b", "c")])])
B = sequence_example(context=[("c", floats(3, 4))], lists=[("f", [floats(7, 8)]), ("g", [ints(4)]), ("h", [])])
C = sequence_example(context=[("c", floats(5, 6))], lists=[("g", [EMPTY, ints(9)])])
FULL = dict(cd=[("c", NO_FLOATS, (2,))], cs=[("s", STR)], cr=[("r", I64, np.int32)], fd=[("f", F32, (2,), True)],
            fs=[("g", I64)], fr=[("h", STR, np.int64)])


def test_context_and_lists_of_different_lengths(run_kernel):
    outs = parse_seq(run_kernel, strings(A, B, C), **FULL)
    assert_outputs(outs, [
        np.array([[0, 0]], np.int64), strings("x"), i64(3, 1),  # context sparse
        f32([[1, 2], [3, 4], [5, 6]]),  # context dense
        i64(1, 2, 3), i32(0, 3, 3, 3),  # context ragged
        np.array([[0, 0, 0], [0, 2, 0], [0, 2, 1], [1, 0, 0], [2, 1, 0]], np.int64), i64(1, 2, 3, 4, 9),
        i64(3, 3, 2),  # feature-list sparse: [example, step, position]
        f32([[[1, 2], [3, 4], [5, 6]], [[7, 8], [0, 0], [0, 0]], [[0, 0], [0, 0], [0, 0]]]), i64(3, 1, 0),
        strings("a", "b", "c"), i64(0, 3, 3, 3), i64(0, 1, 1, 3),  # ragged values, outer (steps), inner splits
    ])


def test_a_scalar_input_has_no_batch_dim(run_kernel):
    outs = parse_seq(run_kernel, string(A), **FULL)
    assert_outputs(outs, [
        np.array([[0]], np.int64), strings("x"), i64(1), f32([1, 2]), i64(1, 2, 3), np.zeros((), np.int32),
        np.array([[0, 0], [2, 0], [2, 1]], np.int64), i64(1, 2, 3), i64(3, 2),
        f32([[1, 2], [3, 4], [5, 6]]), np.array(3, np.int64),
        strings("a", "b", "c"), np.zeros((), np.int64), i64(0, 1, 1, 3),
    ])


def test_empty_batch(run_kernel):
    outs = parse_seq(run_kernel, strings(), **{**FULL, "cd": [("c", f32([1, 2]), (2,))]})
    assert [o.shape for o in outs] == [(0, 2), (0,), (2,), (0, 2), (0,), (1,), (0, 3), (0,), (3,), (0, 0, 2), (0,),
                                       (0,), (1,), (1,)]


def test_context_default_and_string_lists_padded_with_empty_strings(run_kernel):
    batch = strings(sequence_example(lists=[("w", [strs("a"), strs("b")])]),
                    sequence_example(context=[("k", ints(5))], lists=[("w", [strs("c")])]))
    outs = parse_seq(run_kernel, batch, cd=[("k", i64(-1), (1,))], fd=[("w", STR, (1,), False)])
    assert_outputs(outs, [i64(-1, 5).reshape(2, 1), np.array([[[b"a"], [b"b"]], [[b"c"], [b""]]], object), i64(2, 1)])


def test_the_last_entry_of_a_key_wins(run_kernel):
    record = sequence_example(context=[("c", floats(1, 2)), ("c", floats(3, 4))],
                              lists=[("l", [ints(1)]), ("l", [ints(2), ints(3)])])
    outs = parse_seq(run_kernel, strings(record), cd=[("c", NO_FLOATS, (2,))], fd=[("l", I64, (1,), False)])
    assert_outputs(outs, [f32([[3, 4]]), i64(2, 3).reshape(1, 2, 1), i64(2)])


ERRORS = [
    pytest.param([A, C, sequence_example()], dict(cd=[("c", NO_FLOATS, (2,))]),
                 "Feature: c (data type: float) is required but could not be found.", id="context-required"),
    pytest.param([sequence_example(context=[("c", floats(1))])], dict(cd=[("c", f32([9, 9]), (2,))]),
                 "Unexpected number of elements in example <unknown>", id="context-too-few"),
    pytest.param([sequence_example(context=[("c", EMPTY)])], dict(cd=[("c", f32([9, 9]), (2,))]),
                 "Unexpected number of elements in example <unknown>", id="context-empty-feature-is-not-missing"),
    pytest.param([sequence_example(context=[("c", floats(1, 2, 3))])], dict(cd=[("c", f32([9, 9]), (2,))]),
                 "Inconsistent max number of elements for feature c: expected 2, but found 3", id="context-too-many"),
    pytest.param([], dict(cd=[("c", NO_FLOATS, (2,))]),
                 "Inconsistent max number of elements for feature c: expected 2, but found 0",
                 id="required-context-of-an-empty-batch"),
    pytest.param([sequence_example(context=[("c", ints(1))])], dict(cs=[("c", F32)]),
                 "Name: <unknown>, Context feature: c.  Data types don't match. Expected type: float",
                 id="context-type"),
    pytest.param([A, C], dict(fd=[("f", F32, (2,), False)]),
                 "Name: <unknown>, Feature list 'f' is required but could not be found.  Did you mean to include it "
                 "in feature_list_dense_missing_assumed_empty or feature_list_dense_defaults?", id="list-required"),
    pytest.param([sequence_example(lists=[("f", [floats(1), ints(1)])])], dict(fs=[("f", F32)]),
                 "Name: <unknown>, Feature list: f, Index: 1.  Data types don't match. Expected type: float",
                 id="step-type"),
    pytest.param([sequence_example(lists=[("f", [floats(1), floats(1, 2)])])], dict(fd=[("f", F32, (1,), False)]),
                 "Name: <unknown>, Key: f, Index: 1.  Number of values != expected.  values size: 2 but output shape: "
                 "[1]", id="step-count"),
    pytest.param([sequence_example(lists=[("f", [floats(1), EMPTY])])], dict(fd=[("f", F32, (1,), False)]),
                 "Name: <unknown>, Key: f, Index: 1.  Number of values != expected.  values size: 0 but output shape: "
                 "[1]", id="empty-step"),
    pytest.param([sequence_example(lists=[("f", [ints(1, 2, 3)])])], dict(fd=[("f", I64, (2,), False)]),
                 "Feature list 'f' has an unexpected number of values.  Total values size: 3 is not consistent with "
                 "output shape: [?,2]", id="list-total"),
    pytest.param([b"\x0a\x05abc"], dict(fs=[("f", I64)]), "Invalid protocol message input, example id: <unknown>",
                 id="bad-bytes"),
    pytest.param([A], dict(cs=[("c", F32)], cr=[("c", F32, np.int32)]),
                 "Context feature c cannot be both ragged and sparse", id="ragged-and-sparse"),
    pytest.param([A], dict(cd=[("c", NO_FLOATS, (2,))], cr=[("c", F32, np.int32)]),
                 "Context feature c cannot be both dense and sparse", id="dense-and-ragged"),
    pytest.param([A], dict(cd=[("c", f32([1, 2, 3]), (2,))]),
                 "default_value[0].shape() == [3] != context_dense_shapes[0] == [2]", id="default-shape"),
]


@pytest.mark.parametrize("records, features, message", ERRORS)
def test_errors(run_kernel, records, features, message):
    assert error_of(parse_seq, run_kernel, strings(*records), **features) == message


def test_errors_use_debug_names(run_kernel):
    message = error_of(parse_seq, run_kernel, strings(A, C), fd=[("f", F32, (2,), False)], names=strings("a", "c"))
    assert message.startswith("Name: c, Feature list 'f' is required")


# --- ParseSequenceExample (v1) -------------------------------------------------------------------------


def test_parse_sequence_example_v1_takes_keys_as_attrs(run_kernel):
    outs = run_kernel("ParseSequenceExample", strings(A, B, C), strings(), np.int64(-1),
                      feature_list_dense_missing_assumed_empty=("f",), context_sparse_keys=("s",),
                      context_dense_keys=("age",), feature_list_sparse_keys=("g",), feature_list_dense_keys=("f",),
                      Ncontext_sparse=1, Ncontext_dense=1, Nfeature_list_sparse=1, Nfeature_list_dense=1,
                      context_sparse_types=(STR,), Tcontext_dense=(I64,), feature_list_dense_types=(F32,),
                      context_dense_shapes=((),), feature_list_sparse_types=(I64,), feature_list_dense_shapes=((2,),))
    assert_outputs(outs[3:4] + outs[-2:], [i64(-1, -1, -1), f32([[[1, 2], [3, 4], [5, 6]], [[7, 8], [0, 0], [0, 0]],
                                                                  [[0, 0], [0, 0], [0, 0]]]), i64(3, 1, 0)])


# --- ParseSingleSequenceExample --------------------------------------------------------------------------


def parse_single(run_kernel, record, cd=(), cs=(), fd=(), fs=(), missing=(), name=b"") -> list:
    defaults = [np.asarray(d) for _, d, _ in cd]
    return list(run_kernel(
        "ParseSingleSequenceExample", record, strings(*missing), *[string(k) for k, _ in cs],
        *[string(k) for k, *_ in cd], *[string(k) for k, _ in fs], *[string(k) for k, *_ in fd], *defaults,
        string(name), Ncontext_sparse=len(cs), Ncontext_dense=len(cd), Nfeature_list_sparse=len(fs),
        Nfeature_list_dense=len(fd), context_sparse_types=tuple(t for _, t in cs),
        Tcontext_dense=tuple(d.dtype for d in defaults), feature_list_dense_types=tuple(t for _, t, _ in fd),
        context_dense_shapes=tuple(s for *_, s in cd), feature_list_sparse_types=tuple(t for _, t in fs),
        feature_list_dense_shapes=tuple(s for *_, s in fd)))


def test_single_sequence_example(run_kernel):
    outs = parse_single(run_kernel, string(A), cd=[("c", NO_FLOATS, (2,)), ("age", np.int64(7), ())], cs=[("s", STR)],
                        fd=[("f", F32, (2,))], fs=[("g", I64), ("h", STR)])
    assert_outputs(outs, [
        np.array([[0]], np.int64), strings("x"), i64(1), f32([1, 2]), np.array(7, np.int64),
        np.array([[0, 0], [2, 0], [2, 1]], np.int64), np.array([[0, 0], [2, 0], [2, 1]], np.int64),
        i64(1, 2, 3), strings("a", "b", "c"), i64(3, 2), i64(3, 2), f32([[1, 2], [3, 4], [5, 6]]),
    ])


def test_single_sequence_example_missing_features(run_kernel):
    outs = parse_single(run_kernel, string(C), cd=[("age", i64(5, 6), (2,))], cs=[("s", F32)],
                        fd=[("f", F32, (2,))], fs=[("none", I64)], missing=["f"])
    assert_outputs(outs, [np.zeros((0, 1), np.int64), NO_FLOATS, i64(0), i64(5, 6), np.zeros((0, 2), np.int64), i64(),
                          i64(0, 0), np.zeros((0, 2), np.float32)])


SINGLE_ERRORS = [
    pytest.param(C, dict(cd=[("k", NO_FLOATS, (2,))], name=b"nm"),
                 "Name: nm, Context feature 'k' is required but could not be found.", id="context-required"),
    pytest.param(sequence_example(context=[("c", floats(1))]), dict(cd=[("c", NO_FLOATS, (2,))]),
                 "Name: , Key: c, Index: 0.  Number of float values != expected.  values size: 1 but output shape: "
                 "[2]", id="context-count"),
    pytest.param(sequence_example(context=[("c", strs("a"))]), dict(cd=[("c", strings(), (2,))]),
                 "Name: , Key c, Index: 0.  Number of bytes values != expected.  Values size: 1 but output shape: [2]",
                 id="context-count-bytes"),
    pytest.param(C, dict(fd=[("f", F32, (2,))]),
                 "Name: , Feature list 'f' is required but could not be found.  Did you mean to include it in "
                 "feature_list_dense_missing_assumed_empty or feature_list_dense_defaults?", id="list-required"),
    pytest.param(sequence_example(lists=[("f", [floats(1), floats(1, 2)])]), dict(fd=[("f", F32, (1,))]),
                 "Name: , Key: f, Index: 1.  Number of float values != expected.  values size: 2 but output shape: "
                 "[1]", id="step-count"),
    pytest.param(b"\x0a\x05abc", dict(fs=[("f", F32)]), "Could not parse example input, value: '\n\x05abc'",
                 id="bad-bytes"),
]


@pytest.mark.parametrize("record, features, message", SINGLE_ERRORS)
def test_single_sequence_errors(run_kernel, record, features, message):
    assert error_of(parse_single, run_kernel, string(record), **features) == message


@pytest.mark.parametrize("record, features, start", [
    pytest.param(sequence_example(context=[("c", ints(1))]), dict(cd=[("c", NO_FLOATS, (1,))]),
                 "Name: , Context feature: c.  Data types don't match. Expected type: float  Feature is: ",
                 id="context"),
    pytest.param(sequence_example(context=[("c", EMPTY)]), dict(cd=[("c", f32([1]), (1,))]),
                 "Name: , Context feature: c.  Data types don't match. Expected type: float  Feature is: ",
                 id="context-empty-feature"),
    pytest.param(sequence_example(lists=[("f", [floats(1), EMPTY])]), dict(fd=[("f", F32, (1,))]),
                 "Name: , Feature list: f, Index: 1.  Data types don't match. Expected type: float  Feature is: ",
                 id="dense-step"),
    pytest.param(sequence_example(lists=[("f", [floats(1), ints(1)])]), dict(fs=[("f", F32)]),
                 "Name: , Feature List: f, Index: 1.  Data types don't match. Expected type: float  Feature is: ",
                 id="sparse-step"),
])
def test_single_sequence_type_errors(run_kernel, record, features, start):
    # TensorFlow ends these with the Feature's DebugString, whose layout protobuf randomizes.
    assert error_of(parse_single, run_kernel, string(record), **features).startswith(start)
