"""TF Text's SentencePiece ops beyond the golden fixtures (tests/fixtures/ops/text/sentencepiece/ compare ids,
pieces, offsets, n-best and detokenized text with TensorFlow's): the model resource and its sharing, sampling
(random in TensorFlow too, so its properties), and the errors bad models, handles, ids and splits give, with
TensorFlow 2.21's messages where TensorFlow gives one rather than crashing."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

import engine
import kernels
from engine.runtime.resources import ResourceManager
from kernels.text.sentencepiece import SentencepieceResource, load_model

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ops" / "text" / "sentencepiece"
UNIGRAM = (FIXTURES / "tiny_unigram.model").read_bytes()


def _graph_node(case: str, op: str):
    graph = engine.load_graph(FIXTURES / case / "model.pb")
    return graph, next(n for n in graph.nodes if n.op == op)


def _fast_model(case: str, op: str) -> np.ndarray:
    """The flatbuffer (a uint8 constant) that a fixture's fast op reads."""
    graph, node = _graph_node(case, op)
    return graph.node(node.inputs[0].node).attrs["value"]


BPE = _graph_node("bpe/vocab_size", "SentencepieceOp")[1].attrs["model"]
FAST_ENCODER = _fast_model("fast/unigram_tokenize", "TFText>FastSentencepieceTokenize")
FAST_DECODER = _fast_model("fast/unigram_detokenize", "TFText>FastSentencepieceDetokenize")


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def run(op: str, *inputs, resources: ResourceManager | None = None, node_name: str = "node", **attrs) -> tuple:
    resources = ResourceManager() if resources is None else resources
    bound = kernels.lookup(op, "cpu").bind(np, attrs, {"resources": resources,
                                                        "node_name": node_name})
    return bound(*inputs)


def handle(model: bytes = UNIGRAM, **attrs) -> SentencepieceResource:
    (h,) = run("SentencepieceOp", model=model, **attrs)
    return h


NO = np.bool_(False)
YES = np.bool_(True)


def tokenize(h, texts, nbest_size=0, alpha=1.0, bos=NO, eos=NO, reverse=NO, **attrs) -> list[list]:
    values, splits = run("SentencepieceTokenizeOp", h, texts, np.asarray(nbest_size, np.int32),
                         np.asarray(alpha, np.float32), bos, eos, reverse, **attrs)
    return [values[a:b].tolist() for a, b in itertools.pairwise(splits)]


def detokenize(h, rows, bos=NO, eos=NO, reverse=NO) -> list[bytes]:
    values = np.array([i for r in rows for i in r], np.int32)
    splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    return run("SentencepieceDetokenizeOp", h, values, splits, bos, eos, reverse)[0].tolist()


def train(**options) -> bytes:
    out = io.BytesIO()
    corpus = ["the quick brown fox jumps over the lazy dog", "hello world, hello tensorgate", "a b c d e f g"]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus * 4), model_writer=out, vocab_size=40,
                                   num_threads=1, minloglevel=2, normalization_rule_name="identity",
                                   hard_vocab_limit=False, **options)
    return out.getvalue()


# --- the resource ----------------------------------------------------------------------------------------------


def test_a_node_yields_one_resource_and_a_shared_name_is_shared_between_nodes():
    resources = ResourceManager()
    first = run("SentencepieceOp", model=UNIGRAM, resources=resources, node_name="a")[0]
    assert run("SentencepieceOp", model=UNIGRAM, resources=resources, node_name="a")[0] is first
    assert run("SentencepieceOp", model=UNIGRAM, resources=resources, node_name="b")[0] is not first
    shared = [run("SentencepieceOp", model=UNIGRAM, shared_name="sp", container="c", resources=resources,
                  node_name=n)[0] for n in ("x", "y")]
    assert shared[0] is shared[1] and shared[0].name == "c/sp"
    assert "120 pieces" in shared[0].describe()


def test_resources_holding_the_same_model_bytes_share_one_parsed_model():
    assert handle().model is handle().model is load_model(UNIGRAM)
    assert handle(BPE).model is not handle().model


