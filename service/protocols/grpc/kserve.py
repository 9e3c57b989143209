"""KServe v2's gRPC service, `inference.GRPCInferenceService`, with Triton's extensions that
`tritonclient.grpc` calls: health, server and model metadata, ModelInfer and ModelStreamInfer, model
config, the repository index, load and unload. Handlers parse and delegate; the documents come from
`service.protocols.open_inference` (the same as REST's), the tensors from `codecs.v2_grpc`.

In a ModelStreamInfer stream, requests run concurrently and each response is written when it is ready
(tritonclient matches them by `id`); a failed request answers with `error_message` and the stream
goes on, as in Triton.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import grpc
from google.protobuf import json_format

from service.errors import BadRequest
from service.inference.dataplane import DataPlane
from service.inference.response_limit import BINARY, PROTO_FIELDS
from service.observability.payload_log import ProtoBody
from service.protocols import open_inference as oip
from service.protocols.codecs import v2_grpc
from service.protocols.grpc.rpc import deadline_s, grpc_status, parse_message, parse_version, rpc
from service.protocols.grpc.services import INFERENCE_SERVICE
from service.protocols.proto import grpc_service_pb2 as pb
from service.protocols.proto import model_config_pb2
from service.repository.archive import ArchiveLimits
from service.repository.management import RepositoryManagement

__all__ = ["InferenceService", "RAW_METHODS"]

RAW_METHODS = ("ModelInfer", "ModelStreamInfer")
# Most ModelStreamInfer requests of one stream running at once; the stream reads no further meanwhile.
_STREAM_CONCURRENCY = 64
_MODEL_INFER = f"/{INFERENCE_SERVICE}/ModelInfer"  # the payload log's endpoint (streamed requests too)



async def _off_loop_if_loading(manager, name: str, version: str, read):
    """read(manager, name, version) on a thread when it would wait for a parked version's load (lazy loading,
    evicted), on the event loop otherwise."""
    number = parse_version(version)
    if manager.needs_load(name, number):
        return await asyncio.to_thread(read, manager, name, number)
    return read(manager, name, number)

class InferenceService:
    """inference.GRPCInferenceService over a data plane and the repository's management."""

    def __init__(self, plane: DataPlane, management: RepositoryManagement, archive_limits: ArchiveLimits):
        self.plane = plane
        self.manager = plane.manager
        self.management = management
        self.archive_limits = archive_limits

    # --- health and metadata -----------------------------------------------------------------------

    @rpc
    async def ServerLive(self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @rpc
    async def ServerReady(self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.plane.ready())

    @rpc
    async def ModelReady(self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=oip.model_ready(self.manager, request.name, parse_version(request.version)))

    @rpc
    async def ServerMetadata(self, request: pb.ServerMetadataRequest,
                             context: grpc.aio.ServicerContext) -> pb.ServerMetadataResponse:
        return json_format.ParseDict(oip.server_metadata(), pb.ServerMetadataResponse())

    @rpc
    async def ModelMetadata(self, request: pb.ModelMetadataRequest,
                            context: grpc.aio.ServicerContext) -> pb.ModelMetadataResponse:
        document = await _off_loop_if_loading(self.manager, request.name, request.version, oip.model_metadata)
        return json_format.ParseDict(document, pb.ModelMetadataResponse())

    @rpc
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: grpc.aio.ServicerContext) -> pb.ModelConfigResponse:
        document = await _off_loop_if_loading(self.manager, request.name, request.version, oip.model_config)
        return pb.ModelConfigResponse(config=json_format.ParseDict(document, model_config_pb2.ModelConfig()))

    @rpc
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest,
                              context: grpc.aio.ServicerContext) -> pb.ModelStatisticsResponse:
        document = oip.statistics(self.plane, request.name or None, parse_version(request.version))
        return json_format.ParseDict(document, pb.ModelStatisticsResponse())

    # --- infer -------------------------------------------------------------------------------------

    async def _infer(self, raw: bytes, deadline: float | None) -> bytes:
        plane = self.plane
        message = await plane.maybe_call(len(raw), parse_message, pb.ModelInferRequest, raw)
        model = message.model_name
        if not model:
            raise BadRequest("the request names no model (model_name is empty)")
        async with plane.observe("grpc", model, _MODEL_INFER) as obs:
            if obs.payload is not None:  # the payload log samples this request
                obs.log_request(ProtoBody(message), message.id or None)
            with obs.phase("decode"):
                decoded = await plane.maybe_call(len(raw), v2_grpc.decode_infer_request, message)
            result = await oip.infer(plane, model, parse_version(message.model_version), decoded, obs, deadline_s=deadline)
            outputs = oip.output_tensors(decoded, result, binary_default=True)
            plane.response_limit.check_outputs((name, array, BINARY if binary else PROTO_FIELDS)
                                               for name, array, binary in outputs)
            size = sum(array.nbytes for _, array, _ in outputs)
            with obs.phase("encode"):
                reply = await plane.maybe_call(size, v2_grpc.encode_infer_response, model, str(result.version),
                                               decoded.id, outputs)
            if obs.payload is not None:
                obs.log_response(ProtoBody(reply, pb.ModelInferResponse))
            return reply

    @rpc
    async def ModelInfer(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return await self._infer(raw, deadline_s(context))

    async def ModelStreamInfer(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        slots = asyncio.Semaphore(_STREAM_CONCURRENCY)
        writing = asyncio.Lock()
        running: set[asyncio.Task] = set()

        async def answer(raw: bytes) -> None:
            try:
                try:
                    response = pb.ModelStreamInferResponse(
                        infer_response=pb.ModelInferResponse.FromString(await self._infer(raw, deadline_s(context))))
                except Exception as e:  # noqa: BLE001 - reported in the stream, which goes on
                    response = pb.ModelStreamInferResponse(error_message=grpc_status(e)[1])
                    response.infer_response.id = _request_id(raw)
                async with writing:
                    await context.write(response.SerializeToString())
            finally:
                slots.release()

        try:
            async for raw in requests:
                await slots.acquire()
                task = asyncio.create_task(answer(raw))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.gather(*running)
        finally:
            for task in running:
                task.cancel()

    # --- repository --------------------------------------------------------------------------------

    @rpc
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest,
                              context: grpc.aio.ServicerContext) -> pb.RepositoryIndexResponse:
        rows = oip.index_rows(self.manager, ready_only=request.ready)
        return json_format.ParseDict({"models": rows}, pb.RepositoryIndexResponse())

    @rpc
    async def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest,
                                  context: grpc.aio.ServicerContext) -> pb.RepositoryModelLoadResponse:
        config, files = None, {}
        for key, parameter in request.parameters.items():
            choice = parameter.WhichOneof("parameter_choice")
            if key == "config":
                if choice != "string_param":
                    raise BadRequest("the 'config' parameter must be a string (the model's config.yaml, or JSON)")
                config = parameter.string_param
            elif key.startswith("file:"):
                if choice == "bytes_param":
                    files[key[len("file:"):]] = parameter.bytes_param
                elif choice == "string_param":  # base64, as over HTTP
                    try:
                        files[key[len("file:"):]] = base64.b64decode(parameter.string_param, validate=True)
                    except ValueError:
                        raise BadRequest(f"parameter '{key}' is not valid base64") from None
                else:
                    raise BadRequest(f"parameter '{key}' must be bytes (bytes_param)")
        await asyncio.to_thread(self.management.load_model, request.model_name, config, files,
                                archive_limits=self.archive_limits)
        return pb.RepositoryModelLoadResponse()

    @rpc
    async def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest,
                                    context: grpc.aio.ServicerContext) -> pb.RepositoryModelUnloadResponse:
        await asyncio.to_thread(self.management.unload_model, request.model_name)
        return pb.RepositoryModelUnloadResponse()


def _request_id(raw: bytes) -> str:
    """The id of a stream request that failed, so that the client can match the error to it."""
    try:
        return pb.ModelInferRequest.FromString(raw).id
    except Exception:  # noqa: BLE001 - a request that does not even parse has no id to give
        return ""
