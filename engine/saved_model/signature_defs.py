"""SignatureDefs: a MetaGraphDef's named entry points, each a set of input and output tensors known to
clients by alias (`{"x": "serving_default_x:0"}`), with the dtype and shape each declares.

An output may be a ragged or sparse tensor: TensorFlow writes a tf.RaggedTensor as a TensorInfo holding a
`composite_tensor` (its RaggedTensorSpec and its component tensors: flat values, then the row splits of
each ragged dimension, outermost first) and a tf.SparseTensor as a `coo_sparse` one (the names of its
indices, values and dense shape tensors). Such an output is read as its dense components, each an output
of its own named `<alias>.<component>` (`COMPONENTS`), and described as a whole in `SignatureDef.composites`.

Protobuf maps come back from parsing in no particular order; the file's order (which TensorFlow Serving
shows) is read off the serialized SavedModel's wire format instead.

    >>> signatures = read_signatures(meta_graph, wire_order(saved_model_bytes, 0))
    >>> [(t.alias, t.tensor) for t in signatures["serving_default"].inputs]
    [('x', 'serving_default_x:0')]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from engine.errors import SavedModelError
from engine.graph import dtypes, parse_tensor_name
from engine.graph.attrs import decode_shape
from engine.proto import meta_graph_pb2, struct_pb2
from engine.saved_model.sstable import TableError, read_varint

__all__ = [
    "INIT_OP_SIGNATURE_KEY",
    "RAGGED",
    "SPARSE",
    "CompositeTensorInfo",
    "SignatureDef",
    "TensorInfo",
    "component_names",
    "read_signatures",
    "wire_order",
]

# TF2 writes its init op as a signature; it names an op to run, not tensors to serve.
INIT_OP_SIGNATURE_KEY = "__saved_model_init_op"

# The kinds of composite outputs, as CompositeTensorInfo.kind names them.
RAGGED = "ragged"
SPARSE = "sparse"

_TypeSpec = struct_pb2.TypeSpecProto


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature: its alias (the key clients use), the graph tensor behind
    it (`"node:index"`, valid in SavedModel.graph), and the dtype and shape the SignatureDef declares
    (None when unknown; None dims unknown)."""

    alias: str
    tensor: str
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None
    # For a component of a ragged or sparse output (`tokens.values`): that output's alias (`tokens`).
    component_of: str | None = None


@dataclass(frozen=True)
class CompositeTensorInfo:
    """A ragged or sparse output of a signature, served as its dense component tensors.

    `kind` is RAGGED or SPARSE; `dtype` is its values' dtype and `shape` the shape of the whole (None
    for a ragged or unknown dimension; None for an unknown rank). `components` are, for a ragged tensor,
    its flat values then the row splits of each ragged dimension, outermost first (`ragged_rank` of
    them); for a sparse tensor, its indices, values and dense shape.

    >>> tokens = sig.composites[0]
    >>> tokens.kind, tokens.shape, [c.alias for c in tokens.components]
    ('ragged', (None, None), ['tokens.values', 'tokens.row_splits'])
    """

    alias: str
    kind: str
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None
    components: tuple[TensorInfo, ...]
    ragged_rank: int = 0


@dataclass(frozen=True)
class SignatureDef:
    """A named signature, inputs and outputs in the SavedModel file's order. A ragged or sparse output
    is in `outputs` as its components (`tokens.values`, `tokens.row_splits`), at its place in that order,
    and in `composites` as a whole.

    >>> sig = sm.signatures["serving_default"]
    >>> sig.method_name, [t.alias for t in sig.outputs]
    ('tensorflow/serving/predict', ['scores', 'total'])
    """

    name: str
    method_name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    composites: tuple[CompositeTensorInfo, ...] = ()


def component_names(kind: str, ragged_rank: int = 1) -> tuple[str, ...]:
    """The names of a composite's components, in TensorFlow's order; an output `tokens` serves them as
    `tokens.<name>`. A ragged tensor's row splits are `row_splits`, or with several ragged dimensions
    `row_splits.0` (the outermost) to `row_splits.<ragged_rank - 1>`.

    >>> component_names(RAGGED, 2)
    ('values', 'row_splits.0', 'row_splits.1')
    """
    if kind == SPARSE:
        return ("indices", "values", "dense_shape")
    if ragged_rank == 1:
        return ("values", "row_splits")
    return ("values", *(f"row_splits.{i}" for i in range(ragged_rank)))


# --- the file's order ------------------------------------------------------------------------------------


