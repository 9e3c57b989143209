"""Request bodies: the size limits (413 beyond them) and Content-Encoding, applied before any parsing.

Inference and most other requests are held to `TENSORGATE_MAX_REQUEST_BYTES`; the two upload routes
(the version upload and the v2 repository `load`) to `TENSORGATE_MAX_UPLOAD_BYTES` instead. A limit
is enforced twice: up front from Content-Length, and while streaming (a chunked body has no length,
and a length is only a claim); a compressed body is limited again after decompression, so a small
gzip bomb cannot expand past it. `read_body` holds a body in memory; `save_body` streams one to a
file (a version upload, which may be gigabytes).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BadRequest, PayloadTooLarge
from service.protocols.codecs import fastjson

__all__ = [
    "BodyLimit",
    "BodyLimitMiddleware",
    "request_limit",
    "upload_limit",
    "read_body",
    "save_body",
    "parse_json",
    "wait_for_disconnect",
]

_WRITE_BATCH = 1024 * 1024  # bytes gathered from the socket before one write to disk (off the event loop)
_DECOMPRESS_CHUNK = 1024 * 1024  # most decompressed bytes produced at a time: a bomb never sits in memory whole


@dataclass(frozen=True)
class BodyLimit:
    """The most bytes a body may hold (after decompression), and the setting that says so.

        >>> BodyLimit(64 * 1024 * 1024, "TENSORGATE_MAX_REQUEST_BYTES").too_large(10**9).message
        'request body of 1000000000 bytes exceeds the limit of 67108864 bytes (TENSORGATE_MAX_REQUEST_BYTES)'
    """

    max_bytes: int
    setting: str

    def message(self, size: int | None = None) -> str:
        got = f"of {size} bytes " if size is not None else ""
        return f"request body {got}exceeds the limit of {self.max_bytes} bytes ({self.setting})"

    def too_large(self, size: int | None = None) -> PayloadTooLarge:
        return PayloadTooLarge(self.message(size))


def request_limit(settings) -> BodyLimit:
    """The limit `settings` (a service.settings.Settings) put on ordinary bodies (inference, labels, ...)."""
    return BodyLimit(settings.max_request_bytes, "TENSORGATE_MAX_REQUEST_BYTES")


def upload_limit(settings) -> BodyLimit:
    """The limit `settings` put on upload bodies (a version upload, the v2 repository `load`)."""
    return BodyLimit(settings.max_upload_bytes, "TENSORGATE_MAX_UPLOAD_BYTES")


class BodyLimitMiddleware:
    """ASGI middleware answering 413 for bodies over `limit`, or over `upload_limit` on the routes
    `upload_routes` names as (method, path template) pairs:

        >>> app.add_middleware(BodyLimitMiddleware, limit=BodyLimit(...), upload_limit=BodyLimit(...),
        ...                    upload_routes=[("PUT", "/v1/models/{model}/versions/{version}")])
    """

    def __init__(self, app: ASGIApp, limit: BodyLimit, upload_limit: BodyLimit,
                 upload_routes: Collection[tuple[str, str]] = ()):
        self.app = app
        self.limit = limit
        self.upload_limit = upload_limit
        self.upload_routes: list[tuple[str, re.Pattern]] = [(method, compile_path(path)[0]) for method, path in upload_routes]

    def limit_for(self, scope: Scope) -> BodyLimit:
        for method, path in self.upload_routes:
            if scope["method"] == method and path.match(scope["path"]):
                return self.upload_limit
        return self.limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit.max_bytes:
            body = json.dumps({"error": limit.message(int(length))}).encode()
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
                if received > limit.max_bytes:
                    raise limit.too_large()
            return message

        await self.app(scope, limited, send)


def _content_encoding(request: Request) -> str | None:
    """"gzip" or "deflate", or None for an uncompressed body; BadRequest for anything else."""
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding in ("", "identity"):
        return None
    if encoding not in ("gzip", "deflate"):
        raise BadRequest(f"unsupported Content-Encoding '{encoding}': use gzip, deflate or none")
    return encoding


def _decompressor(encoding: str):
    return zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)


async def read_body(request: Request, limit: BodyLimit | None = None) -> bytes:
    """The body, in memory, decompressed when Content-Encoding says gzip or deflate (as tritonclient
    sends); `limit` (the request limit unless given) bounds the decompressed size."""
    body = await request.body()
    encoding = _content_encoding(request)
    if encoding is None:
        return body
    limit = limit or request_limit(request.app.state.settings)
    decompressor = _decompressor(encoding)
    try:
        data = decompressor.decompress(body, limit.max_bytes + 1)
    except zlib.error as e:
        raise BadRequest(f"request body is not valid {encoding} data: {e}") from None
    if len(data) > limit.max_bytes or decompressor.unconsumed_tail:
        raise limit.too_large()
    return data


class _BodyWriter:
    """Writes a body to a file as it arrives, decompressing it and counting the bytes written."""

    def __init__(self, file: BinaryIO, encoding: str | None, limit: BodyLimit):
        self.file, self.encoding, self.limit = file, encoding, limit
        self.decompressor = _decompressor(encoding) if encoding else None
        self.size = 0

    def write(self, data: bytes) -> None:
        if self.decompressor is None:
            self._append(data)
            return
        try:
            while data:
                self._append(self.decompressor.decompress(data, _DECOMPRESS_CHUNK))
                data = self.decompressor.unconsumed_tail
        except zlib.error as e:
            raise BadRequest(f"request body is not valid {self.encoding} data: {e}") from None

    def finish(self) -> int:
        if self.decompressor is not None and not self.decompressor.eof:
            raise BadRequest(f"request body is not valid {self.encoding} data: it ends before the compressed stream does")
        self.file.flush()
        return self.size

    def _append(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit.max_bytes:
            raise self.limit.too_large()
        self.file.write(data)


async def save_body(request: Request, path: Path, limit: BodyLimit) -> int:
    """Stream the body into a new file at `path`, decompressed when Content-Encoding says gzip or
    deflate, and return its size. Raises PayloadTooLarge past `limit` (counted as bytes arrive), and
    BadRequest when the client goes away first. On any error the file may hold part of the body:
    removing it is the caller's (it chose where the file goes). Disk writes run off the event loop."""
    encoding = _content_encoding(request)
    file = await run_in_threadpool(open, path, "xb")
    try:
        writer = _BodyWriter(file, encoding, limit)
        pending = bytearray()
        try:
            async for chunk in request.stream():
                pending += chunk
                if len(pending) >= _WRITE_BATCH:
                    await run_in_threadpool(writer.write, bytes(pending))
                    pending.clear()
        except ClientDisconnect:
            raise BadRequest("the client disconnected before the whole body arrived; nothing was written") from None
        await run_in_threadpool(writer.write, bytes(pending))
        return await run_in_threadpool(writer.finish)
    finally:
        await run_in_threadpool(file.close)


def parse_json(body: bytes) -> Any:
    """A JSON body (NaN and Infinity allowed, as TensorFlow Serving allows them); BadRequest otherwise."""
    try:
        return fastjson.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"malformed JSON body: {e}") from None


async def wait_for_disconnect(request: Request) -> None:
    """Completes when the client goes away; call it once the body has been read, when a disconnect
    is the only message left to receive."""
    while (await request.receive())["type"] != "http.disconnect":
        pass

