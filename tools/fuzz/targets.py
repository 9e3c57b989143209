"""The atheris fuzz targets: one function per protobuf-level reader, taking the fuzzer's bytes.

Each target calls a reader and lets through only the errors it is documented to raise; anything else
propagates, and atheris reports it as a crash (writing the input under .fuzz/crashes/<target>/).
The same properties, with hypothesis and deterministic, are tests/fuzz/.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine import Session, load_graph, load_saved_model
from engine.errors import EngineError, ExecutionError, GraphError, SavedModelError
from engine.saved_model.sstable import TableError, read_table
from engine.saved_model.tensor_bundle import read_bundle
from service.errors import BadRequest
from service.protocols.codecs.v2 import decode_infer_request
from service.repository.tfrecord import TFRecordError, read_records
from tests.fuzz.seeds import EXAMPLE_CASES, bundle_dirs, example_seeds, saved_model_dirs
from tests.golden import load_case

__all__ = ["TARGETS"]

# Files the targets write the input to: tools/fuzz/fuzz.py gives each target a directory under .fuzz/scratch/,
# emptied when it starts (libFuzzer ends the process itself, so nothing here could clean up after it).
_SCRATCH = Path(os.environ.get("TENSORGATE_FUZZ_SCRATCH") or tempfile.mkdtemp(prefix="tensorgate-fuzz-"))


def graph_def(data: bytes) -> None:
    try:
        load_graph(data)
    except GraphError:
        pass


def _scratch_copy(source: Path, name: str) -> Path:
    target = _SCRATCH / name
    if not target.exists():
        shutil.copytree(source, target)
    return target


def saved_model(data: bytes) -> None:
    """The input as saved_model.pb beside a real SavedModel's variables (TF1 half_plus_two)."""
    model = _scratch_copy(saved_model_dirs()[0], "saved_model")
    (model / "saved_model.pb").write_bytes(data)
    try:
        load_saved_model(model)
    except GraphError:
        pass


def tensor_bundle(data: bytes) -> None:
    """The input as the index of a real bundle (every dtype), then every tensor read."""
    try:
        list(read_table(data))
    except TableError:
        pass
    bundle = _scratch_copy(bundle_dirs()[0], "bundle")
    (bundle / "ckpt.index").write_bytes(data)
    try:
        read_bundle(bundle / "ckpt")
    except SavedModelError:
        pass


_SESSIONS: dict[Path, tuple[Session, dict, list, str]] = {}


def _example_session(case_dir: Path) -> tuple[Session, dict, list, str]:
    if case_dir not in _SESSIONS:
        case = load_case(case_dir)
        feed = sorted(example_seeds(case_dir))[0]
        _SESSIONS[case_dir] = (Session(load_graph(case.model)), case.feeds, list(case.fetches), feed)
    return _SESSIONS[case_dir]


def example(data: bytes) -> None:
    """The input, after its first byte (which picks a golden case: ParseExample*, ParseSequenceExample*,
    DecodeCSV, ...), as every element of the case's first string feed."""
    if not data:
        return
    session, feeds, fetches, feed = _example_session(EXAMPLE_CASES[data[0] % len(EXAMPLE_CASES)])
    value = np.full(feeds[feed].shape, data[1:], dtype=object)
    try:
        session.run(fetches, {**feeds, feed: value})
    except ExecutionError as e:
        if not isinstance(e.__cause__, ValueError):  # the kernels' InvalidArgument
            raise
    except EngineError:
        pass


def tfrecord(data: bytes) -> None:
    path = _SCRATCH / "tf_serving_warmup_requests"
    path.write_bytes(data)
    try:
        for _ in read_records(path):
            pass
    except TFRecordError:
        pass


def v2_binary(data: bytes) -> None:
    """The input's first two bytes are Inference-Header-Content-Length (0xffff: absent), the rest the body."""
    if len(data) < 2:
        return
    (length,) = struct.unpack_from("<H", data)
    try:
        decode_infer_request(data[2:], None if length == 0xFFFF else length)
    except BadRequest:
        pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "graph_def": graph_def,
    "saved_model": saved_model,
    "tensor_bundle": tensor_bundle,
    "example": example,
    "tfrecord": tfrecord,
    "v2_binary": v2_binary,
}