@pytest.mark.parametrize("model, message", [(b"", "Model argument must be specified."),
                                            (b"not a model", "cannot be loaded"),
                                            (UNIGRAM[:100], "cannot be loaded")])
def test_a_missing_or_malformed_model_is_an_error(model, message):
    with pytest.raises(ValueError, match=message):
        handle(model)


@pytest.mark.parametrize("op, inputs", [("SentencepieceVocabSizeOp", ()),
                                        ("SentencepieceIdToStringOp", (np.array([1], np.int32),)),
                                        ("SentencepieceStringToIdOp", (strings("a"),))])
def test_ops_need_a_sentencepiece_handle(op, inputs):
    with pytest.raises(TypeError, match="needs a SentencepieceOp handle"):
        run(op, object(), *inputs)


# --- shapes ------------------------------------------------------------------------------------------------


def test_inputs_of_any_shape_are_flattened_into_rows_and_vocabulary_ops_keep_shapes():
    h = handle()
    matrix = strings("The quick", "", "fox", "Über", "東京", "a b").reshape(2, 3)
    assert tokenize(h, matrix) == tokenize(h, matrix.reshape(-1))
    ids = np.array([[[0, 1], [2, 119]]], np.int32)
    (pieces,) = run("SentencepieceIdToStringOp", h, ids)
    assert pieces.shape == (1, 2, 2) and pieces.tolist() == [[[b"<unk>", b"<s>"], [b"</s>", pieces[0, 1, 1]]]]
    (back,) = run("SentencepieceStringToIdOp", h, pieces)
    assert back.dtype == np.int32 and back.tolist() == ids.tolist()
    (size,) = run("SentencepieceVocabSizeOp", h)
    assert size.dtype == np.int32 and size.shape == () and size == 120


def test_flags_must_be_scalars():
    with pytest.raises(ValueError, match=r"add_bos must be a scalar, got shape \[2\]"):
        tokenize(handle(), strings("a"), bos=np.array([True, False]))


def test_int32_and_string_outputs():
    values, splits, starts, limits = run("SentencepieceTokenizeWithOffsetsOp", handle(), strings("fox", ""),
                                         np.int32(0), np.float32(1), NO, NO, NO, out_type=np.dtype(object),
                                         Tsplits=np.dtype(np.int32))
    assert values.dtype == object and splits.dtype == np.int32 and starts.dtype == limits.dtype == np.int64
    assert b"".join(values.tolist()).replace("\u2581".encode(), b" ") == b" fox" and splits[-1] == len(values)


# --- sampling --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, nbest_size, alpha", [(UNIGRAM, -1, 0.1), (UNIGRAM, 4, 0.5), (BPE, -1, 0.3),
                                                     (BPE, 0, 0.3)])
def test_samples_are_segmentations_that_detokenize_back(model, nbest_size, alpha):
    h = handle(model)
    texts = strings("The quick brown fox jumps", "Über den Wolken", "", "She sells sea shells")
    best = tokenize(h, texts)
    draws = [tokenize(h, texts, nbest_size=nbest_size, alpha=alpha) for _ in range(40)]
    for rows in draws:
        assert all(0 <= i < 120 for row in rows for i in row)
        assert detokenize(h, rows) == detokenize(h, best)
    if nbest_size != 0:  # 0 is the best segmentation, not a sample
        assert len({str(rows[0]) for rows in draws}) > 1, "40 draws gave one segmentation"
    else:
        assert all(rows == best for rows in draws)


def test_a_sample_of_the_n_best_is_one_of_them():
    h = handle()
    text = strings("quick brown")
    nbest = tokenize(h, text, nbest_size=3, return_nbest=True)
    seen = {str(tokenize(h, text, nbest_size=3, alpha=0.2)[0]) for _ in range(60)}
    assert seen <= {str(r) for r in nbest} and len(seen) > 1


