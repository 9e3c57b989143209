"""The JSON codec of TensorFlow Serving's REST Classify and Regress APIs, as `util/json_tensor.cc` has it.

A body is `{"signature_name"?, "context"?: {feature: value|list}, "examples": [{feature: value|list}, ...]}`;
each object becomes a tf.Example whose features are lists of one kind, told by the JSON values: a number
with a fraction or an exponent is a float (float_list), an integer or a boolean an int64 (int64_list), a
string or `{"b64": "..."}` bytes (bytes_list); a list holds values of one kind, `[]` is an empty feature.
The reply is `{"results": [[[label, score], ...], ...]}` for classify and `{"results": [value, ...]}` for
regress.

NOTE: TensorFlow Serving's REST documentation (g3doc/api_rest.md) writes the reply's key as "result";
its server writes "results" (`kClassifyRegressResponseKey`), which is what its clients read and what this
codec writes.

    >>> request = parse_examples_body(b'{"examples": [{"x": 1.5, "tag": "a"}]}', classification_pb2.ClassificationRequest())
    >>> request.input.example_list.examples[0].features.feature["x"].float_list.value
    [1.5]
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, TypeVar

import numpy as np

from engine.proto import example_pb2, feature_pb2
from service.errors import BadRequest
from service.inference.examples import Classification, Regression
from service.protocols.codecs import fastjson
from service.protocols.codecs.float_digits import tf_float32_digits
from service.protocols.codecs.tfserving import load_json
from service.protocols.proto import classification_pb2, regression_pb2

__all__ = ["parse_examples_body", "encode_classification", "encode_regression"]

Request = TypeVar("Request", classification_pb2.ClassificationRequest, regression_pb2.RegressionRequest)

_RESULTS_KEY = "results"
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_MAX_DEBUG_CHARS = 256  # kMaxJsonDebugStringBytes: how much of the body an error quotes
# rapidjson's names for JSON types, which TensorFlow Serving's errors print.
_JSON_TYPES = {type(None): "Null", bool: "True", dict: "Object", list: "Array", str: "String", int: "Number",
               float: "Number"}
# The kind names IncompatibleFeatureKindError prints, by the feature's kind so far.
_KIND_NAMES = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64", None: "UNKNOWN"}


def parse_examples_body(body: bytes, request: Request) -> Request:
    """Fill `request` (a ClassificationRequest or RegressionRequest) from a Classify or Regress body:
    its signature name and its examples, with a context when the body has one. BadRequest with
    TensorFlow Serving's text when the body does not fit."""
    doc = load_json(body)
    if not isinstance(doc, dict):
        raise BadRequest(f"JSON Value: {_debug(doc)} Is not object")
    if "signature_name" in doc:
        if not isinstance(doc["signature_name"], str):
            raise BadRequest(f"JSON Value: {_debug(doc)} not formatted correctly. 'signature_name' key must be a string value.")
        request.model_spec.signature_name = _utf8(doc["signature_name"], "'signature_name'")
    has_context = "context" in doc
    if has_context:
        _fill_example(doc["context"], request.input.example_list_with_context.context)
    if "examples" not in doc:
        # NOTE: TensorFlow Serving says "classify" for regress bodies too.
        raise BadRequest(f"JSON Value: {_debug(doc)} When method is classify, key 'examples' is expected and was not found")
    examples = doc["examples"]
    if not isinstance(examples, list):
        raise BadRequest(f"JSON Value: {_debug(doc)} Expecting 'examples' value to be an list/array")
    if not examples:
        raise BadRequest(f"JSON Value: {_debug(doc)} 'examples' value is an empty array")
    target = request.input.example_list_with_context if has_context else request.input.example_list
    for item in examples:
        _fill_example(item, target.examples.add())
    return request


def _fill_example(value: Any, example: example_pb2.Example) -> None:
    """MakeExampleFromJsonObject: each member a feature, of one value or a list of values."""
    if not isinstance(value, dict):
        raise BadRequest(f"Example must be JSON object but got JSON {_json_type(value)}")
    features = example.features.feature
    for name, content in value.items():
        feature = feature_pb2.Feature()
        for item in content if isinstance(content, list) else (content,):
            _add_value(item, name, feature)
        features[_utf8(name, "Feature name")].CopyFrom(feature)


