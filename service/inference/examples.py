"""Classify, regress and multi-inference: TensorFlow Serving's example-based APIs, whatever protocol
they came in by (REST now, gRPC and warm-up files alike).

A request carries tf.Examples (an `Input`: a list of examples, or a list sharing a context example).
They are fed as one DT_STRING vector of serialized examples, each the context's bytes followed by the
example's own (so that a feature in both is the example's), to the signature's single input, `inputs`.
The outputs are read as TensorFlow Serving's `classifier.cc` and `regressor.cc` read them: `classes`
(DT_STRING [batch, k]) and/or `scores` (DT_FLOAT [batch, k]) for classify, `outputs` (DT_FLOAT [batch] or
[batch, 1]) for regress; any signature of that shape serves, a predict signature included, unless the
method-name check is on. Errors carry TensorFlow Serving's texts.

    >>> task = example_task(servable, "", CLASSIFY_METHOD)
    >>> examples = serialized_examples(request.input)
    >>> values = dict(zip(task.output_aliases, servable.run({task.input.tensor: examples}, task.fetches)))
    >>> classification(task, len(examples), values).to_proto()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from google.protobuf import json_format, text_format

from engine.graph import dtypes
from engine.graph.tensors import shape_proto
from engine.proto import meta_graph_pb2, types_pb2
from service.errors import BadRequest
from service.inference.batching import full_queue_unavailable
from service.inference.response_limit import ANY
from service.protocols.proto import (
    classification_pb2,
    inference_pb2,
    input_pb2,
    model_pb2,
    regression_pb2,
)
from service.repository.signatures import DEFAULT_SIGNATURE, Signature, TensorSpec

if TYPE_CHECKING:
    from service.inference.dataplane import DataPlane, InferResult, Observation
    from service.repository.servable import Servable

__all__ = [
    "CLASSIFY_METHOD",
    "REGRESS_METHOD",
    "ExampleTask",
    "Classification",
    "Regression",
    "example_task",
    "serialized_examples",
    "classification",
    "regression",
    "classify",
    "regress",
    "run_classify",
    "run_regress",
    "run_multi_inference",
    "fill_model_spec",
]

CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
# The aliases TensorFlow Serving's signature constants name (tensorflow/python/saved_model/signature_constants.py).
_INPUTS = "inputs"
_CLASSES = "classes"
_SCORES = "scores"
_OUTPUTS = "outputs"

# Runs graph tensors `fetches` given graph tensors `feeds` (Servable.run).
Run = Callable[[Mapping[str, np.ndarray], Sequence[str]], list[np.ndarray]]


@dataclass(frozen=True)
class ExampleTask:
    """What one classify or regress call runs: the signature, its examples input, and the outputs read
    (for classify `classes` and/or `scores`, in that order; for regress `outputs`)."""

    method: str
    signature: Signature
    input: TensorSpec
    outputs: tuple[TensorSpec, ...]

    @property
    def output_aliases(self) -> list[str]:
        return [spec.alias for spec in self.outputs]

    @property
    def fetches(self) -> list[str]:
        return [spec.tensor for spec in self.outputs]


# eq=False: dataclass equality would compare arrays with ==.
@dataclass(frozen=True, eq=False)
class Classification:
    """The classes of each example: `labels` [batch, k] (bytes) without a `classes` output is None (the
    labels are ""), `scores` [batch, k] (float32) without a `scores` output is None (the scores are 0)."""

    labels: np.ndarray | None
    scores: np.ndarray | None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.labels if self.labels is not None else self.scores).shape

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.labels, self.scores) if a is not None)

    def to_proto(self) -> classification_pb2.ClassificationResult:
        result = classification_pb2.ClassificationResult()
        batch, k = self.shape
        labels = self.labels.tolist() if self.labels is not None else None
        scores = self.scores.tolist() if self.scores is not None else None
        for i in range(batch):
            classes = result.classifications.add().classes
            for c in range(k):
                cls = classes.add()
                if labels is not None:
                    cls.label = _label_text(labels[i][c])
                if scores is not None:
                    cls.score = scores[i][c]
        return result


@dataclass(frozen=True, eq=False)
class Regression:
    """One float32 value per example."""

    values: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.values.nbytes

    def to_proto(self) -> regression_pb2.RegressionResult:
        result = regression_pb2.RegressionResult()
        for value in self.values.tolist():
            result.regressions.add().value = value
        return result


# --- the signature -------------------------------------------------------------------------------


def example_task(servable: Servable, signature_name: str, method: str, *, check_method_name: bool = False) -> ExampleTask:
    """The signature `signature_name` ("" is serving_default) as a classify or regress signature; BadRequest
    with TensorFlow Serving's text when it is not one (`GetClassificationSignatureDef`,
    `PreProcessClassification`, and their regress twins)."""
    name = signature_name or DEFAULT_SIGNATURE
    signature = servable.signatures.get(name)
    if signature is None:
        raise BadRequest(f"No signature was found with the name: {name}")
    return _task(signature, method, check_method_name=check_method_name)


def _task(signature: Signature, method: str, *, check_method_name: bool) -> ExampleTask:
    classify = method == CLASSIFY_METHOD
    kind = "classification" if classify else "regression"
    if check_method_name and signature.method_name != method:
        raise BadRequest(f"Expected {kind} signature method_name to be {method}. Was: {signature.method_name}")
    if len(signature.inputs) != 1:
        raise BadRequest("Expected one input Tensor.")
    if classify and len(signature.outputs) not in (1, 2):
        raise BadRequest(f"Expected one or two output Tensors, found {len(signature.outputs)}")
    if not classify and len(signature.outputs) != 1:
        raise BadRequest("Expected one output Tensor.")
    (spec,) = signature.inputs
    if spec.alias != _INPUTS:
        raise BadRequest(f"No {kind} inputs found in SignatureDef: {signature_debug_string(signature)}")
    outputs = {s.alias: s for s in signature.outputs}
    if classify:
        read = tuple(outputs[a] for a in (_CLASSES, _SCORES) if a in outputs)
        if not read:
            raise BadRequest(f'Expected classification signature outputs to contain at least one of "{_CLASSES}" or '
                             f'"{_SCORES}". Signature was: {signature_debug_string(signature)}')
    else:
        if _OUTPUTS not in outputs:
            raise BadRequest(f"No regression outputs found in SignatureDef: {signature_debug_string(signature)}")
        read = (outputs[_OUTPUTS],)
    composite = next((s for s in read if s.composite is not None), None)
    if composite is not None:
        # NOTE: TensorFlow Serving fetches a TensorInfo's name, which a ragged or sparse output has not.
        raise BadRequest(f"Expected {kind} output '{composite.alias}' to be a dense tensor, but signature "
                         f"'{signature.name}' returns it as a {composite.composite.kind} tensor")
    return ExampleTask(method, signature, spec, read)


def signature_debug_string(signature: Signature) -> str:
    """The signature as TensorFlow Serving's errors print it: the SignatureDef in protobuf text format."""
    proto = meta_graph_pb2.SignatureDef(method_name=signature.method_name)
    for specs, target in ((signature.inputs, proto.inputs), (signature.outputs, proto.outputs)):
        for spec in specs:
            info = target[spec.alias]
            if spec.composite is not None and spec.composite.tensor_info is not None:
                json_format.ParseDict(spec.composite.tensor_info, info, ignore_unknown_fields=True)
                continue
            info.name = spec.tensor
            if spec.dtype is not None:
                info.dtype = dtypes.from_numpy(spec.dtype)
            info.tensor_shape.CopyFrom(shape_proto(spec.shape))
    return text_format.MessageToString(proto)