def test_nbest_size_and_alpha_per_string():
    h = handle()
    texts = strings("The quick brown fox", "she sells", "")
    assert tokenize(h, texts, nbest_size=[0, 1, 0], alpha=[0.5, 0.5, 0.5]) == tokenize(h, texts)
    rows = tokenize(h, texts, nbest_size=[-1, 0, 1], alpha=[0.1, 0.5, 0.5])
    assert rows[1:] == tokenize(h, texts)[1:] and detokenize(h, rows[:1]) == [b"The quick brown fox"]
    with pytest.raises(ValueError, match=r"nbest_size must be a scalar or a vector of one value per input string "
                                          r"\(3\), got shape \[2\]"):
        tokenize(h, texts, nbest_size=[0, -1])
    with pytest.raises(ValueError, match=r"alpha must be .* got shape \[1\]"):
        tokenize(h, texts, nbest_size=-1, alpha=[0.5])


def test_bad_sampling_parameters():
    h = handle()
    with pytest.raises(ValueError, match="nbest_size must be nbest_size <= 512"):
        tokenize(h, strings("hello"), nbest_size=600, alpha=0.5)
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        tokenize(h, strings("hello"), nbest_size=-1, alpha=np.nan)


# --- n-best ----------------------------------------------------------------------------------------------------


def test_return_nbest_gives_up_to_n_rows_per_string_best_first():
    h = handle()
    texts = strings("hello world", "", "a", "Über")
    rows = tokenize(h, texts, nbest_size=3, return_nbest=True)
    singles = [tokenize(h, texts[i:i + 1], nbest_size=3, return_nbest=True) for i in range(len(texts))]
    assert rows == [r for single in singles for r in single]
    assert singles[1] == [[]] and all(1 <= len(single) <= 3 for single in singles)
    assert [single[0] for single in singles] == tokenize(h, texts)
    assert all(len({str(r) for r in single}) == len(single) for single in singles)
    # More than the library's 512 is served when the string has fewer segmentations than that.
    assert tokenize(h, strings("hello"), nbest_size=600, return_nbest=True) == \
        tokenize(h, strings("hello"), nbest_size=512, return_nbest=True)


@pytest.mark.parametrize("nbest_size, message", [
    (np.array([3], np.int32), r"When return_nbest is true nbest_size must be a scalar; got \[1\] instead"),
    (0, "When return_nbest is true nbest_size must be >= 1; got 0"),
    (-1, "When return_nbest is true nbest_size must be >= 1; got -1"),
])
def test_return_nbest_needs_a_positive_scalar(nbest_size, message):
    with pytest.raises(ValueError, match=message):
        tokenize(handle(), strings("hello"), nbest_size=nbest_size, return_nbest=True)


def test_return_nbest_needs_a_unigram_model():
    with pytest.raises(ValueError, match="NBestEncode is not available"):
        tokenize(handle(BPE), strings("hello"), nbest_size=2, return_nbest=True)


# --- bos / eos ---------------------------------------------------------------------------------------------


def test_bos_and_eos_need_the_pieces_in_the_vocabulary():
    h = handle(train(bos_id=-1, eos_id=-1, pad_id=-1))
    assert tokenize(h, strings("hello")) and detokenize(h, [[1, 2]])
    with pytest.raises(ValueError, match="id for `<s>` is not defined."):
        tokenize(h, strings("hello"), bos=YES)
    with pytest.raises(ValueError, match="id for `</s>` is not defined."):
        detokenize(h, [[1]], eos=YES)


def test_reverse_reverses_after_bos_and_eos_are_added():
    h = handle()
    (plain,) = tokenize(h, strings("quick fox"))
    (both,) = tokenize(h, strings("quick fox"), bos=YES, eos=YES, reverse=YES)
    assert both == [2, *plain[::-1], 1]


# --- detokenize and the vocabulary -------------------------------------------------------------------------


def test_ids_outside_the_vocabulary():
    h = handle()
    for bad in (120, -1):
        with pytest.raises(IndexError, match=f"Invalid id: {bad}"):
            detokenize(h, [[5, bad]])
        # NOTE: TensorFlow reads past the vocabulary here and crashes.
        with pytest.raises(IndexError, match=rf"id {bad} is not in the vocabulary \[0, 120\)"):
            run("SentencepieceIdToStringOp", h, np.array([3, bad], np.int32))


