"""The gRPC services the server speaks, under the names their clients call: our schema copies (package
`tensorgate.serving`, `tensorgate.inference`) define the messages and the services' methods; the
services are served as `tensorflow.serving.PredictionService`, `tensorflow.serving.ModelService` and
`inference.GRPCInferenceService`, because a gRPC method's path (`/tensorflow.serving.PredictionService/
Predict`) is its service's full name. Messages travel as bytes, so their package never shows on the wire.

Server reflection answers from a descriptor pool of its own holding the schemas under the real names
(`tensorflow.serving.PredictRequest`), so that `grpcurl` describes and encodes messages as TensorFlow
Serving's and Triton's; the default pool keeps our names, which lets tensorflow-serving-api and
tritonclient share a process with the server.

    >>> stub = Stub(grpc.insecure_channel("127.0.0.1:8001"), PREDICTION_SERVICE)
    >>> stub.Predict(predict_pb2.PredictRequest(...), timeout=5)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FileDescriptor, MethodDescriptor, ServiceDescriptor

from service.protocols.proto import grpc_service_pb2, model_service_pb2, prediction_service_pb2

__all__ = [
    "PREDICTION_SERVICE",
    "MODEL_SERVICE",
    "INFERENCE_SERVICE",
    "SERVICES",
    "served_name",
    "generic_handler",
    "reflection_pool",
    "Stub",
]

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
INFERENCE_SERVICE = "inference.GRPCInferenceService"

# Served name -> the service as our schema copy defines it.
SERVICES: dict[str, ServiceDescriptor] = {
    PREDICTION_SERVICE: prediction_service_pb2.DESCRIPTOR.services_by_name["PredictionService"],
    MODEL_SERVICE: model_service_pb2.DESCRIPTOR.services_by_name["ModelService"],
    INFERENCE_SERVICE: grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"],
}

# Our packages -> the real ones, longest first (a prefix of a name must not catch a longer package).
_REAL_PACKAGES = (
    ("tensorgate.inference", "inference"),
    ("tensorgate.serving", "tensorflow.serving"),
    ("tensorgate.error", "tensorflow.error"),
    ("tensorgate", "tensorflow"),
)


def served_name(name: str) -> str:
    """A full name of ours (`tensorgate.serving.PredictRequest`) under its real package."""
    for ours, real in _REAL_PACKAGES:
        if name == ours or name.startswith(ours + "."):
            return real + name[len(ours):]
    return name


def _method_class(method: MethodDescriptor, side: str) -> type:
    return message_factory.GetMessageClass(method.input_type if side == "input" else method.output_type)


def generic_handler(service: str, implementation: Any, raw: Iterable[str] = (), tracing: Any = None
                    ) -> grpc.GenericRpcHandler:
    """The handler of `service` (a served name) over `implementation`, whose coroutine methods are named
    as the RPCs (methods it lacks answer UNIMPLEMENTED). Methods named in `raw` take and return
    serialized messages, so that big ones are parsed and serialized off the event loop. With `tracing`
    (service.observability.tracing.Tracing), every call runs under a server span."""
    raw = set(raw)
    handlers = {}
    for method in SERVICES[service].methods:
        behaviour = getattr(implementation, method.name, None)
        if behaviour is None:
            continue
        if tracing is not None:
            behaviour = tracing.grpc(service, method.name, behaviour)
        as_bytes = method.name in raw
        options = dict(
            request_deserializer=None if as_bytes else _method_class(method, "input").FromString,
            response_serializer=None if as_bytes else _method_class(method, "output").SerializeToString,
        )
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(behaviour, **options)
        elif not method.client_streaming and not method.server_streaming:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(behaviour, **options)
        else:  # none of the served services has one-sided streams
            raise ValueError(f"{service}/{method.name}: one-sided streaming is not supported")
    return grpc.method_handlers_generic_handler(service, handlers)


# --- reflection ----------------------------------------------------------------------------------


def _rename_types(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for message in messages:
        for field in list(message.field) + list(message.extension):
            if field.type_name:
                field.type_name = "." + served_name(field.type_name[1:])
        _rename_types(message.nested_type)


def _served_file(file: FileDescriptor) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    proto.package = served_name(proto.package)
    _rename_types(proto.message_type)
    for service in proto.service:
        for method in service.method:
            method.input_type = "." + served_name(method.input_type[1:])
            method.output_type = "." + served_name(method.output_type[1:])
    return proto


def reflection_pool(extra: Iterable[FileDescriptor] = ()) -> descriptor_pool.DescriptorPool:
    """A descriptor pool of the served services and every message they use, under the real names,
    plus `extra` files (health, reflection) as they are."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: FileDescriptor, rename: bool) -> None:
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency, rename and not dependency.name.startswith("google/protobuf/"))
        pool.Add(_served_file(file) if rename else _copy(file))
        added.add(file.name)

    for service in SERVICES.values():
        add(service.file, True)
    for file in extra:
        add(file, False)
    return pool


def _copy(file: FileDescriptor) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto


# --- clients -------------------------------------------------------------------------------------


class Stub:
    """A client of one served service over our message classes, with a callable per RPC.

        >>> stub = Stub(channel, MODEL_SERVICE)
        >>> stub.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(...), metadata=[...])
    """

    def __init__(self, channel: grpc.Channel | grpc.aio.Channel, service: str):
        for method in SERVICES[service].methods:
            path = f"/{service}/{method.name}"
            options = dict(request_serializer=_method_class(method, "input").SerializeToString,
                           response_deserializer=_method_class(method, "output").FromString)
            if method.client_streaming:
                call: Callable = channel.stream_stream(path, **options)
            else:
                call = channel.unary_unary(path, **options)
            setattr(self, method.name, call)

