"""tf.Example and SequenceExample parsing (the ParseExample*, ParseSequenceExample*, ParseSingle*
kernels, and the text decoders beside them: DecodeCSV, DecodeJSONExample, DecodeRaw), run as the
golden graphs TensorFlow wrote, with their string feeds (serialized protos, records) replaced by
mutations of themselves: the run succeeds or fails with an ExecutionError caused by the kernel's
ValueError (TensorFlow's InvalidArgument), never with another exception inside a kernel."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from engine import Session, load_graph
from engine.errors import EngineError, ExecutionError
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.mutations import mutated, varint
from tests.fuzz.seeds import EXAMPLE_CASES, example_seeds
from tests.golden import load_case


@functools.cache
def _session(case_dir: Path) -> tuple[Session, dict[str, np.ndarray], list[str]]:
    case = load_case(case_dir)
    return Session(load_graph(case.model)), case.feeds, list(case.fetches)


def run_mutated(case_dir: Path, feed: str, elements: list[bytes]) -> None:
    session, feeds, fetches = _session(case_dir)
    original = feeds[feed]
    value = np.empty(original.size, dtype=object)
    value[:] = (elements * original.size)[: original.size]
    feeds = {**feeds, feed: value.reshape(original.shape)}
    size = sum(len(e) for e in elements) * max(original.size, 1)
    outcome = call_parser(session.run, fetches, feeds, allowed=(EngineError,), memory_limit=256 * size + 16 * MiB)
    if isinstance(outcome, ExecutionError):
        # The kernels' documented error is ValueError (InvalidArgument); anything else is a bug in one.
        assert isinstance(outcome.__cause__, ValueError), repr(outcome.__cause__)


@st.composite
def mutated_feed(draw, cases: tuple[Path, ...]) -> tuple[Path, str, list[bytes]]:
    case_dir = draw(st.sampled_from(cases))
    seeds = example_seeds(case_dir)
    feed = draw(st.sampled_from(sorted(seeds)))
    elements = draw(st.lists(mutated(seeds[feed]), min_size=1, max_size=3))
    return case_dir, feed, elements


_V2 = next(p for p in EXAMPLE_CASES if p.as_posix().endswith("v2/all_kinds"))
_JSON = next(p for p in EXAMPLE_CASES if p.as_posix().endswith("decode_json_example/examples"))
_CSV = next(p for p in EXAMPLE_CASES if p.as_posix().endswith("decode_csv/numbers"))
_CSV_HUGE_HEX = example_seeds(_CSV)["records:0"][0].replace(b"0x1.8p1,", b"0x1.8p1644775,")
# An int64 feature of two packed varints, the first 11 bytes long: counting passes it, decoding must refuse it.
_LONG_VARINT = b"\x1a\x0e\x0a\x0c" + b"\xff" * 10 + b"\x01" + b"\x01"


_TWO_FLOATS = b"\x12\x0a\x0a\x08" + bytes(8)


def _example(*features: tuple[bytes, bytes]) -> bytes:
    """A serialized Example of (key, serialized Feature) entries."""
    body = b""
    for key, feature in features:
        entry = b"\x0a" + varint(len(key)) + key + b"\x12" + varint(len(feature)) + feature
        body += b"\x0a" + varint(len(entry)) + entry
    return b"\x0a" + varint(len(body)) + body


@fuzz_settings(2)
@given(mutated_feed(EXAMPLE_CASES))
@example((_V2, "serialized:0", [_example((b"d", _TWO_FLOATS), (b"v", _LONG_VARINT))]))  # 'v': var-len int64
@example((_JSON, "json:0", [b"3"]))  # JSON that is no object (atheris found it)
@example((_CSV, "records:0", [_CSV_HUGE_HEX]))  # a hex float beyond float64: absl reads inf (atheris)
@example((_JSON, "json:0", [b"[" * 100_000]))  # nested past the recursion limit
def test_mutated_examples_parse_or_raise_the_kernels_errors(case: tuple[Path, str, list[bytes]]) -> None:
    run_mutated(*case)


@fuzz_settings()
@given(st.sampled_from(EXAMPLE_CASES), st.lists(st.binary(max_size=48), min_size=1, max_size=3))
def test_random_bytes_parse_or_raise_the_kernels_errors(case_dir: Path, elements: list[bytes]) -> None:
    run_mutated(case_dir, sorted(example_seeds(case_dir))[0], elements)