# --- the examples --------------------------------------------------------------------------------


def serialized_examples(request_input: input_pb2.Input) -> np.ndarray:
    """The DT_STRING vector fed to the signature: each example serialized, after the context's bytes
    (TensorFlow Serving's `InputToSerializedExampleTensor`). BadRequest "Input is empty." without any."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        serialized = [e.SerializeToString() for e in request_input.example_list.examples]
    elif kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        context = listed.context.SerializeToString()
        serialized = [context + e.SerializeToString() for e in listed.examples]
    else:
        serialized = []
    if not serialized:
        raise BadRequest("Input is empty.")
    examples = np.empty(len(serialized), dtype=object)
    examples[:] = serialized
    return examples


# --- the results ---------------------------------------------------------------------------------


def classification(task: ExampleTask, num_examples: int, values: Mapping[str, Any]) -> Classification:
    """The classes of each example from the signature's `classes` and/or `scores` (alias -> value),
    checked as TensorFlow Serving's `PostProcessClassificationResult` checks them."""
    classes, scores = values.get(_CLASSES), values.get(_SCORES)
    for name, value, dtype, dtype_name in ((_CLASSES, classes, np.dtype(object), "DT_STRING"),
                                           (_SCORES, scores, np.dtype(np.float32), "DT_FLOAT")):
        if value is None:
            continue
        if not isinstance(value, np.ndarray) or value.ndim != 2:
            raise BadRequest(f"Expected Tensor shape: [batch_size num_classes] but got {_shape_text(value)}")
        if value.dtype != dtype and not (dtype == object and value.dtype.kind in "SU"):
            raise BadRequest(f"Expected {name} Tensor of {dtype_name}. Got: {_dtype_text(value.dtype)}")
        if value.shape[0] != num_examples:
            raise BadRequest(f"Expected {name} output batch size of {num_examples}. Got: {value.shape[0]}")
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise BadRequest(f"Tensors class and score should match in dim_size(1). Got {classes.shape[1]} vs. {scores.shape[1]}")
    return Classification(classes, scores)


