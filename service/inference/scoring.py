"""Offline scoring: TFRecord files of serialized tf.Examples run through a model's signature in batches,
the outputs written as JSON lines or as a TFRecord of tf.Examples (`tensorgate score`).

The model is loaded as the server loads a version (GraphDef or SavedModel, init ops, warm-up); the
signature must take one string input, the serialized Examples (as classify, regress and Estimator-style
predict signatures do). Records stream through: one batch in memory at a time, outputs written a batch
at a time, in input order, so files larger than memory score in bounded memory. A damaged record stops
the run with an error naming the file and byte offset; the batches before it are scored and written.

    >>> stats = score(load_for_scoring("export/1"), ["data/*.tfrecord.gz"], "scores.jsonl", batch_size=256)
    >>> stats.records, stats.seconds
"""

from __future__ import annotations

import base64
import glob
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

from engine import SessionOptions
from service.errors import NotFound
from service.repository import version_source
from service.repository.config import ModelConfig
from service.repository.servable import LoadError, Servable, load_servable
from service.repository.signatures import Signature
from service.repository.tfrecord import TFRecordError, TFRecordWriter, read_records

__all__ = ["ScoringError", "ScoreStats", "expand_inputs", "load_for_scoring", "score"]

Format = Literal["jsonl", "tfrecord"]


class ScoringError(Exception):
    """Scoring cannot start or go on: no such model or input, a signature that does not take serialized
    Examples, a damaged record (the message names the file and offset)."""


@dataclass(frozen=True)
class ScoreStats:
    records: int
    files: int
    seconds: float


def expand_inputs(patterns: Sequence[str]) -> list[Path]:
    """Input files in the order given, each glob's matches sorted; ScoringError for a pattern that
    matches nothing."""
    paths: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not all(Path(m).is_file() for m in matches):
            raise ScoringError(f"input '{pattern}' matches no file")
        paths.extend(Path(m) for m in matches)
    return paths


def load_for_scoring(model_path: str | Path, options: SessionOptions | None = None) -> Servable:
    """A version directory (holding a GraphDef or a SavedModel) or a GraphDef file, loaded as the server
    loads a version."""
    path = Path(model_path)
    if not path.exists():
        raise ScoringError(f"model '{model_path}' does not exist")
    source: Path = path
    if path.is_dir():
        # What a version directory serves, decided as the repository decides it (a GraphDef beside a
        # SavedModel wins).
        found = version_source(path)
        if found is None:
            raise ScoringError(f"'{model_path}' holds neither a SavedModel nor a model.pb")
        source = found.source
    try:
        return load_servable(path.name, 1, source, ModelConfig(), options or SessionOptions())
    except LoadError as e:
        raise ScoringError(f"cannot load '{model_path}': {e}") from None


def _examples_input(servable: Servable, name: str | None) -> tuple[Signature, str]:
    try:
        signature = servable.signature(name)
    except NotFound as e:
        raise ScoringError(str(e)) from None
    strings = [spec for spec in signature.inputs if spec.dtype == np.dtype(object)]
    if len(signature.inputs) != 1 or not strings:
        shown = ", ".join(f"{s.alias} ({'string' if s.dtype == np.dtype(object) else s.dtype})" for s in signature.inputs)
        raise ScoringError(f"signature '{signature.name}' takes {shown or 'no inputs'}; scoring feeds serialized "
                           "tf.Examples to a signature with a single string input")
    return signature, strings[0].tensor


# --- output records ---------------------------------------------------------------------------------------


def _json_text(item: Any) -> Any:
    """A string tensor's element as JSON holds it: UTF-8 text, else {"b64": ...}."""
    if isinstance(item, bytes):
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(item).decode("ascii")}
    return item


def _json_object(row: Any) -> Any:
    """One row of a string output (an element, or an array of them) as JSON holds it."""
    if isinstance(row, np.ndarray):
        return np.vectorize(_json_text, otypes=[object])(row).tolist() if row.ndim else _json_text(row.item())
    return _json_text(row)


_dumps = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(..., ensure_ascii=False)


def _json_rows(value: np.ndarray) -> list[str]:
    """Each row of a batch output, value[i], as json.dumps(value[i].tolist(), ensure_ascii=False) writes it;
    a column of finite floats or of integers as a batch (float.__repr__ and int.__repr__ are json's)."""
    if value.dtype == object:
        return [_dumps(_json_object(row)) for row in value]
    rows = value.tolist()
    kind = value.dtype.kind
    if value.ndim == 1 and kind == "f" and np.isfinite(value).all():  # json writes NaN, Infinity
        return list(map(float.__repr__, rows))
    if value.ndim == 1 and kind in "iu":
        return list(map(int.__repr__, rows))
    return list(map(_dumps, rows))


