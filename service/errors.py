"""Service errors, and the one table that maps every error the server can raise to an HTTP status
(and from it, for the gRPC services, to a gRPC status code).

Routes never choose status codes themselves: they raise a `ServiceError` subclass (or let an engine
error through) and `status_of` decides. Client mistakes are always 4xx with a message naming the
problem; only a fault of ours is a 500.
"""

from __future__ import annotations

from engine import errors as engine_errors

__all__ = [
    "ServiceError",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "PayloadTooLarge",
    "TooManyRequests",
    "Unavailable",
    "DeadlineExceeded",
    "status_of",
    "grpc_code_of",
    "out_of_memory_message",
]


class ServiceError(Exception):
    """An error with a message meant for the client; `status` is its HTTP status code."""

    status = 500

    def __init__(self, message: str, headers: dict[str, str] | None = None):
        self.message = message
        self.headers = headers  # extra response headers, e.g. Retry-After
        super().__init__(message)


class BadRequest(ServiceError):
    """Malformed JSON or binary framing, a tensor whose data does not match its shape or datatype."""

    status = 400


class Unauthorized(ServiceError):
    """No bearer token, or a wrong one."""

    status = 401


class Forbidden(ServiceError):
    """Management without an admin token while the server listens beyond loopback."""

    status = 403


class NotFound(ServiceError):
    """An unknown model, version, label, signature or tensor."""

    status = 404


class Conflict(ServiceError):
    """The request contradicts the repository's state (a version that already exists, a label in use)."""

    status = 409


class PayloadTooLarge(ServiceError):
    """A request body over the configured limit."""

    status = 413


class TooManyRequests(ServiceError):
    """A bounded resource is exhausted (every partial-run handle of a version is open); retry later."""

    status = 429


class Unavailable(ServiceError):
    """The model exists but no version of it is ready (still loading, or failed to load)."""

    status = 503


class DeadlineExceeded(ServiceError):
    """The request ran past its timeout."""

    status = 504


# Engine errors, most specific first: the first matching class decides the status.
_ENGINE_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (engine_errors.UnknownTensorError, 404),
    (engine_errors.PartialRunNotFoundError, 404),  # unknown, finished, closed or expired handles
    (engine_errors.PartialRunLimitError, 429),
    # Other PartialRunErrors (a feed not declared or fed twice, a fetch not computable yet) are
    # RequestErrors: 400. DeadTensorError and LoopLimitError are ExecutionErrors: 400.
    (engine_errors.RequestError, 400),  # unfed placeholders, feed dtype/shape mismatches
    (engine_errors.GraphError, 400),  # an uploaded graph that cannot be served
    # A kernel refused to allocate past the per-request memory budget: the request is too large.
    (engine_errors.ResourceLimitError, 413),
    # The machine ran out of memory (not the request's fault, and perhaps passing): retry later.
    (engine_errors.OutOfMemoryError, 503),
    # A kernel failing on the data a client sent (shapes a graph cannot take) is the client's
    # INVALID_ARGUMENT in TensorFlow too.
    (engine_errors.ExecutionError, 400),
    # A MemoryError outside any kernel (decoding, encoding): as OutOfMemoryError.
    (MemoryError, 503),
)


def status_of(error: Exception) -> int:
    """The HTTP status for any exception; 500 only for faults of the server."""
    if isinstance(error, ServiceError):
        return error.status
    for cls, status in _ENGINE_STATUS:
        if isinstance(error, cls):
            return status
    return 500


def out_of_memory_message(during: str) -> str:
    """The message a bare MemoryError (one outside any kernel) is answered with; `during` says what the
    server was doing ("handling POST /v2/models/m/infer")."""
    return (f"out of memory while {during}: the server could not allocate what this request needs; retry "
            "later or send a smaller request")


# HTTP status -> the gRPC status code of the same meaning, by gRPC's name for it (the gRPC transport
# turns names into grpc.StatusCode; this module stays free of transports).
_GRPC_CODES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "FAILED_PRECONDITION",
    413: "RESOURCE_EXHAUSTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def grpc_code_of(error: Exception) -> str:
    """The gRPC status code name for any exception (`status_of`'s status, translated); INTERNAL only
    for faults of the server."""
    status = status_of(error)
    return _GRPC_CODES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
