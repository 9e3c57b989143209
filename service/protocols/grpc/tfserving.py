"""TensorFlow Serving's gRPC services: `PredictionService` (Predict, Classify, Regress, MultiInference,
GetModelMetadata) and `ModelService` (GetModelStatus, HandleReloadConfigRequest). Handlers parse,
check what TensorFlow Serving checks (with its messages), and delegate to the data plane (inference),
the model manager (status, metadata, reloads) and `service.inference.examples` / `.predict`.

A Predict reply carries each output in its typed field (`float_val`, `int64_val`, `string_val`, ...),
as TensorFlow Serving writes them (clients read `outputs["y"].float_val` as often as they call
`tf.make_ndarray`); a ragged or sparse output comes as its components (`tokens.values`,
`tokens.row_splits`), each a tensor of its own. A full batch queue is UNAVAILABLE, as in TensorFlow
Serving.
"""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf import any_pb2, json_format

from engine.graph.tensors import from_array
from service.errors import BadRequest
from service.inference import examples
from service.inference.batching import full_queue_unavailable
from service.inference.dataplane import DataPlane, InferResult
from service.inference.predict import predict_inputs
from service.inference.response_limit import PROTO_FIELDS
from service.observability.payload_log import ProtoBody
from service.protocols import tfserving_documents as documents
from service.protocols.grpc.rpc import deadline_s, grpc_status, parse_message, rpc
from service.protocols.grpc.services import PREDICTION_SERVICE
from service.protocols.proto import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_pb2,
    predict_pb2,
    regression_pb2,
)
from service.repository.manager import ModelManager
from service.repository.model_config_file import models_of_server_config
from service.repository.server_core import config_base_dir, reload_server_config

__all__ = ["PredictionService", "ModelService", "RAW_METHODS"]

SIGNATURE_DEF = "signature_def"
# Full name of the packed SignatureDefMap as TensorFlow Serving's clients unpack it.
_SIGNATURE_DEF_MAP_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap"
# Methods whose messages may be large: parsed and serialized by the handler, off the loop when big.
RAW_METHODS = ("Predict",)


def _model_spec(spec: model_pb2.ModelSpec, has_spec: bool = True) -> tuple[str, int | None, str | None]:
    """The model name, version and label a ModelSpec asks for (TensorFlow Serving's checks)."""
    if not has_spec:
        raise BadRequest("Missing ModelSpec")
    if not spec.name:
        raise BadRequest("ModelSpec has no name specified.")
    choice = spec.WhichOneof("version_choice")
    if choice == "version":
        return spec.name, spec.version.value, None
    if choice == "version_label":
        return spec.name, None, spec.version_label
    return spec.name, None, None


def _predict_response(request: predict_pb2.PredictRequest, result: InferResult, typed_fields: bool = True) -> bytes:
    # TensorFlow Serving's default puts values in the typed `*_val` fields (Tensor::AsProtoField), which
    # clients read; --enable_serialization_as_tensor_content packs numbers into tensor_content instead.
    response = predict_pb2.PredictResponse()
    examples.fill_model_spec(response.model_spec, request.model_spec.name, request.model_spec.signature_name,
                             result.version)
    for spec, value in result.outputs:
        if spec.composite is None:
            response.outputs[spec.alias].CopyFrom(from_array(value, typed_fields=typed_fields))
            continue
        for part, array in zip(spec.composite.components, value.arrays()):
            response.outputs[part.alias].CopyFrom(from_array(array, typed_fields=typed_fields))
    return response.SerializeToString()