def _add_value(value: Any, name: str, feature: feature_pb2.Feature) -> None:
    """AddValueToFeature: one JSON value into the feature's list, which must be of its kind."""
    kind = type(value)
    if kind is bool:
        _of_kind(feature, "int64_list", name).value.append(int(value))
    elif kind is int:
        if _INT64_MAX < value <= _UINT64_MAX:
            raise BadRequest(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
        if _INT64_MIN <= value <= _INT64_MAX:
            _of_kind(feature, "int64_list", name).value.append(value)
        else:  # NOTE: rapidjson reads integers beyond 64 bits as doubles
            _of_kind(feature, "float_list", name).value.append(_float32(float(value)))
    elif kind is float:
        _of_kind(feature, "float_list", name).value.append(_float32(value))
    elif kind is str:
        try:
            data = value.encode()
        except UnicodeEncodeError:
            raise BadRequest(f"Feature: {name} has a string with an unpaired surrogate, not valid UTF-8") from None
        _of_kind(feature, "bytes_list", name).value.append(data)
    elif kind is dict and len(value) == 1 and type(value.get("b64")) is str:
        _of_kind(feature, "bytes_list", name).value.append(_b64decode(value["b64"]))
    else:  # null, a nested list, an object other than {"b64": "..."}
        raise BadRequest(f"Feature: {name} has element with unexpected JSON type: {_json_type(value)}")


def _utf8(text: str, what: str) -> str:
    """`text`, when protobuf can store it: JSON can spell unpaired surrogates ("\\ud800"), UTF-8 cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{what} {text!r} has an unpaired surrogate, not valid UTF-8") from None
    return text


def _of_kind(feature: feature_pb2.Feature, kind: str, name: str) -> Any:
    current = feature.WhichOneof("kind")
    if current is not None and current != kind:
        raise BadRequest(f"Unexpected element type in feature: {name} expecting type: {_KIND_NAMES[current]}")
    return getattr(feature, kind)


def _float32(value: float) -> float:
    # rapidjson's GetFloat: the double narrowed to float (a float_list holds float32s).
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _b64decode(text: str) -> bytes:
    # NOTE: absl's Base64Unescape, which TensorFlow Serving uses, takes unpadded input too.
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("Unable to base64 decode") from None


def _json_type(value: Any) -> str:
    if value is False:
        return "False"
    return _JSON_TYPES.get(type(value), "Unknown")


def _debug(doc: Any) -> str:
    """The body as TensorFlow Serving's errors quote it: its JSON, cut short."""
    text = json.dumps(doc, ensure_ascii=False, allow_nan=True, separators=(",", ":"))
    return text if len(text) <= _MAX_DEBUG_CHARS else text[:_MAX_DEBUG_CHARS] + "..."


# --- replies -------------------------------------------------------------------------------------


def encode_classification(result: Classification) -> bytes:
    """`{"results": [[[label, score], ...], ...]}`: a list of (label, score) pairs per example; labels
    are "" without a `classes` output, scores 0.0 without a `scores` output."""
    batch, k = result.shape
    if batch == 0:
        raise BadRequest("Cannot convert empty ClassificationResults to JSON")
    if result.labels is not None:
        labels = [[_label(item) for item in row] for row in result.labels.tolist()]
    else:
        labels = [[""] * k for _ in range(batch)]
    if result.scores is not None:
        scores = tf_float32_digits(np.asarray(result.scores, dtype=np.float32))
    else:
        scores = [[0.0] * k for _ in range(batch)]
    rows = [[[label, score] for label, score in zip(label_row, score_row)] for label_row, score_row in zip(labels, scores)]
    return _dumps({_RESULTS_KEY: rows})


def encode_regression(result: Regression) -> bytes:
    """`{"results": [value, ...]}`: one value per example."""
    if not np.asarray(result.values).size:
        raise BadRequest("Cannot convert empty RegressionResults to JSON")
    return _dumps({_RESULTS_KEY: tf_float32_digits(np.asarray(result.values, dtype=np.float32))})


def _label(item: Any) -> str:
    # NOTE: TensorFlow Serving writes a label's bytes as they are; bytes that are not UTF-8 would make the
    # body invalid JSON, so they are replaced here (U+FFFD).
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


def _dumps(doc: dict) -> bytes:
    # NaN and +/-Infinity as bare literals, as TF Serving writes them; UTF-8 unescaped, as it does.
    return fastjson.dumps(doc)
