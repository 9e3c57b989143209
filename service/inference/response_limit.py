"""The response size limit: a response larger than `TENSORGATE_MAX_RESPONSE_BYTES` is refused (413)
before it is encoded, so that a result of gigabytes is never turned into an even larger JSON body.

The check before encoding uses a LOWER bound of the encoded size, so that a response which would fit
is never refused by the estimate: exact for binary tensors (the v2 binary extension, gRPC raw
contents), the fewest characters an element can take in JSON (`0`, plus a separator: 2; `0.0` or
`NaN`: 4; `true`: 5; a string: its bytes and two quotes and a separator), the fewest bytes in
protobuf's typed fields (a varint: 1). Where the encoding is not known yet (the data plane, before a
route picks one), the smallest of them. A JSON body is checked again once encoded, by its real size.

    limit = ResponseLimit(64 * 1024 * 1024)
    limit.check_outputs([("scores", np.zeros((30000, 30000), np.float32), JSON)])
    # PayloadTooLarge: response would take at least 3600000000 bytes (outputs 'scores' (3600000000 bytes)), ...
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.errors import PayloadTooLarge

__all__ = ["ResponseLimit", "lower_bound", "ANY", "BINARY", "JSON", "PROTO_FIELDS", "SETTING"]

SETTING = "TENSORGATE_MAX_RESPONSE_BYTES"

# Encodings, by how they write an element.
JSON = "json"  # JSON numbers, booleans and strings
BINARY = "binary"  # raw bytes: the v2 binary extension, gRPC raw_output_contents / tensor_content
PROTO_FIELDS = "proto_fields"  # protobuf's typed repeated fields (float_val, int64_contents, ...)
ANY = "any"  # not chosen yet: the smallest of the others

# The fewest bytes one element takes, by dtype kind (strings are their bytes plus the value here).
_JSON = {"b": 5, "i": 2, "u": 2, "f": 4, "c": 8}
_JSON_STRING = 3  # two quotes and a separator
_BINARY_STRING = 4  # the v2 binary extension's 4-byte length (gRPC's bytes fields take at least 2)
_PROTO_STRING = 2  # a field tag and a one-byte length
_PROTO_VARINT = 1  # ints and bools are varints; float16 goes as int32 varints too


def _string_bytes(value: np.ndarray) -> int:
    return sum(len(v) if isinstance(v, (bytes, str)) else 0 for v in value.reshape(-1).tolist())


def lower_bound(value: Any, encoding: str) -> int:
    """The fewest bytes `value` (an array, or a ragged/sparse value with `arrays()`) can take encoded
    as `encoding`."""
    if hasattr(value, "arrays"):
        return sum(lower_bound(part, encoding) for part in value.arrays())
    value = np.asarray(value)
    kind, count = value.dtype.kind, value.size
    if kind in "OSU":
        per = {JSON: _JSON_STRING, BINARY: _BINARY_STRING}.get(encoding, _PROTO_STRING)
        return count * per + _string_bytes(value)
    itemsize = value.dtype.itemsize
    if encoding == BINARY:
        return count * itemsize
    if encoding == JSON:
        return count * _JSON.get(kind, 2)
    fields = _PROTO_VARINT if kind in "biu" or itemsize < 4 else itemsize
    if encoding == PROTO_FIELDS:
        return count * fields
    return count * min(itemsize, fields, _JSON.get(kind, 2))  # ANY


@dataclass(frozen=True)
class ResponseLimit:
    """The most bytes a response may take (None: no limit), and the setting that says so."""

    max_bytes: int | None
    setting: str = SETTING

    def check_outputs(self, outputs: Iterable[tuple[str, Any, str]]) -> None:
        """PayloadTooLarge, naming the largest outputs, when the (name, value, encoding) outputs cannot
        fit in the limit however they are encoded."""
        if self.max_bytes is None:
            return
        sizes = [(name, lower_bound(value, encoding)) for name, value, encoding in outputs]
        total = sum(size for _, size in sizes)
        if total <= self.max_bytes:
            return
        largest = sorted(sizes, key=lambda item: -item[1])[:5]
        named = ", ".join(f"'{name}' ({size} bytes)" for name, size in largest)
        more = f" and {len(sizes) - 5} more" if len(sizes) > 5 else ""
        raise PayloadTooLarge(f"response would take at least {total} bytes (outputs {named}{more}), more than the "
                              f"limit of {self.max_bytes} bytes ({self.setting}); ask for fewer outputs or a "
                              "smaller batch")

    def check_encoded(self, size: int) -> None:
        """PayloadTooLarge when an encoded body of `size` bytes exceeds the limit."""
        if self.max_bytes is not None and size > self.max_bytes:
            raise PayloadTooLarge(f"response of {size} bytes is larger than the limit of {self.max_bytes} bytes "
                                  f"({self.setting}); ask for fewer outputs or a smaller batch")
