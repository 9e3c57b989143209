"""Payload logging: inference requests and their responses as CloudEvents, KServe's logger format, sent to
an HTTP sink or written to a file of JSON lines, off the request path.

    >>> logger = PayloadLogger(url="http://sink:8080/", mode="all", sample_rate=0.1)
    >>> logger.sampled()          # decided once per request, at its start
    >>> logger.emit(record)       # at its end: returns at once, the events wait in a bounded queue

A request gives two events with the same `id` (a request's id from its body when it has one, else a new
UUID): `org.kubeflow.serving.inference.request` and `...response` (only the first or the second with
mode `request` or `response`). Over HTTP they travel in CloudEvents' binary content mode, as KServe's
logger sends them: `ce-specversion`, `ce-id`, `ce-type`, `ce-source`, `ce-time` and the extension
attributes `ce-inferenceservicename` (the model, KServe's name for it), `ce-model`, `ce-modelversion`,
`ce-signature`, `ce-protocol`, `ce-endpoint` (and `ce-namespace` from POD_NAMESPACE), the body being the
event's data with its Content-Type. In a file each line is the event in CloudEvents' JSON format.

The data is JSON: a JSON body as it came (or as it was answered); a body with binary tensors (the Open
Inference Protocol's binary extension, gRPC messages) as JSON with those tensors' bytes base64-encoded
(`data_base64` beside each binary tensor; gRPC messages in protobuf's JSON mapping, where bytes are base64).

A slow or dead sink never holds up a request: events wait in a queue of `queue_size`; a full queue drops the
new event, a failed send drops it too, and both are counted (`tensorgate_payload_log_events_total{outcome}`:
sent, queue_full, sink_error, sink_down); a request never waits and never fails because of its log. After a
failed send the sink is left alone for a while (1 s, doubling to 30 s while it keeps failing): requests in that
time are not sampled at all and their events counted as `sink_down`, so a dead sink costs requests nothing
(not even the events' making) and the logger's thread no CPU.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import queue
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

__all__ = ["PayloadLogger", "PayloadRecord", "JsonBody", "V2BinaryBody", "ProtoBody", "MODES"]

log = logging.getLogger("tensorgate.payload_log")

MODES = ("request", "response", "all")
REQUEST_TYPE = "org.kubeflow.serving.inference.request"
RESPONSE_TYPE = "org.kubeflow.serving.inference.response"


# --- what a route hands over (cheap to make: the conversion to JSON happens on the logger's thread) --------

@dataclass(frozen=True)
class JsonBody:
    """A JSON body, as bytes."""

    data: bytes


@dataclass(frozen=True)
class V2BinaryBody:
    """An Open Inference Protocol body with the binary extension: a JSON header of `header_length` bytes,
    then the binary tensors' bytes in order (header_length 0: a raw request, the body one input's bytes)."""

    data: bytes
    header_length: int


@dataclass(frozen=True)
class ProtoBody:
    """A gRPC message, or its serialized bytes and class."""

    message: Message | bytes
    cls: type[Message] | None = None


Body = JsonBody | V2BinaryBody | ProtoBody


@dataclass
class PayloadRecord:
    """One sampled request's payloads and what names it, filled in as the request goes."""

    protocol: str
    endpoint: str
    model: str
    id: str | None = None
    version: str = ""
    signature: str = ""
    request: Body | None = None
    response: Body | None = None
    time: float = field(default_factory=time.time)


def _json_data(body: Body, checked: bool = False) -> bytes:
    """The event's data: JSON, binary tensors base64-encoded. With `checked`, a JSON body that is not JSON after
    all (a bad request's) becomes `{"data_base64": ...}` (a file's line must be JSON; an HTTP sink gets it as is)."""
    if isinstance(body, JsonBody):
        if not checked:
            return body.data
        try:
            orjson.loads(body.data)
            return body.data
        except orjson.JSONDecodeError:
            return orjson.dumps({"data_base64": base64.b64encode(body.data).decode()})
    if isinstance(body, ProtoBody):
        message = body.message if isinstance(body.message, Message) else body.cls.FromString(body.message)
        return json_format.MessageToJson(message, indent=None).encode()
    return _v2_binary_json(body)


def _v2_binary_json(body: V2BinaryBody) -> bytes:
    if body.header_length == 0:
        return orjson.dumps({"inputs": [{"data_base64": base64.b64encode(body.data).decode()}]})
    header = orjson.loads(body.data[:body.header_length])
    offset = body.header_length
    for tensor in header.get("inputs", []) + header.get("outputs", []):
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if isinstance(size, int) and size >= 0:
            tensor["data_base64"] = base64.b64encode(body.data[offset:offset + size]).decode()
            offset += size
    return orjson.dumps(header)


