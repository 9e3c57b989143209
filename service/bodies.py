"""Request bodies: the size limit (413 beyond it) and Content-Encoding, applied before any parsing.

The limit is enforced twice: up front from Content-Length, and while streaming (a chunked body has
no length); a compressed body is limited again after decompression, so a small gzip bomb cannot
expand past it.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BadRequest, PayloadTooLarge

__all__ = ["BodyLimitMiddleware", "read_body", "parse_json", "wait_for_disconnect", "json_body_doc"]


def _too_large(limit: int, size: int | None = None) -> str:
    got = f"of {size} bytes " if size is not None else ""
    return f"request body {got}exceeds the limit of {limit} bytes (TENSORGATE_MAX_REQUEST_BYTES)"


class BodyLimitMiddleware:
    """ASGI middleware answering 413 for bodies over `max_bytes`."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            body = json.dumps({"error": _too_large(self.max_bytes, int(length))}).encode()
            await send({"type": "http.response.start", "status": 413,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                    (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise PayloadTooLarge(_too_large(self.max_bytes))
            return message

        await self.app(scope, limited, send)


async def read_body(request: Request) -> bytes:
    """The body, decompressed when Content-Encoding says gzip or deflate (as tritonclient sends)."""
    body = await request.body()
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise BadRequest(f"unsupported Content-Encoding '{encoding}': use gzip, deflate or none")
    limit = request.app.state.settings.max_request_bytes
    decompressor = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as e:
        raise BadRequest(f"request body is not valid {encoding} data: {e}") from None
    if len(data) > limit or decompressor.unconsumed_tail:
        raise PayloadTooLarge(_too_large(limit))
    return data


def parse_json(body: bytes) -> Any:
    """A JSON body (NaN and Infinity allowed, as TensorFlow Serving allows them); BadRequest otherwise."""
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"malformed JSON body: {e}") from None


async def wait_for_disconnect(request: Request) -> None:
    """Completes when the client goes away; call it once the body has been read, when a disconnect
    is the only message left to receive."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def json_body_doc(properties: dict[str, Any], example: Any) -> dict[str, Any]:
    """OpenAPI `openapi_extra` documenting a JSON object body: routes read their bodies themselves
    (size limits, gzip), so FastAPI cannot infer the schema from a parameter."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"type": "object", "properties": properties}, "example": example}
            },
        }
    }