def regression(task: ExampleTask, num_examples: int, values: Mapping[str, Any]) -> Regression:
    """One value per example from the signature's `outputs`, checked as TensorFlow Serving's
    `PostProcessRegressionResult` checks it."""
    value = values[_OUTPUTS]
    if not isinstance(value, np.ndarray) or not (value.ndim == 1 or (value.ndim == 2 and value.shape[1] == 1)):
        raise BadRequest(f"Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
                         f"{_shape_text(value)}")
    if value.shape[0] != num_examples:
        raise BadRequest(f"Input batch size did not match output batch size: {num_examples} vs. {value.shape[0]}")
    if value.dtype != np.float32:
        raise BadRequest(f"Expected output Tensor of DT_FLOAT.  Got: {_dtype_text(value.dtype)}")
    return Regression(value.reshape(-1))


def _shape_text(value: Any) -> str:
    # TensorShape::DebugString: [2,3]
    if isinstance(value, np.ndarray):
        return "[" + ",".join(str(d) for d in value.shape) + "]"
    return f"a {type(value).__name__.removesuffix('Value').lower()} tensor"


def _dtype_text(dtype: np.dtype) -> str:
    try:
        return types_pb2.DataType.Name(dtypes.from_numpy(dtype))
    except ValueError:
        return str(dtype)


def _label_text(label: Any) -> str:
    # NOTE: a label is bytes; TensorFlow Serving copies them as they are, which are UTF-8 in practice.
    return label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)


def fill_model_spec(spec: model_pb2.ModelSpec, model: str, signature_name: str | None, version: int | None) -> None:
    """TensorFlow Serving's `MakeModelSpec`: the model, its version, and the signature that ran (an empty
    name is serving_default; None leaves it out, as a None version does)."""
    spec.Clear()
    spec.name = model
    if signature_name is not None:
        spec.signature_name = signature_name or DEFAULT_SIGNATURE
    if version is not None:
        spec.version.value = version


