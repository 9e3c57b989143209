"""The Open Inference Protocol's (KServe v2's) semantics, the same for both of its transports: server
and model metadata, model config and repository index as documents (the REST routes send them as
JSON; the gRPC service parses them into its messages, whose JSON forms they are), the request
parameters (`timeout`, `priority`, `signature_name`) checked, and a result's outputs as the tensors v2
sends.

    >>> model_metadata(manager, "iris", None)["inputs"]
    [{'name': 'features', 'datatype': 'FP32', 'shape': [-1, 4]}]
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

import service
from engine.devices import parse_device
from service.errors import BadRequest, NotFound
from service.inference.dataplane import DataPlane, InferResult, Observation
from service.protocols.classification import classification_count, top_k
from service.protocols.codecs import v2, v2_tensors
from service.repository.manager import ModelManager
from service.repository.signatures import TensorSpec
from service.repository.triton_config import triton_config_document
from service.repository.versions import State, VersionStatus

__all__ = [
    "EXTENSIONS",
    "server_metadata",
    "model_metadata",
    "model_ready",
    "model_config",
    "index_rows",
    "check_request",
    "raw_infer_request",
    "statistics",
    "timeout_s",
    "priority",
    "output_tensors",
    "infer",
]

EXTENSIONS = ["classification", "binary_tensor_data", "model_repository", "model_configuration", "parameters",
              "statistics"]


def check_known(manager: ModelManager, model: str) -> None:
    """NotFound in Triton's words for a model the server does not have (its clients look for them)."""
    if not manager.knows(model):
        raise NotFound(f"Request for unknown model: '{model}' is not found")


def server_metadata() -> dict[str, Any]:
    return {"name": "tensorgate", "version": service.__version__, "extensions": EXTENSIONS}


# --- models --------------------------------------------------------------------------------------


def _datatype(spec: TensorSpec) -> str:
    return "INVALID" if spec.dtype is None else v2_tensors.datatype_of(spec.dtype)


def _dims(spec: TensorSpec) -> list[int]:
    """-1 for a dimension of any size; an unknown rank shows as [-1]."""
    return [-1] if spec.shape is None else [-1 if d is None else d for d in spec.shape]


def _tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.alias, "datatype": _datatype(spec), "shape": _dims(spec)}


def _served_outputs(specs: Sequence[TensorSpec]) -> list[TensorSpec]:
    """The output tensors as v2 serves them: a ragged or sparse output as its components
    (`tokens.values`, `tokens.row_splits`; `ids.indices`, `ids.values`, `ids.dense_shape`)."""
    return [part for spec in specs for part in (spec.composite.components if spec.composite is not None else (spec,))]


def model_metadata(manager: ModelManager, model: str, version: int | None) -> dict[str, Any]:
    """Inputs and outputs of the default signature with datatypes and shapes (-1: any size)."""
    check_known(manager, model)
    servable = manager.servable(model, version)
    signature = servable.signature(None)
    versions = [version] if version is not None else manager.versions_available(model)
    return {
        "name": model,
        "versions": [str(v) for v in versions],
        "platform": servable.platform,
        "inputs": [_tensor_metadata(s) for s in signature.inputs],
        "outputs": [_tensor_metadata(s) for s in _served_outputs(signature.outputs)],
    }


