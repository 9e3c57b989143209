"""What every RPC handler shares: errors leave as gRPC statuses from the one error table, the call's
deadline bounds the request, and serialized messages are parsed into typed errors.

    >>> class PredictionService:
    ...     @rpc
    ...     async def Predict(self, request, context): ...
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from engine.errors import EngineError, OutOfMemoryError
from service.errors import BadRequest, ServiceError, grpc_code_of, out_of_memory_message

__all__ = ["rpc", "grpc_status", "retry_pushback", "deadline_s", "parse_message", "parse_version"]

log = logging.getLogger("tensorgate.grpc")

M = TypeVar("M", bound=Message)


def grpc_status(error: Exception, method: str = "the call") -> tuple[grpc.StatusCode, str]:
    """The status code and message a failed call (of `method`) ends with."""
    code = grpc.StatusCode[grpc_code_of(error)]
    if isinstance(error, MemoryError):  # outside any kernel (those are OutOfMemoryError): UNAVAILABLE
        return code, out_of_memory_message(f"handling {method}")
    if isinstance(error, (ServiceError, EngineError)):
        return code, getattr(error, "message", None) or str(error)
    return code, f"internal error: {type(error).__name__}: {error}"


def retry_pushback(error: Exception) -> tuple[tuple[str, str], ...]:
    """An error's Retry-After as gRPC's retry pushback (`grpc-retry-pushback-ms` in the trailers, gRFC A6:
    the hint gRPC's retry policies read), so that a shed call says how long to wait as over HTTP."""
    retry_after = (getattr(error, "headers", None) or {}).get("Retry-After")
    if retry_after is None or not retry_after.isdigit():
        return ()
    return (("grpc-retry-pushback-ms", str(int(retry_after) * 1000)),)


def rpc(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A unary handler whose errors end the call with their status (UNKNOWN never reaches a client)."""

    @functools.wraps(handler)
    async def call(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(self, request, context)
        except Exception as e:  # noqa: BLE001 - every error becomes a status; CancelledError passes
            code, message = grpc_status(e, handler.__name__)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("unhandled error in %s", handler.__qualname__, exc_info=e)
            elif isinstance(e, (MemoryError, OutOfMemoryError)):
                log.warning("out of memory in %s: %r", handler.__qualname__, e)
            await context.abort(code, message, trailing_metadata=retry_pushback(e))

    return call


# Our own timeout ends a request this much before gRPC's deadline would cancel its handler, so that it
# is answered (and counted) as a timeout rather than as a call the client cancelled.
_DEADLINE_MARGIN_S = 0.01


def deadline_s(context: grpc.aio.ServicerContext) -> float | None:
    """Seconds left before the client's deadline (None: it set none); the request's timeout."""
    remaining = context.time_remaining()
    return None if remaining is None else max(remaining - _DEADLINE_MARGIN_S, 0.0)


def parse_message(cls: type[M], data: bytes) -> M:
    """A serialized request, parsed; BadRequest (INVALID_ARGUMENT) when the bytes are not one."""
    try:
        return cls.FromString(data)
    except DecodeError as e:
        raise BadRequest(f"the request is not a valid {cls.DESCRIPTOR.name}: {e}") from None


def parse_version(text: str) -> int | None:
    """A KServe version string: "" is the latest, anything else a positive integer."""
    if not text:
        return None
    if not text.isdigit() or int(text) <= 0:
        raise BadRequest(f"invalid version '{text}': versions are positive integers")
    return int(text)