def _wire_fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of a serialized message; other wire
    types are skipped."""
    pos, end = start, len(buf) if end is None else end
    while pos < end:
        tag, pos = read_varint(buf, pos, end)
        wire_type = tag & 7
        if wire_type == 0:
            _, pos = read_varint(buf, pos, end)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            size, pos = read_varint(buf, pos, end)
            yield tag >> 3, pos, pos + size
            pos += size
        else:
            return  # groups: not in these messages


def _map_keys(buf: bytes, start: int, end: int, field_number: int) -> list[tuple[str, int, int]]:
    """The keys of a map<string, message> field in wire order, each with its value's extent."""
    keys = []
    for number, s, e in _wire_fields(buf, start, end):
        if number != field_number:
            continue
        key, value = "", (s, s)
        for entry_number, es, ee in _wire_fields(buf, s, e):
            if entry_number == 1:
                key = buf[es:ee].decode("utf-8", "replace")
            elif entry_number == 2:
                value = (es, ee)
        keys.append((key, *value))
    return keys


def wire_order(raw: bytes | None, meta_graph_index: int) -> dict[str, tuple[list[str], list[str]]]:
    """Signature name -> (input aliases, output aliases), each in the order the file lists them.
    Empty for a text file (its maps are then listed sorted)."""
    if raw is None:
        return {}
    try:
        metas = [(s, e) for number, s, e in _wire_fields(raw) if number == 2]
        start, end = metas[meta_graph_index]
        order = {}
        for name, s, e in _map_keys(raw, start, end, 5):
            order[name] = ([k for k, *_ in _map_keys(raw, s, e, 1)], [k for k, *_ in _map_keys(raw, s, e, 2)])
        return order
    except (IndexError, TableError, UnicodeDecodeError):  # a truncated file: the maps' order is unknown
        return {}


# --- reading SignatureDefs ---------------------------------------------------------------------------------


def _tensor_name(name: str, where: str) -> str:
    try:
        return str(parse_tensor_name(name))
    except ValueError as e:
        raise SavedModelError(f"{where}: {e}") from None


def _dtype(enum: int) -> np.dtype | None:
    return dtypes.to_numpy(enum) if enum else None


def _tensor_info(alias: str, info: meta_graph_pb2.TensorInfo, where: str, component_of: str | None = None) -> TensorInfo:
    dtype = _dtype(info.dtype)
    shape = decode_shape(info.tensor_shape) if info.HasField("tensor_shape") else None
    return TensorInfo(alias, _tensor_name(info.name, where), dtype, shape, component_of)


def _components(alias: str, kind: str, infos, where: str, ragged_rank: int = 1) -> tuple[TensorInfo, ...]:
    """`infos` ((name, dtype enum, shape) per component, in TensorFlow's order) as TensorInfos."""
    names = component_names(kind, ragged_rank)
    return tuple(TensorInfo(f"{alias}.{part}", _tensor_name(name, f"{where} ({part})"), _dtype(dtype), shape, alias)
                 for part, (name, dtype, shape) in zip(names, infos))


def _sparse(alias: str, info: meta_graph_pb2.TensorInfo, where: str) -> CompositeTensorInfo:
    """A tf.SparseTensor (`coo_sparse`): dtype and tensor_shape are its values' and its dense shape; the
    components' dtypes and shapes are a SparseTensorSpec's (indices int64 [n, rank], values [n], dense
    shape int64 [rank])."""
    coo = info.coo_sparse
    shape = decode_shape(info.tensor_shape) if info.HasField("tensor_shape") else None
    rank = None if shape is None else len(shape)
    int64 = dtypes.from_numpy(np.int64)
    parts = ((coo.indices_tensor_name, int64, (None, rank)), (coo.values_tensor_name, info.dtype, (None,)),
             (coo.dense_shape_tensor_name, int64, (rank,)))
    return CompositeTensorInfo(alias, SPARSE, _dtype(info.dtype), shape, _components(alias, SPARSE, parts, where))


def _type_state(spec: struct_pb2.TypeSpecProto) -> list[struct_pb2.StructuredValue]:
    state = spec.type_state
    return list(state.tuple_value.values if state.HasField("tuple_value") else state.list_value.values)


