"""`tensorgate score`'s JSON lines are written a batch at a time: each line must still be exactly what
json.dumps({alias: row, ...}, ensure_ascii=False) writes for its record, whatever the outputs hold (floats
with NaN and infinities, integers, nested rows, UTF-8 and binary strings, several outputs)."""

from __future__ import annotations

import base64
import io
import json

import numpy as np

from service.inference.scoring import load_for_scoring, score
from service.repository.tfrecord import write_records
from tests.engine.graphs import GraphBuilder

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


def strings_model(root):
    """Outputs of many kinds from a string vector: the strings, their lengths (int32), length / 0 (inf, or
    NaN for an empty string), [length, -length] rows and a float32 third of the length."""
    g = GraphBuilder()
    g.placeholder("examples", object, [None])
    g.node("text", "Identity", ["examples"], T=np.dtype(object))
    g.node("length", "StringLength", ["examples"], unit="BYTE")
    g.node("as_float", "Cast", ["length"], SrcT=I32, DstT=F32, Truncate=False)
    g.const("zero", np.float32(0))
    g.const("three", np.float32(3))
    g.node("ratio", "RealDiv", ["as_float", "zero"], T=F32)
    g.node("third", "RealDiv", ["as_float", "three"], T=F32)
    g.node("negative", "Neg", ["as_float"], T=F32)
    g.node("pair", "Pack", ["as_float", "negative"], T=F32, N=2, axis=1)
    g.node("bytes", "Identity", ["length"], T=I32)
    version = root / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.pb").write_bytes(g.bytes())
    return version


def _json_row(value):
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else value


def test_json_lines_are_what_json_dumps_writes(tmp_path):
    records = [b"", b"abc", "d\u00e9j\u00e0 vu \u65e5\u672c".encode(), b"\xff\xfe", b'q"uote\\', b"\x00\x1f\n",
               b"x" * 7]
    write_records(tmp_path / "in.tfrecord", records)
    servable = load_for_scoring(strings_model(tmp_path))
    out = tmp_path / "out.jsonl"
    stats = score(servable, [tmp_path / "in.tfrecord"], out, batch_size=3, progress=io.StringIO())
    assert stats.records == len(records)

    signature = servable.signature(None)
    aliases = [spec.alias for spec in signature.outputs]
    assert {"text", "bytes", "ratio", "third", "pair"} <= set(aliases)
    feed = np.empty(len(records), object)
    feed[:] = records
    values = servable.run({signature.inputs[0].tensor: feed}, [spec.tensor for spec in signature.outputs])
    want = "".join(json.dumps({a: _json_row(v[i]) for a, v in zip(aliases, values)}, ensure_ascii=False) + "\n"
                   for i in range(len(records)))
    assert out.read_text(encoding="utf-8") == want
    assert '"ratio": NaN' in want and '"ratio": Infinity' in want  # json's words for them, kept