# --- running them --------------------------------------------------------------------------------


async def _infer(plane: DataPlane, servable: Servable, task: ExampleTask, examples: np.ndarray, obs: Observation,
                 disconnected: Callable[[], Awaitable[Any]] | None, timeout_s: float | None = None) -> dict[str, Any]:
    with full_queue_unavailable():
        result = await plane.infer(servable, task.signature, {task.input.alias: examples}, task.output_aliases, obs,
                                   disconnected=disconnected, timeout_s=timeout_s)
    _check_response_size(plane, result)
    return {spec.alias: value for spec, value in result.outputs}


def _check_response_size(plane: DataPlane, result: InferResult) -> None:
    """Results are built into JSON (REST) or protobuf (gRPC) after this: held to the response limit by
    the fewest bytes either encoding can take."""
    plane.response_limit.check_outputs((spec.alias, value, ANY) for spec, value in result.outputs)


async def classify(plane: DataPlane, servable: Servable, request: classification_pb2.ClassificationRequest,
                   obs: Observation, *, check_method_name: bool = False,
                   disconnected: Callable[[], Awaitable[Any]] | None = None, timeout_s: float | None = None) -> Classification:
    """A Classify request on a leased servable, through the data plane (worker pool or batcher, deadline)."""
    task = example_task(servable, request.model_spec.signature_name, CLASSIFY_METHOD, check_method_name=check_method_name)
    examples = serialized_examples(request.input)
    return classification(task, len(examples), await _infer(plane, servable, task, examples, obs, disconnected, timeout_s))


async def regress(plane: DataPlane, servable: Servable, request: regression_pb2.RegressionRequest,
                  obs: Observation, *, check_method_name: bool = False,
                  disconnected: Callable[[], Awaitable[Any]] | None = None, timeout_s: float | None = None) -> Regression:
    """A Regress request on a leased servable, through the data plane."""
    task = example_task(servable, request.model_spec.signature_name, REGRESS_METHOD, check_method_name=check_method_name)
    examples = serialized_examples(request.input)
    return regression(task, len(examples), await _infer(plane, servable, task, examples, obs, disconnected, timeout_s))


def _run_task(run: Run, task: ExampleTask, examples: np.ndarray) -> dict[str, Any]:
    return dict(zip(task.output_aliases, run({task.input.tensor: examples}, task.fetches)))


def run_classify(servable: Servable, request: classification_pb2.ClassificationRequest, run: Run, *,
                 check_method_name: bool = False) -> classification_pb2.ClassificationResponse:
    """A Classify request run directly with `run` (warm-up: no pool, no batcher, no metrics)."""
    return _run_request(servable, request, run, CLASSIFY_METHOD, classification,
                        classification_pb2.ClassificationResponse(), check_method_name)


def run_regress(servable: Servable, request: regression_pb2.RegressionRequest, run: Run, *,
                check_method_name: bool = False) -> regression_pb2.RegressionResponse:
    """A Regress request run directly with `run`."""
    return _run_request(servable, request, run, REGRESS_METHOD, regression, regression_pb2.RegressionResponse(),
                        check_method_name)


def _run_request(servable: Servable, request: Any, run: Run, method: str, result: Callable[..., Any], response: Any,
                 check_method_name: bool) -> Any:
    """Classify or Regress run directly: `result` (classification or regression) of the task's outputs
    into `response`."""
    task = example_task(servable, request.model_spec.signature_name, method, check_method_name=check_method_name)
    examples = serialized_examples(request.input)
    response.result.CopyFrom(result(task, len(examples), _run_task(run, task, examples)).to_proto())
    fill_model_spec(response.model_spec, request.model_spec.name, request.model_spec.signature_name, servable.version)
    return response


