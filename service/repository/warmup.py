"""Warm-up files: requests a version replays once it has loaded, before it serves, as TensorFlow
Serving replays `<version>/assets.extra/tf_serving_warmup_requests`.

The file is a TFRecord of `PredictionLog`s (what TensorFlow Serving's request logs hold). The request of
each `predict_log`, `classify_log`, `regress_log` and `multi_inference_log` record is run on the version,
`iterations` times, in file order; its response is ignored. Any other kind of record fails the load
("Unsupported log_type for warmup"), a record with none is skipped, and a file of more than 1000 records
fails it too. A request that fails fails the load, naming the file and the record. A version without the
file loads as it did. Warm-up requests run on the version's session directly: no worker pool, no batcher,
no request metrics; what they write (a counter variable) stays, as in TensorFlow Serving.

    >>> replay_warmup_file(servable, Path("models/m/1"), WarmupOptions(iterations=2))
    4
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from engine.errors import EngineError
from service.errors import ServiceError
from service.inference.examples import run_classify, run_multi_inference, run_regress
from service.inference.predict import run_predict
from service.protocols.proto import prediction_log_pb2
from service.repository.tfrecord import TFRecordError, read_records

if TYPE_CHECKING:
    from service.repository.servable import Servable

__all__ = ["WARMUP_FILE", "MAX_WARMUP_RECORDS", "WarmupOptions", "WarmupError", "warmup_file", "replay_warmup_file"]

log = logging.getLogger("tensorgate.warmup")

# TensorFlow Serving's names: kSavedModelAssetsExtraDirectory / WarmupConsts::kRequestsFileName.
WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
MAX_WARMUP_RECORDS = 1000  # WarmupConsts::kMaxNumRecords
# The case numbers of PredictionLog's log_type oneof, which TensorFlow Serving's error prints.
_LOG_TYPE_NUMBERS = {f.name: f.number for f in prediction_log_pb2.PredictionLog.DESCRIPTOR.oneofs_by_name["log_type"].fields}


@dataclass(frozen=True)
class WarmupOptions:
    """How warm-up files are replayed: each record `iterations` times (TensorFlow Serving's
    `--num_request_iterations_for_warmup`), with the signature method-name check on or off
    (`--enable_signature_method_name_check`)."""

    iterations: int = 1
    check_method_name: bool = False
    enabled: bool = True  # False: warm-up files are not replayed (`--enable_model_warmup=false`)


class WarmupError(Exception):
    """A warm-up file that fails the load; the message names the file and the record."""


def warmup_file(version_dir: Path) -> Path:
    """Where a version's warm-up file is, whether or not it is there."""
    return version_dir / WARMUP_FILE


def replay_warmup_file(servable: Servable, version_dir: Path, options: WarmupOptions | None = None) -> int:
    """Replay the version's warm-up file, if it has one; returns how many records were read. Raises
    WarmupError naming the file and the record (1-based) that failed, or a damaged file."""
    options = options or WarmupOptions()
    path = warmup_file(version_dir)
    if not options.enabled:
        return 0
    if not path.is_file():
        log.info("No warmup data file found at %s", path)
        return 0
    log.info("Starting to read warmup data for model at %s (%d iteration(s) per record)", path, options.iterations)
    start = time.perf_counter()
    count = 0
    try:
        for count, record in enumerate(read_records(path), start=1):
            prediction_log = _parse(record, path, count)
            for _ in range(options.iterations):
                _replay(servable, prediction_log, options, path, count)
            if count > MAX_WARMUP_RECORDS:
                raise WarmupError(f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}")
    except TFRecordError as e:
        raise WarmupError(f"warm-up file {path}: {e}. Please verify your warmup data is in TFRecord format.") from None
    except OSError as e:
        raise WarmupError(f"warm-up file {path} cannot be read: {e}") from None
    log.info("Finished reading warmup data for model at %s. Number of warmup records read: %d. Elapsed time: %.3f s.",
             path, count, time.perf_counter() - start)
    return count


def _parse(record: bytes, path: Path, number: int) -> prediction_log_pb2.PredictionLog:
    try:
        return prediction_log_pb2.PredictionLog.FromString(record)
    except DecodeError:
        raise WarmupError(f"warm-up file {path}: record {number}: Failed to parse warmup record "
                          f"({len(record)} bytes) as a PredictionLog") from None


def _replay(servable: Servable, prediction_log: prediction_log_pb2.PredictionLog, options: WarmupOptions, path: Path,
            number: int) -> None:
    kind = prediction_log.WhichOneof("log_type")
    if kind is None:
        return  # TensorFlow Serving skips a record without a request
    run: Callable = servable.run
    try:
        if kind == "predict_log":
            run_predict(servable, prediction_log.predict_log.request, run)
        elif kind == "classify_log":
            run_classify(servable, prediction_log.classify_log.request, run, check_method_name=options.check_method_name)
        elif kind == "regress_log":
            run_regress(servable, prediction_log.regress_log.request, run, check_method_name=options.check_method_name)
        elif kind == "multi_inference_log":
            run_multi_inference(servable, prediction_log.multi_inference_log.request, run,
                                check_method_name=options.check_method_name)
        else:
            raise WarmupError(f"warm-up file {path}: record {number} ({kind}): Unsupported log_type for warmup: "
                              f"{_LOG_TYPE_NUMBERS[kind]}")
    except (ServiceError, EngineError) as e:
        message = e.message if isinstance(e, ServiceError) else str(e)
        raise WarmupError(f"warm-up file {path}: record {number} ({kind}) failed: {message}") from None