def raw_infer_request(manager: ModelManager, model: str, version: int | None, body: bytes) -> v2.InferRequest:
    """A raw binary request (Triton's binary data extension, `Inference-Header-Content-Length: 0`): the
    body is the one input's bytes, its shape deduced from the model's: its one variable dimension from
    the byte count, or, with two, batch 1 and the other from the byte count; a BYTES input is one
    element (shape [1], or [1, 1] batched). Every output comes back as binary data. BadRequest where a shape cannot be deduced."""
    check_known(manager, model)
    signature = manager.servable(model, version).signature(None)
    if len(signature.inputs) != 1:  # Triton's words, then ours
        raise BadRequest(f"Raw request must only have 1 input (found 1) to be deduced but got {len(signature.inputs)} "
                         f"inputs in '{model}' model configuration ({', '.join(s.alias for s in signature.inputs)}): "
                         "send an inference header naming them")
    spec = signature.inputs[0]
    if spec.dtype is None or spec.shape is None:
        raise BadRequest(f"a raw binary request needs input '{spec.alias}' of model '{model}' to declare its "
                         "datatype and shape, from which the tensor's shape is deduced")
    dims = list(spec.shape)
    if dims and dims[0] is None and (spec.dtype == np.dtype(object) or dims[1:].count(None) == 1):
        dims[0] = 1  # a batch of one, the other variable dimension deduced (a lone one is deduced itself)
    if spec.dtype == np.dtype(object):
        if any(d not in (1, None) for d in dims):
            raise BadRequest(f"For BYTE datatype raw input '{spec.alias}', the model must have input shape [1] "
                             f"(it has {_dims(spec)}): a raw binary request is one element")
        array = np.empty([1] * len(dims), dtype=object)
        array.reshape(-1)[0] = bytes(body)
        return v2.InferRequest(None, (v2.InferInput(spec.alias, array),), None, {"binary_data_output": True})
    unknown = [i for i, d in enumerate(dims) if d is None]
    if len(unknown) > 1:
        raise BadRequest(f"The shape of the raw input '{spec.alias}' can not be deduced because there are more than "
                         f"one variable-sized dimension ({_dims(spec)}, besides a leading batch dimension)")
    known = int(np.prod([d for d in dims if d is not None], dtype=np.int64))
    row = known * spec.dtype.itemsize
    if row == 0 or len(body) % row or (not unknown and len(body) != row):
        raise BadRequest(f"a raw binary request of {len(body)} bytes does not fill input '{spec.alias}' "
                         f"({_datatype(spec)}, shape {_dims(spec)})")
    if unknown:
        dims[unknown[0]] = len(body) // row
    array = v2_tensors.tensor_from_raw(spec.alias, _datatype(spec), dims, body)
    return v2.InferRequest(None, (v2.InferInput(spec.alias, array),), None, {"binary_data_output": True})


def statistics(plane: DataPlane, model: str | None, version: int | None) -> dict[str, Any]:
    """Triton's statistics extension: `{"model_stats": [...]}` for every loaded version of every model, of
    `model`, or for `model`'s `version` alone; NotFound (in Triton's words) for a model or version not loaded."""
    manager = plane.manager
    loaded = [s for s in manager.index() if s.state is State.AVAILABLE]
    if model is not None:
        loaded = [s for s in loaded if s.model == model and (version is None or s.version == version)]
        if not loaded:
            check_known(manager, model)
            which = f"'{model}'" if version is None else f"'{model}' version {version}"
            raise NotFound(f"requested model {which} is not available")
    return {"model_stats": [plane.model_stats.document(s.model, str(s.version), s.resident_bytes) for s in loaded]}


def model_ready(manager: ModelManager, model: str, version: int | None) -> bool:
    """Whether the model (or version) can serve now; NotFound for a model or version nobody knows."""
    if manager.model_ready(model, version):
        return True
    manager.status(model, version)  # NotFound for a model or version nobody knows
    return False


def _triton_type(spec: TensorSpec) -> str:
    datatype = _datatype(spec)
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def _instance_group(model: str, device: str) -> dict[str, Any]:
    """Where the version runs, as Triton's config reports it: one instance, of KIND_GPU (with its
    GPU's index) or KIND_CPU."""
    kind, index = parse_device(device)
    return {"name": f"{model}_0", "kind": f"KIND_{kind.upper()}", "count": 1, "gpus": [index] if kind == "gpu" else []}


def model_config(manager: ModelManager, model: str, version: int | None) -> dict[str, Any]:
    """The model's configuration in Triton's form (what `tritonclient`'s get_model_config reads): a Triton
    repository model's own config.pbtxt, its name and platform filled in; else one made from its signature."""
    check_known(manager, model)
    servable = manager.servable(model, version)
    triton = triton_config_document(manager.sources.base_path(model))
    if triton is not None:
        triton.setdefault("name", model)
        if not triton.get("backend"):
            triton.setdefault("platform", "tensorflow_savedmodel" if servable.platform == "tensorflow_savedmodel"
                              else "tensorflow_graphdef")
        return triton
    signature = servable.signature(None)
    policy = manager.config(model).version_policy
    policy_doc = (
        {"all": {}} if policy.kind == "all"
        else {"specific": {"versions": list(policy.versions)}} if policy.kind == "specific"
        else {"latest": {"num_versions": policy.latest}}
    )
    return {
        "name": model,
        "platform": servable.platform,
        "backend": "tensorgate",
        "max_batch_size": 0,
        "version_policy": policy_doc,
        "input": [{"name": s.alias, "data_type": _triton_type(s), "dims": _dims(s)} for s in signature.inputs],
        "output": [{"name": s.alias, "data_type": _triton_type(s), "dims": _dims(s)} for s in _served_outputs(signature.outputs)],
        "instance_group": [_instance_group(model, servable.device)],
        # Triton's instance_group cannot say which logical CPU; our own device name can.
        "parameters": {"device": {"string_value": servable.device}},
    }


# --- repository ----------------------------------------------------------------------------------