def test_detokenize_splits():
    h = handle()
    values = np.array([32, 16, 51, 15], np.int32)
    decode = lambda splits: run("SentencepieceDetokenizeOp", h, values, np.array(splits, np.int64), NO, NO, NO)[0]
    # Splits index the values: a first split past 0 skips values.
    assert decode([2, 4]).tolist() == detokenize(h, [values[2:].tolist()])
    assert decode([0]).shape == (0,)
    with pytest.raises(ValueError, match="input_splits must have at least 1 element."):
        decode([])
    with pytest.raises(IndexError, match="Splits and values do not match; split 5 but values size is 4"):
        decode([5, 6])
    with pytest.raises(ValueError, match=r"non-decreasing .* row 0 is \[3, 1\)"):
        decode([3, 1])
    with pytest.raises(ValueError, match=r"row 1 is \[2, 9\)"):
        decode([0, 2, 9])
    # NOTE: with no values TF Text decodes nothing: every row is "", whatever the splits.
    (empty,) = run("SentencepieceDetokenizeOp", h, np.zeros(0, np.int32), np.array([0, 3, 9]), NO, NO, NO)
    assert empty.tolist() == [b"", b""]


def test_string_to_id_of_unknown_strings_is_the_unknown_id():
    (ids,) = run("SentencepieceStringToIdOp", handle(), strings("", "zzzz", "<unk>", "<s>", b"\xff"))
    assert ids.tolist() == [0, 0, 0, 1, 0]


# --- the fast ops --------------------------------------------------------------------------------------------


def fast_tokenize(model, texts, bos=NO, eos=NO, reverse=NO, **attrs):
    return run("TFText>FastSentencepieceTokenize", model, texts, np.int32(0), np.float32(0), bos, eos, reverse,
               **attrs)


def test_fast_tokenize_reads_the_model_buffer_whatever_array_holds_it():
    texts = strings("The quick brown fox", "", "東京 ☃")
    values, splits = fast_tokenize(FAST_ENCODER, texts)
    assert values.dtype == splits.dtype == np.int32 and splits[-1] == len(values)
    again = fast_tokenize(FAST_ENCODER.copy(), texts)
    assert values.tolist() == again[0].tolist() and splits.tolist() == again[1].tolist()


def test_fast_tokenize_errors():
    with pytest.raises(ValueError, match="not a valid EncoderConfig flatbuffer"):
        fast_tokenize(np.frombuffer(b"\xff" * 40, np.uint8), strings("a"))
    with pytest.raises(ValueError, match="must be a flatbuffer"):
        fast_tokenize(np.zeros(2, np.uint8), strings("a"))
    with pytest.raises(TypeError, match="uint8"):
        fast_tokenize(FAST_ENCODER.astype(np.int32), strings("a"))
    # NOTE: TF Text's kernel writes int32 outputs whatever the attrs say, and aborts on anything else.
    with pytest.raises(TypeError, match="int32 ids and int32 splits"):
        fast_tokenize(FAST_ENCODER, strings("a"), Tsplits=np.dtype(np.int64))


def test_fast_detokenize_errors():
    detok = lambda values, splits: run("TFText>FastSentencepieceDetokenize", FAST_DECODER, np.array(values, np.int32),
                                       np.array(splits, np.int64))[0]
    assert detok([5, 6, 7], [2, 3, 5]).tolist() == detok([5, 6, 7], [0, 1, 3]).tolist()  # only differences count
    for bad in (120, -1):
        with pytest.raises(IndexError, match="Sentencepiece conversion failed"):
            detok([5, bad], [0, 2])
    with pytest.raises(ValueError, match="input_splits must be monotonically non-decreasing and within bounds."):
        detok([5, 6], [0, 3])
    with pytest.raises(ValueError, match="input_splits must have at least 1 element."):
        detok([5], [])