def _multi_inference_tasks(servable: Servable, request: inference_pb2.MultiInferenceRequest, *,
                           check_method_name: bool) -> list[ExampleTask]:
    """The classify and regress tasks of a MultiInferenceRequest, checked as TensorFlow Serving's
    `TensorFlowMultiInferenceRunner::Infer` checks them: every task names the same model, no signature
    twice."""
    model, seen, tasks = "", set(), []
    for task in request.tasks:
        if not task.model_spec.name:
            raise BadRequest("Found ModelSpec with an empty model name.")
        if model and task.model_spec.name != model:
            raise BadRequest("All ModelSpecs in a MultiInferenceRequest must access the same model name.")
        model = task.model_spec.name
        name = task.model_spec.signature_name or DEFAULT_SIGNATURE
        if name in seen:
            raise BadRequest(f"Duplicate evaluation of signature: {name}")
        seen.add(name)
        signature = servable.signatures.get(name)
        if signature is None:
            raise BadRequest(f"Requested signature not found in model graph: {name}")
        if task.method_name not in (CLASSIFY_METHOD, REGRESS_METHOD):
            raise BadRequest(f"Unsupported signature method_name: {task.method_name}")
        tasks.append(_task(signature, task.method_name, check_method_name=check_method_name))
    if not tasks:
        raise BadRequest("MultiInferenceRequest has no tasks.")
    return tasks


def _multi_inference_response(servable: Servable, request: inference_pb2.MultiInferenceRequest,
                              tasks: Sequence[ExampleTask], num_examples: int,
                              by_tensor: Mapping[str, Any]) -> inference_pb2.MultiInferenceResponse:
    response = inference_pb2.MultiInferenceResponse()
    for spec, task in zip(request.tasks, tasks):
        values = {s.alias: by_tensor[s.tensor] for s in task.outputs}
        result = response.results.add()
        if task.method == CLASSIFY_METHOD:
            result.classification_result.CopyFrom(classification(task, num_examples, values).to_proto())
        else:
            result.regression_result.CopyFrom(regression(task, num_examples, values).to_proto())
        fill_model_spec(result.model_spec, spec.model_spec.name, spec.model_spec.signature_name, servable.version)
    return response


def run_multi_inference(servable: Servable, request: inference_pb2.MultiInferenceRequest, run: Run, *,
                        check_method_name: bool = False) -> inference_pb2.MultiInferenceResponse:
    """Several classify and regress signatures of one model over one Input, in one run, as TensorFlow
    Serving's `TensorFlowMultiInferenceRunner::Infer` does; the examples feed each signature's input."""
    tasks = _multi_inference_tasks(servable, request, check_method_name=check_method_name)
    examples = serialized_examples(request.input)
    feeds = {t.input.tensor: examples for t in tasks}
    fetches = sorted({tensor for t in tasks for tensor in t.fetches})
    by_tensor = dict(zip(fetches, run(feeds, fetches)))
    return _multi_inference_response(servable, request, tasks, len(examples), by_tensor)


async def multi_inference(plane: DataPlane, servable: Servable, request: inference_pb2.MultiInferenceRequest,
                          obs: Observation, *, check_method_name: bool = False,
                          timeout_s: float | None = None) -> inference_pb2.MultiInferenceResponse:
    """A MultiInference request on a leased servable, through the data plane: one run feeding the
    examples to every task's input tensor and fetching every task's outputs."""
    tasks = _multi_inference_tasks(servable, request, check_method_name=check_method_name)
    examples = serialized_examples(request.input)
    feeds = {t.input.tensor: examples for t in tasks}
    fetches = sorted({tensor for t in tasks for tensor in t.fetches})
    with full_queue_unavailable():
        result = await plane.infer(servable, tasks[0].signature, feeds, fetches, obs, timeout_s=timeout_s)
    _check_response_size(plane, result)
    by_tensor = dict(zip(fetches, (value for _, value in result.outputs)))
    return _multi_inference_response(servable, request, tasks, len(examples), by_tensor)