_INDEX_STATE = {
    State.START: "LOADING",
    State.LOADING: "LOADING",
    State.AVAILABLE: "READY",
    State.UNLOADING: "UNLOADING",
    State.END: "UNAVAILABLE",
}


def index_row(s: VersionStatus) -> dict[str, Any]:
    """One version (or a model with none loaded) as the repository index lists it."""
    row: dict[str, Any] = {"name": s.model}
    if s.version:
        row["version"] = str(s.version)
    # A version kept out of memory on purpose (lazy loading, evicted, idle) is Triton's UNAVAILABLE with a reason
    # saying its next request loads it.
    row["state"] = "UNAVAILABLE" if s.unloaded else _INDEX_STATE[s.state]
    row["reason"] = s.error or s.reason or ""
    return row


def index_rows(manager: ModelManager, ready_only: bool = False) -> list[dict[str, Any]]:
    """Every model of the repository with each version's state; only READY ones when `ready_only`."""
    rows = [index_row(s) for s in manager.index()]
    return [r for r in rows if r["state"] == "READY"] if ready_only else rows


# --- infer ---------------------------------------------------------------------------------------


def timeout_s(parameters: dict) -> float | None:
    """The request's `timeout` parameter (microseconds) in seconds; None: the server's own."""
    timeout = parameters.get("timeout")
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
        raise BadRequest(f"invalid 'timeout' parameter {timeout!r}: expected microseconds, a non-negative integer")
    return timeout / 1e6 if timeout > 0 else None  # 0 means no timeout of its own, as in Triton


def priority(parameters: dict) -> int:
    """The request's `priority` parameter (1 is the highest; 0: the default)."""
    value = parameters.get("priority", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"invalid 'priority' parameter {value!r}: expected a non-negative integer (1 is the highest)")
    return value


def check_request(request: v2.InferRequest) -> str | None:
    """The request's signature name, after the checks the codecs leave to us."""
    names = [i.name for i in request.inputs]
    if len(set(names)) != len(names):
        raise BadRequest(f"input names must be unique; got {names}")
    for o in request.outputs or ():
        classification_count(o.parameters, o.name)  # a bad count is refused before the model runs
    signature_name = request.parameters.get("signature_name")
    if signature_name is not None and not isinstance(signature_name, str):
        raise BadRequest("the 'signature_name' parameter must be a string")
    return signature_name


async def infer(plane: DataPlane, model: str, version: int | None, request: v2.InferRequest, obs: Observation, *,
                deadline_s: float | None = None,
                disconnected: Callable[[], Awaitable[Any]] | None = None) -> InferResult:
    """Run a decoded infer request on the version asked for, with its signature, outputs, priority and
    timeout (the earlier of its `timeout` parameter and the transport's `deadline_s`)."""
    signature_name = check_request(request)
    timeout = timeout_s(request.parameters)
    if deadline_s is not None:
        timeout = deadline_s if timeout is None else min(timeout, deadline_s)
    check_known(plane.manager, model)
    async with plane.lease(model, obs, version, timeout_s=timeout) as servable:
        return await plane.infer(
            servable,
            servable.signature(signature_name),
            {i.name: i.array for i in request.inputs},
            None if request.outputs is None else [o.name for o in request.outputs],
            obs,
            priority=priority(request.parameters),
            timeout_s=timeout,
            disconnected=disconnected,
        )


def output_tensors(request: v2.InferRequest, result: InferResult, *, binary_default: bool
                   ) -> list[tuple[str, np.ndarray, bool]]:
    """The tensors to send, as (name, array, binary): a ragged or sparse output as its components,
    each binary as its output's `binary_data` parameter says, else as `binary_data_output` does
    (`binary_default` when the request does not say)."""
    asked_default = request.parameters.get("binary_data_output")
    default = asked_default if isinstance(asked_default, bool) else binary_default
    requested = {o.name: o for o in request.outputs or ()}
    outputs = []
    for spec, value in result.outputs:
        asked = requested.get(spec.alias)
        binary = asked.binary if asked is not None and asked.binary is not None else default
        count = classification_count(asked.parameters, spec.alias) if asked is not None else 0
        if count and spec.composite is None:
            # Triton's classification extension: the top classes, of each batch row where the model batches.
            batched = spec.shape[0] is None if spec.shape else value.ndim >= 2
            outputs.append((spec.alias, top_k(value, count, batched=batched, labels=result.labels.get(spec.alias)), binary))
        elif spec.composite is None:
            outputs.append((spec.alias, value, binary))
        else:  # a ragged or sparse output: its components, each a tensor of its own
            outputs.extend((part.alias, array, binary) for part, array in zip(spec.composite.components, value.arrays()))
    return outputs