class PredictionService:
    """tensorflow.serving.PredictionService over a data plane."""

    def __init__(self, plane: DataPlane, *, check_method_name: bool = False, tensor_content: bool = False):
        self.plane = plane
        self.manager = plane.manager
        self.check_method_name = check_method_name
        self.typed_fields = not tensor_content

    @rpc
    async def Predict(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        plane = self.plane
        request = await plane.maybe_call(len(raw), parse_message, predict_pb2.PredictRequest, raw)
        name, version, label = _model_spec(request.model_spec, request.HasField("model_spec"))
        async with plane.observe("grpc", name, f"/{PREDICTION_SERVICE}/Predict") as obs:
            if obs.payload is not None:
                obs.log_request(ProtoBody(request))
            async with plane.lease(name, obs, version, label) as servable:
                with obs.phase("decode"):
                    signature, inputs, outputs = await plane.maybe_call(len(raw), predict_inputs, servable, request)
                with full_queue_unavailable():
                    result = await plane.infer(servable, signature, inputs, outputs, obs, timeout_s=deadline_s(context))
            plane.response_limit.check_outputs((spec.alias, value, PROTO_FIELDS) for spec, value in result.outputs)
            size = sum(getattr(value, "nbytes", 0) for _, value in result.outputs)
            with obs.phase("encode"):
                reply = await plane.maybe_call(size, _predict_response, request, result, self.typed_fields)
            if obs.payload is not None:
                obs.log_response(ProtoBody(reply, predict_pb2.PredictResponse))
            return reply

    async def _examples(self, request, context: grpc.aio.ServicerContext, run, response):
        name, version, label = _model_spec(request.model_spec, request.HasField("model_spec"))
        method = "Classify" if run is examples.classify else "Regress"
        async with self.plane.observe("grpc", name, f"/{PREDICTION_SERVICE}/{method}") as obs:
            if obs.payload is not None:
                obs.log_request(ProtoBody(request))
            async with self.plane.lease(name, obs, version, label) as servable:
                result = await run(self.plane, servable, request, obs, check_method_name=self.check_method_name,
                                   timeout_s=deadline_s(context))
            response.result.CopyFrom(result.to_proto())
            examples.fill_model_spec(response.model_spec, name, request.model_spec.signature_name, servable.version)
            if obs.payload is not None:
                obs.log_response(ProtoBody(response))
            return response

    @rpc
    async def Classify(self, request: classification_pb2.ClassificationRequest,
                       context: grpc.aio.ServicerContext) -> classification_pb2.ClassificationResponse:
        return await self._examples(request, context, examples.classify, classification_pb2.ClassificationResponse())

    @rpc
    async def Regress(self, request: regression_pb2.RegressionRequest,
                      context: grpc.aio.ServicerContext) -> regression_pb2.RegressionResponse:
        return await self._examples(request, context, examples.regress, regression_pb2.RegressionResponse())

    @rpc
    async def MultiInference(self, request: inference_pb2.MultiInferenceRequest,
                             context: grpc.aio.ServicerContext) -> inference_pb2.MultiInferenceResponse:
        if not request.tasks:
            raise BadRequest("MultiInferenceRequest has no tasks.")
        first = request.tasks[0].model_spec
        name, version, label = _model_spec(first)
        async with self.plane.observe("grpc", name, f"/{PREDICTION_SERVICE}/MultiInference") as obs:
            if obs.payload is not None:
                obs.log_request(ProtoBody(request))
            async with self.plane.lease(name, obs, version, label) as servable:
                response = await examples.multi_inference(self.plane, servable, request, obs,
                                                          check_method_name=self.check_method_name,
                                                          timeout_s=deadline_s(context))
            if obs.payload is not None:
                obs.log_response(ProtoBody(response))
            return response

    @rpc
    async def GetModelMetadata(self, request: get_model_metadata_pb2.GetModelMetadataRequest,
                               context: grpc.aio.ServicerContext) -> get_model_metadata_pb2.GetModelMetadataResponse:
        name, version, label = _model_spec(request.model_spec, request.HasField("model_spec"))
        if not request.metadata_field:
            raise BadRequest("GetModelMetadataRequest must specify at least one metadata_field")
        for field in request.metadata_field:
            if field != SIGNATURE_DEF:
                raise BadRequest(f"Metadata field {field} is not supported")
        if self.manager.needs_load(name, version, label):  # a parked version: wait for its load off the loop
            servable = await asyncio.to_thread(self.manager.servable, name, version, label)
        else:
            servable = self.manager.servable(name, version, label)
        signatures = json_format.ParseDict(documents.signature_def_map(servable.signatures),
                                           get_model_metadata_pb2.SignatureDefMap())
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = name
        response.model_spec.version.value = servable.version
        # Packed by hand: Any.Pack would name our package in the type URL; clients unpack TensorFlow Serving's.
        response.metadata[SIGNATURE_DEF].CopyFrom(any_pb2.Any(type_url=_SIGNATURE_DEF_MAP_URL,
                                                              value=signatures.SerializeToString()))
        return response


class ModelService:
    """tensorflow.serving.ModelService over the model manager. A reload replaces the models of the
    model config file (or, with none, of the previous reload); the repository's own models stay."""

    def __init__(self, manager: ModelManager, *, reload_timeout_s: float):
        self.manager = manager
        self.reload_timeout_s = reload_timeout_s

    @rpc
    async def GetModelStatus(self, request: get_model_status_pb2.GetModelStatusRequest,
                             context: grpc.aio.ServicerContext) -> get_model_status_pb2.GetModelStatusResponse:
        if not request.HasField("model_spec"):
            raise BadRequest("Missing ModelSpec")
        name, version, label = _model_spec(request.model_spec)
        document = documents.model_status(self.manager, name, version, label)
        return json_format.ParseDict(document, get_model_status_pb2.GetModelStatusResponse())

    async def HandleReloadConfigRequest(self, request: model_management_pb2.ReloadConfigRequest,
                                        context: grpc.aio.ServicerContext) -> model_management_pb2.ReloadConfigResponse:
        # Not @rpc: TensorFlow Serving answers with the status in the response as well as in the call's.
        response = model_management_pb2.ReloadConfigResponse()
        code, message = grpc.StatusCode.OK, ""
        try:
            await self._reload(request, deadline_s(context))
        except Exception as e:  # noqa: BLE001 - reported in the response and the call's status
            code, message = grpc_status(e)
        response.status.error_code = code.value[0]
        response.status.error_message = message
        if code is not grpc.StatusCode.OK:
            context.set_code(code)
            context.set_details(message)
        return response

    async def _reload(self, request: model_management_pb2.ReloadConfigRequest, timeout_s: float | None) -> None:
        config = request.config
        kind = config.WhichOneof("config")
        if kind is None:
            return  # TensorFlow Serving takes no action for an empty config
        if kind != "model_config_list":
            raise BadRequest("ServerModelConfig type not supported by HandleReloadConfigRequest. Only ModelConfigList "
                             "is currently supported")
        models = models_of_server_config(config, "HandleReloadConfigRequest", config_base_dir(self.manager))
        timeout = self.reload_timeout_s if timeout_s is None else min(timeout_s, self.reload_timeout_s)
        await asyncio.to_thread(reload_server_config, self.manager, models, timeout)
