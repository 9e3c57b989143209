"""The SavedModel loader (engine.load_saved_model): a SavedModel TensorFlow wrote, with its
saved_model.pb (binary or text) or its variables index mutated, loads or raises a GraphError
(SavedModelError for what is wrong with the SavedModel itself), never another exception."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from google.protobuf import text_format
from hypothesis import example, given
from hypothesis import strategies as st

from engine import load_saved_model
from engine.errors import GraphError
from engine.proto import saved_model_pb2
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.mutations import mutated
from tests.fuzz.seeds import saved_model_dirs
from tests.fuzz.test_tensor_bundle_fuzz import edited_index

MODELS = saved_model_dirs()
SAVED_MODEL_PBS = tuple((d / "saved_model.pb").read_bytes() for d in MODELS)
SAVED_MODEL_TEXTS = tuple(text_format.MessageToString(saved_model_pb2.SavedModel.FromString(pb)).encode()
                          for pb in SAVED_MODEL_PBS[:2])


def load_mutated(model: Path, replaced: str, data: bytes) -> None:
    """load_saved_model of a copy of `model` whose file `replaced` holds `data`."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "1"
        shutil.copytree(model, copy)
        if replaced.endswith(".pbtxt"):
            (copy / "saved_model.pb").unlink()
        (copy / replaced).write_bytes(data)
        size = sum(p.stat().st_size for p in copy.rglob("*") if p.is_file())
        call_parser(load_saved_model, copy, allowed=(GraphError,), memory_limit=64 * size + 32 * MiB)


def _with_asset_def(pb: bytes, asset_def: bytes) -> bytes:
    """A saved_model.pb whose TF1 assets collection holds `asset_def` (a serialized AssetFileDef)."""
    saved_model = saved_model_pb2.SavedModel.FromString(pb)
    item = saved_model.meta_graphs[0].collection_def["saved_model_assets"].any_list.value.add()
    item.type_url, item.value = "type.googleapis.com/tensorflow.AssetFileDef", asset_def
    return saved_model.SerializeToString()


def _with_output_dtype(pb: bytes, dtype: int) -> bytes:
    """A saved_model.pb whose signatures' outputs claim DataType `dtype`."""
    saved_model = saved_model_pb2.SavedModel.FromString(pb)
    for signature in saved_model.meta_graphs[0].signature_def.values():
        for info in signature.outputs.values():
            info.dtype = dtype
    return saved_model.SerializeToString()


def _with_restore_inputs(pb: bytes, count: int) -> bytes:
    """A saved_model.pb whose RestoreV2 nodes keep only their first `count` inputs."""
    saved_model = saved_model_pb2.SavedModel.FromString(pb)
    for node in saved_model.meta_graphs[0].graph_def.node:
        if node.op == "RestoreV2":
            del node.input[count:]
    assert pb != saved_model.SerializeToString(), "the seed has no RestoreV2 node"
    return saved_model.SerializeToString()


def _with_output_input(pb: bytes, name: str) -> bytes:
    """A saved_model.pb whose signatures' output nodes take one more input, `name`."""
    saved_model = saved_model_pb2.SavedModel.FromString(pb)
    meta_graph = saved_model.meta_graphs[0]
    outputs = {info.name.split(":")[0] for sig in meta_graph.signature_def.values() for info in sig.outputs.values()}
    for node in meta_graph.graph_def.node:
        if node.name in outputs:
            node.input.append(name)
    return saved_model.SerializeToString()


@fuzz_settings(0.5)
@given(st.integers(0, len(MODELS) - 1), mutated(SAVED_MODEL_PBS))
@example(0, _with_asset_def(SAVED_MODEL_PBS[0], b"\x12\x01\xff"))  # a file name that is not UTF-8 (atheris)
@example(0, _with_output_dtype(SAVED_MODEL_PBS[0], 43))  # a DataType enum TensorFlow does not have (atheris)
@example(0, _with_output_input(SAVED_MODEL_PBS[0], "y:/x"))  # an input that is no tensor name (atheris)
@example(0, _with_restore_inputs(SAVED_MODEL_PBS[0], 2))  # a RestoreV2 without its slice specs (atheris)
def test_mutated_saved_model_pb_loads_or_raises_a_graph_error(which: int, data: bytes) -> None:
    load_mutated(MODELS[which], "saved_model.pb", data)


@fuzz_settings(0.3)
@given(st.integers(0, 1), mutated(SAVED_MODEL_TEXTS))
@example(0, b"meta_graphs { graph_def { library { function { attr { key: 'a' value { func { attr { key: 'b' value {"
         * 150)
def test_mutated_saved_model_pbtxt_loads_or_raises_a_graph_error(which: int, data: bytes) -> None:
    load_mutated(MODELS[which], "saved_model.pbtxt", data)


@fuzz_settings(0.5)
@given(st.integers(0, len(MODELS) - 1).flatmap(
    lambda w: st.tuples(st.just(w), edited_index(MODELS[w] / "variables", "variables.index"))))
def test_mutated_variables_index_loads_or_raises_a_graph_error(case) -> None:
    which, index = case
    load_mutated(MODELS[which], "variables/variables.index", index)