class PayloadLogger:
    """Samples requests and sends their events from a thread of its own through a bounded queue."""

    def __init__(self, *, url: str | None = None, path: Path | None = None, mode: str = "all", sample_rate: float = 1.0,
                 queue_size: int = 1000, timeout_s: float = 2.0, source: str | None = None,
                 on_outcome: Callable[[str], None] = lambda outcome: None):
        if (url is None) == (path is None):
            raise ValueError("a payload logger needs either a sink URL or a file, not both")
        if mode not in MODES:
            raise ValueError(f"payload log mode must be one of {', '.join(MODES)}, not '{mode}'")
        self.url, self.path, self.mode, self.sample_rate = url, path, mode, sample_rate
        self.timeout_s = timeout_s
        self.source = source or f"tensorgate/{socket.gethostname()}"
        self.namespace = os.environ.get("POD_NAMESPACE")
        self._on_outcome = on_outcome
        self._events_per_request = 2 if mode == "all" else 1
        self._down_until = 0.0  # after a failed send: the sink is left alone until then
        self._backoff_s = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._random = random.Random()
        self._thread = threading.Thread(target=self._run, name="payload-log", daemon=True)
        self._thread.start()

    def sampled(self) -> bool:
        """Whether to log this request (decided once, at its start): not while the sink is down."""
        if not (self.sample_rate >= 1.0 or self._random.random() < self.sample_rate):
            return False
        if self._down_until and time.monotonic() < self._down_until:
            for _ in range(self._events_per_request):
                self._on_outcome("sink_down")
            return False
        return True

    def emit(self, record: PayloadRecord) -> None:
        """Queue the record's events; never blocks (a full queue drops them, counted)."""
        events = []
        if record.request is not None and self.mode in ("request", "all"):
            events.append((REQUEST_TYPE, record.request))
        if record.response is not None and self.mode in ("response", "all"):
            events.append((RESPONSE_TYPE, record.response))
        if not events:
            return
        record.id = record.id or str(uuid.uuid4())
        for kind, body in events:
            try:
                self._queue.put_nowait((record, kind, body))
            except queue.Full:
                self._on_outcome("queue_full")

    def close(self, timeout_s: float = 3.0) -> None:
        """Send what is queued (up to `timeout_s`), then stop the thread."""
        deadline = time.monotonic() + timeout_s
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            self._queue.put(None, timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Full:
            return
        self._thread.join(max(deadline - time.monotonic(), 0.01))

    # --- the logger's thread -----------------------------------------------------------------------

    def _attributes(self, record: PayloadRecord, kind: str) -> dict[str, str]:
        attributes = {
            "specversion": "1.0", "id": record.id, "type": kind, "source": self.source,
            "time": datetime.datetime.fromtimestamp(record.time, datetime.UTC).isoformat().replace("+00:00", "Z"),
            "inferenceservicename": record.model, "model": record.model, "modelversion": record.version,
            "signature": record.signature, "protocol": record.protocol, "endpoint": record.endpoint,
        }
        if self.namespace:
            attributes["namespace"] = self.namespace
        return attributes

    def _run(self) -> None:
        client = httpx.Client(timeout=self.timeout_s) if self.url is not None else None
        file = open(self.path, "ab") if self.path is not None else None  # noqa: SIM115 - closed below
        warned = -60.0
        try:
            while (item := self._queue.get()) is not None:
                record, kind, body = item
                if self._down_until and time.monotonic() < self._down_until:
                    self._on_outcome("sink_down")  # queued before the sink failed: not tried again now
                    continue
                try:
                    data = _json_data(body, checked=file is not None)
                    attributes = self._attributes(record, kind)
                    if client is not None:
                        headers = {f"ce-{k}": v for k, v in attributes.items()}
                        response = client.post(self.url, content=data,
                                               headers={**headers, "content-type": "application/json"})
                        response.raise_for_status()
                    else:
                        event = orjson.dumps({**attributes, "datacontenttype": "application/json",
                                              "data": orjson.Fragment(data)})
                        file.write(event + b"\n")
                        if self._queue.empty():
                            file.flush()
                    self._on_outcome("sent")
                    self._down_until, self._backoff_s = 0.0, 0.0
                except Exception as e:  # noqa: BLE001 - a sink's failure drops the event, never the server
                    self._on_outcome("sink_error")
                    self._backoff_s = min(max(2 * self._backoff_s, 1.0), 30.0)
                    self._down_until = time.monotonic() + self._backoff_s
                    if time.monotonic() >= warned + 60:  # a dead sink: said once a minute, counted always
                        warned = time.monotonic()
                        log.warning("payload log: cannot send an event to %s (%r); dropping events while it fails",
                                    self.url or self.path, e)
        finally:
            if client is not None:
                client.close()
            if file is not None:
                file.close()

