"""Predict requests as TensorFlow Serving's `PredictRequest` message carries them (warm-up files, gRPC):
TensorProtos by input alias in, an output filter, tensors by alias out.

`predict_inputs` checks a request as TensorFlow Serving's `predict_util.cc` does (the signature exists,
the inputs are the signature's, the filter names its outputs once each) and decodes its tensors;
`run_predict` runs one directly, without the worker pool, the batcher or metrics (warm-up).

    >>> signature, inputs, outputs = predict_inputs(servable, request)
    >>> values = run_predict(servable, request, servable.run)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from engine.compile.plan import format_shape
from engine.graph import dtypes
from engine.graph.tensors import to_array
from kernels.limits import AllocationTooLarge
from service.errors import BadRequest, PayloadTooLarge
from service.protocols.proto import predict_pb2
from service.repository.signatures import (
    DEFAULT_SIGNATURE,
    OutputValue,
    Signature,
    TensorSpec,
    composite_value,
    fetched_tensors,
)

if TYPE_CHECKING:
    from service.inference.examples import Run
    from service.repository.servable import Servable

__all__ = ["predict_inputs", "run_predict"]


def predict_inputs(servable: Servable, request: predict_pb2.PredictRequest
                   ) -> tuple[Signature, dict[str, np.ndarray], list[str] | None]:
    """The signature a PredictRequest names, its inputs as arrays by alias, and the outputs it asks for
    (None: all). BadRequest with TensorFlow Serving's text for a request that does not fit."""
    name = request.model_spec.signature_name or DEFAULT_SIGNATURE
    signature = servable.signatures.get(name)
    if signature is None:
        raise BadRequest(f'Serving signature key "{name}" not found.')
    sent, declared = set(request.inputs), {s.alias for s in signature.inputs}
    if sent != declared:
        # TensorFlow Serving's VerifyRequestInputsSize (a signature without defaults needs every input).
        join = ",".join
        raise BadRequest(
            f"input size does not match signature: {len(sent)}!={len(declared)} len({{{join(sorted(sent))}}}) != "
            f"len({{{join(sorted(declared))}}}). Sent extra: {{{join(sorted(sent - declared))}}}. "
            f"Missing but required: {{{join(sorted(declared - sent))}}}.")
    inputs = {}
    # A TensorProto's shape may claim far more elements than it holds values (zeros, or the last one
    # repeated): the request's memory budget bounds what decoding it may allocate.
    max_bytes = servable.session.options.plan.max_request_memory_bytes
    for alias, proto in request.inputs.items():
        try:
            inputs[alias] = to_array(proto, max_bytes=max_bytes)
        except AllocationTooLarge as e:
            raise PayloadTooLarge(f"input '{alias}': {e} (TENSORGATE_MAX_REQUEST_MEMORY_BYTES)") from None
        except ValueError as e:
            raise BadRequest(f"input '{alias}': {e}") from None
    outputs = list(request.output_filter) or None
    aliases = [s.alias for s in signature.outputs]
    for i, alias in enumerate(outputs or ()):
        if alias not in aliases:
            raise BadRequest(f"output tensor alias not found in signature: {alias} Outputs expected to be in the set "
                             f"{{{','.join(sorted(aliases))}}}.")
        if alias in outputs[:i]:
            raise BadRequest(f"duplicate output tensor alias: {alias}")
    return signature, inputs, outputs


def run_predict(servable: Servable, request: predict_pb2.PredictRequest, run: Run) -> dict[str, OutputValue]:
    """Run a PredictRequest directly with `run` (Servable.run); the outputs by alias."""
    signature, inputs, outputs = predict_inputs(servable, request)
    by_alias = {s.alias: s for s in signature.inputs}
    feeds = {}
    for alias, array in inputs.items():
        spec = by_alias[alias]
        _check(spec, array, servable.checks_feed_shapes)
        feeds[spec.tensor] = array
    specs = [s for s in signature.outputs if outputs is None or s.alias in outputs]
    if outputs is not None:
        specs.sort(key=lambda s: outputs.index(s.alias))
    values = run(feeds, fetched_tensors(specs))
    return dict(_grouped(specs, values))


def _check(spec: TensorSpec, array: np.ndarray, shapes: bool) -> None:
    if spec.dtype is not None and array.dtype != spec.dtype:
        raise BadRequest(f"input '{spec.alias}' expects dtype {dtypes.tf_name_of_numpy(spec.dtype)}, got "
                         f"{dtypes.tf_name_of_numpy(array.dtype)}")
    if shapes and spec.shape is not None and (array.ndim != len(spec.shape) or
                                   any(d is not None and d != s for d, s in zip(spec.shape, array.shape))):
        raise BadRequest(f"input '{spec.alias}' expects shape {format_shape(spec.shape)}, got {format_shape(array.shape)}")


def _grouped(specs: Sequence[TensorSpec], values: Sequence[np.ndarray]) -> Mapping[str, OutputValue]:
    grouped, start = {}, 0
    for spec in specs:
        arrays = values[start : start + len(spec.tensors)]
        start += len(spec.tensors)
        grouped[spec.alias] = arrays[0] if spec.composite is None else composite_value(spec.composite, arrays)
    return grouped
