"""TensorFlow Serving's model status and metadata as documents, the same for both of its transports:
the REST routes send them as JSON, the gRPC services parse them into GetModelStatusResponse and
GetModelMetadataResponse (the documents are those messages' JSON forms).

    >>> model_status(manager, "half_plus_two")["model_version_status"][0]["state"]
    'AVAILABLE'
"""

from __future__ import annotations

from typing import Any

from engine.graph import dtypes
from engine.proto import types_pb2
from service.repository.manager import ModelManager
from service.repository.signatures import Signature, TensorSpec
from service.repository.versions import State, VersionStatus

__all__ = ["version_status", "model_status", "model_metadata", "signature_def_map"]


def version_status(s: VersionStatus) -> dict[str, Any]:
    """One version's ModelVersionStatus."""
    # TF Serving reports a failed load as END with the load's error status.
    code = "OK" if s.error is None else "UNKNOWN" if s.state is State.AVAILABLE else "INVALID_ARGUMENT"
    return {"version": str(s.version), "state": s.state.value, "status": {"error_code": code, "error_message": s.error or ""}}


def model_status(manager: ModelManager, model: str, version: int | None = None, label: str | None = None) -> dict[str, Any]:
    """GetModelStatusResponse: every version of the model (or the one asked for), newest first."""
    return {"model_version_status": [version_status(s) for s in manager.status(model, version, label)]}


def _tensor_info(spec: TensorSpec) -> dict[str, Any]:
    if spec.composite is not None and spec.composite.tensor_info is not None:
        # A ragged or sparse output: TensorFlow's TensorInfo as the SavedModel has it (a `composite_tensor`
        # with dtype DT_INVALID, or a `coo_sparse`), as TensorFlow Serving's metadata shows it.
        return spec.composite.tensor_info
    dtype = "DT_INVALID" if spec.dtype is None else types_pb2.DataType.Name(dtypes.from_numpy(spec.dtype))
    if spec.shape is None:
        shape: dict[str, Any] = {"dim": [], "unknown_rank": True}
    else:
        shape = {"dim": [{"size": str(-1 if d is None else d), "name": ""} for d in spec.shape], "unknown_rank": False}
    return {"dtype": dtype, "tensor_shape": shape, "name": spec.tensor}


def _signature_def(sig: Signature) -> dict[str, Any]:
    return {
        "inputs": {s.alias: _tensor_info(s) for s in sig.inputs},
        "outputs": {s.alias: _tensor_info(s) for s in sig.outputs},
        "method_name": sig.method_name,
        "defaults": {},
    }


def signature_def_map(signatures: dict[str, Signature]) -> dict[str, Any]:
    """A SignatureDefMap: every signature as TensorFlow's SignatureDef."""
    return {"signature_def": {name: _signature_def(s) for name, s in signatures.items()}}


def model_metadata(manager: ModelManager, model: str, version: int | None = None, label: str | None = None) -> dict[str, Any]:
    """GetModelMetadataResponse's REST form: the SignatureDefs of the version asked for (the latest
    available one by default)."""
    servable = manager.servable(model, version, label)
    return {
        "model_spec": {"name": model, "signature_name": "", "version": str(servable.version)},
        "metadata": {"signature_def": signature_def_map(servable.signatures)},
    }