def _jsonl_writer(sink: IO[str], aliases: Sequence[str]) -> Callable[[list[np.ndarray], int], None]:
    """Writes a batch's outputs as JSON lines, one object per record: the lines json.dumps({alias: row, ...},
    ensure_ascii=False) writes, built a column at a time."""
    heads = [_dumps(alias) + ": " for alias in aliases]

    def write(values: list[np.ndarray], records: int) -> None:
        columns = [[head + row for row in _json_rows(value)] for head, value in zip(heads, values)]
        if len(columns) == 1:
            sink.write("".join(["{" + part + "}\n" for part in columns[0]]))
        elif columns:
            sink.write("".join(["{" + ", ".join(parts) + "}\n" for parts in zip(*columns)]))
        else:
            sink.write("{}\n" * records)

    return write


def _example(outputs: dict[str, np.ndarray]) -> bytes:
    from engine.proto import example_pb2

    example = example_pb2.Example()
    for alias, value in outputs.items():
        feature = example.features.feature[alias]
        flat = np.ravel(value)
        if value.dtype == object:
            feature.bytes_list.value.extend(v if isinstance(v, bytes) else str(v).encode() for v in flat)
        elif value.dtype.kind in "iub":
            feature.int64_list.value.extend(int(v) for v in flat)
        else:
            feature.float_list.value.extend(float(v) for v in flat)
    return example.SerializeToString()


def _tfrecord_writer(sink: TFRecordWriter, aliases: Sequence[str]) -> Callable[[list[np.ndarray], int], None]:
    """Writes a batch's outputs as tf.Examples, one per record."""

    def write(values: list[np.ndarray], records: int) -> None:
        for i in range(records):
            sink.write(_example({alias: value[i, ...] for alias, value in zip(aliases, values)}))

    return write


# --- input records ----------------------------------------------------------------------------------------


def _batches(paths: Sequence[Path], batch_size: int) -> Iterator[tuple[np.ndarray, int]]:
    """The records of `paths` in batches (string vectors), each with its size in the files (a record's
    framing is 16 bytes)."""
    records = chain.from_iterable(read_records(path) for path in paths)
    while batch := list(islice(records, batch_size)):
        vector = np.empty(len(batch), dtype=object)
        vector[:] = batch
        yield vector, sum(map(len, batch)) + 16 * len(batch)


class _Progress:
    """records, records/s and (for uncompressed inputs, whose size tells how much is left) an ETA."""

    def __init__(self, stream: IO[str] | None, total_bytes: int | None):
        self.stream, self.total_bytes = stream, total_bytes
        self.start = time.perf_counter()
        self.last = 0.0

    def update(self, records: int, done_bytes: int, final: bool = False) -> None:
        now = time.perf_counter()
        if self.stream is None or (not final and now - self.last < 0.5):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        line = f"\r{records} records  {records / elapsed:,.0f} records/s"
        if self.total_bytes and done_bytes and not final:
            left = elapsed * (self.total_bytes - done_bytes) / done_bytes
            line += f"  {100 * done_bytes / self.total_bytes:.0f}%  ETA {left:.0f} s"
        self.stream.write(line + ("\n" if final else ""))
        self.stream.flush()


def score(servable: Servable, inputs: Sequence[str | Path], output: str | Path, *, signature: str | None = None,
          batch_size: int = 256, output_format: Format = "jsonl", progress: IO[str] | None = None) -> ScoreStats:
    """Score every record of `inputs` (files, or glob patterns) with `servable`'s signature and write
    one output record per input record, in order, to `output`; progress goes to `progress` (stderr by
    default)."""
    if batch_size <= 0:
        raise ScoringError(f"--batch-size must be positive, got {batch_size}")
    paths = expand_inputs([str(p) for p in inputs])
    sig, feed = _examples_input(servable, signature)
    fetches = [spec.tensor for spec in sig.outputs]
    aliases = [spec.alias for spec in sig.outputs]
    plain = all(not _gzipped(p) for p in paths)
    meter = _Progress(progress or sys.stderr, sum(p.stat().st_size for p in paths) if plain else None)
    records = done_bytes = 0
    start = time.perf_counter()
    out_path = Path(output)
    with open(out_path, "w", encoding="utf-8") if output_format == "jsonl" else TFRecordWriter(out_path) as sink:
        write = _jsonl_writer(sink, aliases) if output_format == "jsonl" else _tfrecord_writer(sink, aliases)
        try:
            for batch, size in _batches(paths, batch_size):
                values = servable.run({feed: batch}, fetches)
                for alias, value in zip(aliases, values):
                    if np.ndim(value) == 0 or value.shape[0] != len(batch):
                        raise ScoringError(f"output '{alias}' of signature '{sig.name}' has shape {list(np.shape(value))} "
                                           f"for a batch of {len(batch)} records: it does not follow the batch")
                write(values, len(batch))
                records += len(batch)
                done_bytes += size
                meter.update(records, done_bytes)
        except TFRecordError as e:
            raise ScoringError(f"{e} (the {records} records before it were scored and written)") from None
    seconds = time.perf_counter() - start
    meter.update(records, done_bytes, final=True)
    return ScoreStats(records, len(paths), seconds)


def _gzipped(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"
