"""Seed inputs for the fuzz tests and the atheris corpus: real files TensorFlow wrote (tests/fixtures).

Each function returns the seeds of one parser, small ones first, read once.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from tests.golden import FIXTURES, case_dirs, load_case

__all__ = [
    "EXAMPLE_CASES",
    "SEQUENCE_EXAMPLE_CASES",
    "bundle_dirs",
    "config_texts",
    "example_seeds",
    "graph_defs",
    "graph_texts",
    "saved_model_dirs",
    "tfrecord_files",
]

# Seeds larger than this make each example slow without reaching new code.
_MAX_SEED_BYTES = 64 * 1024
# The golden cases whose feeds are serialized protos or text records (fuzzed through a Session).
EXAMPLE_CASES = tuple(p for p in case_dirs("ops/example_parsing"))
SEQUENCE_EXAMPLE_CASES = tuple(p for p in EXAMPLE_CASES if "sequence" in p.parent.name)
# SavedModels that load quickly yet cover variables (TF1 and TF2), partitions, assets and tables.
_SAVED_MODELS = ("half_plus_two_serving", "tf1_saver", "tf1_partitioned", "counter", "lookup_table")


def _small(paths) -> list[Path]:
    return sorted((p for p in paths if p.stat().st_size <= _MAX_SEED_BYTES), key=lambda p: (p.stat().st_size, p))


@functools.cache
def graph_defs() -> tuple[bytes, ...]:
    """Binary GraphDefs (model.pb) of the golden cases, small ones."""
    return tuple(p.read_bytes() for p in _small(FIXTURES.rglob("model.pb")))


@functools.cache
def graph_texts() -> tuple[bytes, ...]:
    """Text GraphDefs (model.pbtxt)."""
    return tuple(p.read_bytes() for p in _small(FIXTURES.rglob("model.pbtxt")))


def saved_model_dirs() -> tuple[Path, ...]:
    """SavedModel directories (saved_model.pb, variables/, assets/)."""
    return tuple(FIXTURES / "saved_models" / name / "model" for name in _SAVED_MODELS)


def bundle_dirs() -> tuple[Path, ...]:
    """Tensor bundles (`ckpt.index` and its data shards), numeric, string, partitioned and sharded."""
    return tuple(sorted(p.parent for p in (FIXTURES / "bundles").rglob("ckpt.index")))


@functools.cache
def example_seeds(case_dir: Path) -> dict[str, tuple[bytes, ...]]:
    """The string feeds of one golden case: tensor name -> its elements (serialized Examples,
    SequenceExamples, CSV records, JSON text, raw bytes)."""
    case = load_case(case_dir)
    return {name: tuple(bytes(v) for v in value.reshape(-1)) or (b"",)
            for name, value in case.feeds.items() if value.dtype == np.dtype(object)}


def tfrecord_files() -> tuple[Path, ...]:
    """TFRecord files: TensorFlow Serving warm-up files."""
    return tuple(sorted(p for p in (FIXTURES / "saved_models").rglob("tf_serving_warmup_requests") if p.is_file()))


@functools.cache
def config_texts() -> dict[str, bytes]:
    """TensorFlow Serving's text-format config files, by file name."""
    return {p.name: p.read_bytes() for p in sorted((FIXTURES / "serving_config").glob("*")) if p.suffix != ".md"}