def _composite(alias: str, info: meta_graph_pb2.TensorInfo, where: str) -> CompositeTensorInfo:
    """A `composite_tensor`: a tf.RaggedTensorSpec (state: shape, dtype, ragged_rank, row_splits_dtype)
    or a tf.SparseTensorSpec (state: shape, dtype); other composites are refused."""
    composite = info.composite_tensor
    spec = composite.type_spec
    parts = [(c.name, c.dtype, decode_shape(c.tensor_shape) if c.HasField("tensor_shape") else None)
             for c in composite.components]
    state = _type_state(spec)
    shape = decode_shape(state[0].tensor_shape_value) if state and state[0].HasField("tensor_shape_value") else None
    dtype = _dtype(state[1].tensor_dtype_value) if len(state) > 1 else None
    if spec.type_spec_class == _TypeSpec.RAGGED_TENSOR_SPEC and len(parts) >= 2:
        ragged_rank = len(parts) - 1
        components = _components(alias, RAGGED, parts, where, ragged_rank)
        return CompositeTensorInfo(alias, RAGGED, dtype or components[0].dtype, shape, components, ragged_rank)
    if spec.type_spec_class == _TypeSpec.SPARSE_TENSOR_SPEC and len(parts) == 3:
        components = _components(alias, SPARSE, parts, where)
        return CompositeTensorInfo(alias, SPARSE, dtype or components[1].dtype, shape, components)
    kind = spec.type_spec_class_name or _TypeSpec.TypeSpecClass.Name(spec.type_spec_class)
    raise SavedModelError(f"{where} is a composite tensor of type {kind} with {len(parts)} components; only "
                          "dense, ragged (RaggedTensorSpec) and sparse tensors are supported")


def _input(alias: str, info: meta_graph_pb2.TensorInfo, signature: str) -> TensorInfo:
    kind = info.WhichOneof("encoding")
    if kind != "name":
        what = {"coo_sparse": "a sparse", "composite_tensor": "a composite"}.get(kind, "a nameless")
        raise SavedModelError(f"signature '{signature}' input '{alias}' is {what} tensor; inputs must be dense tensors")
    return _tensor_info(alias, info, f"signature '{signature}' tensor '{alias}'")


def _outputs(aliases: list[str], proto: meta_graph_pb2.SignatureDef, signature: str):
    """The signature's outputs, each composite as its components, and the composites."""
    outputs: list[TensorInfo] = []
    composites: list[CompositeTensorInfo] = []
    for alias in aliases:
        info, where = proto.outputs[alias], f"signature '{signature}' output '{alias}'"
        kind = info.WhichOneof("encoding")
        if kind == "name":
            outputs.append(_tensor_info(alias, info, f"signature '{signature}' tensor '{alias}'"))
            continue
        if kind is None:
            raise SavedModelError(f"{where} names no tensor")
        composite = _sparse(alias, info, where) if kind == "coo_sparse" else _composite(alias, info, where)
        composites.append(composite)
        outputs.extend(composite.components)
    clashes = sorted({c.alias for c in outputs if c.component_of} & set(aliases))
    if clashes:
        raise SavedModelError(f"signature '{signature}': output '{clashes[0]}' has the name of a component of a ragged "
                              "or sparse output")
    return tuple(outputs), tuple(composites)


def _ordered(keys: Iterable[str], first: list[str]) -> list[str]:
    """`keys` with those in `first` first, in its order, then the others sorted."""
    keys = set(keys)
    return [k for k in first if k in keys] + sorted(keys.difference(first))


def read_signatures(
    meta_graph: meta_graph_pb2.MetaGraphDef, order: Mapping[str, tuple[list[str], list[str]]]
) -> dict[str, SignatureDef]:
    """The MetaGraphDef's signatures in `order` (from `wire_order`; names and aliases it lacks follow,
    sorted), leaving out TF2's init-op entry. Ragged and sparse outputs come as their components;
    SavedModelError for a ragged or sparse input, or a composite output of another kind."""
    signatures = {}
    for name in _ordered(meta_graph.signature_def, list(order)):
        if name == INIT_OP_SIGNATURE_KEY:
            continue
        proto = meta_graph.signature_def[name]
        in_order, out_order = order.get(name, ([], []))
        try:
            outputs, composites = _outputs(_ordered(proto.outputs, out_order), proto, name)
            inputs = tuple(_input(a, proto.inputs[a], name) for a in _ordered(proto.inputs, in_order))
        except ValueError as e:  # a dtype or shape no tensor can have (an unknown DataType enum, a dim below -1)
            raise SavedModelError(f"signature '{name}': {e}") from None
        signatures[name] = SignatureDef(
            name=name,
            method_name=proto.method_name,
            inputs=inputs,
            outputs=outputs,
            composites=composites,
        )
    return signatures
