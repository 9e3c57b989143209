"""SavedModels: a directory holding a graph with variables, its signatures, and the variables' values.

A SavedModel directory holds `saved_model.pb` (or `.pbtxt`): MetaGraphDefs, each tagged (`serve`,
`train`, ...) and holding a GraphDef, a SaverDef and named SignatureDefs; `variables/variables.index` and
`variables.data-*-of-*` (a tensor bundle, engine.saved_model.tensor_bundle); and `assets/` (files such as
vocabularies that the graph reads by path).

Loading picks the MetaGraphDef with the requested tags and turns its graph into a plain one that the
engine runs like a frozen GraphDef:

1. each variable's value is found by tracing the restore op and init ops (engine.saved_model.restore), or,
   for the variables that finds nothing for, through the TF2 object graph (engine.saved_model.object_graph),
   and read from the bundle, checksums verified;
2. the graph is cut down to what the signatures and the init ops compute (the save and restore
   machinery goes);
3. PartitionedCall/StatefulPartitionedCall nodes are inlined (engine.saved_model.inline): the signatures' outputs
   keep their names, now IdentityN nodes over the inlined bodies;
4. variables the signatures only read become Consts and their reads Identities (engine.saved_model.freeze);
   While/If that take variables get copies of their functions taking the values. Variables a signature
   writes stay live, initialised from the checkpoint in each session;
5. asset placeholders become string Consts holding the assets' paths (which must lie inside the
   SavedModel's directory).

The init ops (TF2's `__saved_model_init_op`, TF1's `saved_model_main_op` / `legacy_init_op`) stay in
the graph, less the variable assignments step 1 already accounted for: what is left fills lookup
tables. `SavedModel.session()` creates a Session and runs them once, as TensorFlow Serving's loader
does, before any request.

    >>> sm = load_saved_model("models/resnet/1")
    >>> sig = sm.signatures["serving_default"]
    >>> [(t.alias, t.tensor, t.shape) for t in sig.inputs]
    [('image', 'serving_default_image:0', (None, 224, 224, 3))]
    >>> sm.session().run([t.tensor for t in sig.outputs], {sig.inputs[0].tensor: batch})
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf import message as _message
from google.protobuf import text_format

from engine.errors import GraphError, SavedModelError, UnsupportedOpError
from engine.graph import Graph, parse_tensor_name
from engine.graph.graph_def import decode_graph
from engine.graph.tensors import from_array
from engine.proto import function_pb2, graph_pb2, meta_graph_pb2, saved_model_pb2, tensor_pb2
from engine.runtime.session import Session, SessionOptions
from engine.saved_model.freeze import freeze_variables, replace_with_const, written_variables
from engine.saved_model.inline import inline_calls, input_node
from engine.saved_model.object_graph import object_graph_sources
from engine.saved_model.restore import (
    VARIABLE_OPS,
    VARIABLE_WRITE_OPS,
    Checkpointed,
    Constant,
    FromVariable,
    Untraceable,
    VariableSource,
    trace_variable_sources,
)
from engine.saved_model.signature_defs import (
    INIT_OP_SIGNATURE_KEY,
    SignatureDef,
    TensorInfo,
    read_signatures,
    wire_order,
)
from engine.saved_model.tensor_bundle import TensorBundle, extent_slices
from kernels.control_flow.functional import CALL_OPS

__all__ = ["INIT_OP_SIGNATURE_KEY", "SavedModel", "SignatureDef", "TensorInfo", "load_saved_model"]

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
VARIABLES_PREFIX = Path("variables") / "variables"
_INIT_OP_COLLECTIONS = ("saved_model_main_op", "legacy_init_op")
_ASSETS_COLLECTION = "saved_model_assets"


@dataclass(frozen=True, eq=False)
class SavedModel:
    """A loaded SavedModel: a plain graph (variables frozen, calls inlined) and its signatures.

    `signatures` lists the MetaGraphDef's SignatureDefs in file order, without TF2's init-op entry
    (`__saved_model_init_op`, which names an op, not tensors); `meta_graph` is the chosen
    MetaGraphDef as read, for anything else (TensorFlow Serving's metadata lists every SignatureDef).

    >>> sm = load_saved_model("export/1")
    >>> sm.tags, list(sm.signatures)
    (('serve',), ['serving_default', 'greet'])
    """

    path: Path
    graph: Graph
    signatures: Mapping[str, SignatureDef]
    tags: tuple[str, ...]
    assets_dir: Path | None
    meta_graph: meta_graph_pb2.MetaGraphDef
    # Variables frozen into the graph, or live in it: node name -> where the value came from.
    variables: Mapping[str, VariableSource]
    # Variables some signature writes: they stay VarHandleOps, one value per session.
    live_variables: tuple[str, ...] = ()
    # What a session runs once before serving: the init ops (targets), with the asset tensors fed.
    init_ops: tuple[str, ...] = ()
    init_feeds: Mapping[str, np.ndarray] = field(default_factory=dict)

    def initialize(self, session: Session) -> None:
        """Run the init ops in `session` (once per session, before any request: they fill its lookup
        tables); the live variables initialise themselves from the checkpoint on first use."""
        if self.init_ops:
            session.run([], dict(self.init_feeds), targets=list(self.init_ops))

    def session(self, device: str = "cpu", options: SessionOptions | None = None) -> Session:
        """A Session on this SavedModel's graph, initialised (see `initialize`).

        >>> sess = load_saved_model("export/1").session()
        """
        session = Session(self.graph, device=device, options=options)
        self.initialize(session)
        return session


# --- reading saved_model.pb ------------------------------------------------------------------------------


def _read_saved_model(export_dir: Path) -> tuple[saved_model_pb2.SavedModel, bytes | None]:
    """The SavedModel message, and its bytes when binary (they tell the file's order of map entries)."""
    if not export_dir.is_dir():
        raise SavedModelError(f"SavedModel directory '{export_dir}' does not exist")
    for name in SAVED_MODEL_FILES:
        path = export_dir / name
        if not path.exists():
            continue
        try:
            data = path.read_bytes()
        except OSError as e:
            raise SavedModelError(f"cannot read '{path}': {e.strerror or e}") from e
        try:
            if name.endswith(".pbtxt"):
                return text_format.Parse(data.decode("utf-8"), saved_model_pb2.SavedModel()), None
            return saved_model_pb2.SavedModel.FromString(data), data
        except (_message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError) as e:
            raise SavedModelError(f"'{path}' is not a SavedModel: {e}") from None
    raise SavedModelError(f"'{export_dir}' holds no {' or '.join(SAVED_MODEL_FILES)}")


def _choose_meta_graph(saved_model: saved_model_pb2.SavedModel, tags: Sequence[str], where: Path) -> int:
    """The index of the MetaGraphDef tagged exactly `tags`, else of the first whose tags include them."""
    wanted = set(tags)
    tag_sets = [set(mg.meta_info_def.tags) for mg in saved_model.meta_graphs]
    for candidates in ([i for i, t in enumerate(tag_sets) if t == wanted],
                       [i for i, t in enumerate(tag_sets) if wanted <= t]):
        if candidates:
            return candidates[0]
    available = "; ".join("{" + ", ".join(sorted(t)) + "}" for t in tag_sets) or "none"
    raise SavedModelError(f"SavedModel '{where}' has no MetaGraphDef tagged {{{', '.join(sorted(wanted))}}}; "
                          f"its tag sets: {available}")


# --- assets and init ops ------------------------------------------------------------------------------------


def _asset_file_defs(meta_graph: meta_graph_pb2.MetaGraphDef) -> list[meta_graph_pb2.AssetFileDef]:
    """The MetaGraphDef's AssetFileDefs, and those TF1 keeps in the `saved_model_assets` collection."""
    assets = list(meta_graph.asset_file_def)
    if _ASSETS_COLLECTION in meta_graph.collection_def:
        for item in meta_graph.collection_def[_ASSETS_COLLECTION].any_list.value:
            if item.type_url.endswith("AssetFileDef"):
                try:
                    assets.append(meta_graph_pb2.AssetFileDef.FromString(item.value))
                except _message.DecodeError as e:
                    raise SavedModelError(f"collection '{_ASSETS_COLLECTION}' holds an unreadable AssetFileDef: {e}") from None
    return assets


def _asset_paths(meta_graph: meta_graph_pb2.MetaGraphDef, assets_dir: Path) -> dict[str, str]:
    """Asset tensor (`"name:0"`) -> the asset's path, as a loader feeds it to the init op. An asset
    must lie inside the SavedModel's directory: a file name that leads out of it (`../`, an absolute
    path, a link pointing elsewhere) is refused, since a version's files are all a server may read."""
    paths = {}
    root = assets_dir.parent.resolve()
    for asset in _asset_file_defs(meta_graph):
        try:
            tensor = str(parse_tensor_name(asset.tensor_info.name))
        except ValueError:
            raise SavedModelError(f"asset '{asset.filename}' names no tensor ('{asset.tensor_info.name}')") from None
        path = assets_dir / asset.filename
        if not path.resolve().is_relative_to(root):
            raise SavedModelError(f"asset '{asset.filename}' lies outside the SavedModel's directory")
        paths[tensor] = str(path)
    return paths


def _init_ops(meta_graph: meta_graph_pb2.MetaGraphDef) -> list[str]:
    """The ops a loader runs after restoring: the init-op collections, or TF2's init-op signature."""
    ops = []
    for key in _INIT_OP_COLLECTIONS:
        if key in meta_graph.collection_def:
            ops.extend(meta_graph.collection_def[key].node_list.value)
    if INIT_OP_SIGNATURE_KEY in meta_graph.signature_def:
        ops.extend(t.name for t in meta_graph.signature_def[INIT_OP_SIGNATURE_KEY].outputs.values())
    return ops


# --- building the plain graph ---------------------------------------------------------------------------------


def _ancestors(nodes: Mapping[str, graph_pb2.NodeDef], roots: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    stack = [r for r in roots if r in nodes]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack.extend(source for source in map(input_node, nodes[name].input) if source in nodes)
    return seen


def _prune(graph_def: graph_pb2.GraphDef, roots: Iterable[str]) -> graph_pb2.GraphDef:
    """Only the nodes `roots` need (data and control inputs), in the original order, and the functions
    they call (a SavedModel's library also holds its training functions, which need no copying)."""
    nodes = {nd.name: nd for nd in graph_def.node}
    keep = _ancestors(nodes, roots)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.node.extend(nd for nd in graph_def.node if nd.name in keep)
    out.library.function.extend(_called_functions(out.node, graph_def.library))
    return out


def _prune_library(graph_def: graph_pb2.GraphDef) -> None:
    """Keep only the functions the graph's call ops reach, and no gradients (in place: the graph's
    Consts hold the variables' values, which a copy would duplicate)."""
    kept = _called_functions(graph_def.node, graph_def.library)
    del graph_def.library.function[:]
    graph_def.library.function.extend(kept)
    del graph_def.library.gradient[:]


def _called_functions(node_defs, library: function_pb2.FunctionDefLibrary) -> list[function_pb2.FunctionDef]:
    """The functions of `library` that the call ops among `node_defs` reach (directly or through other
    functions), in library order."""
    fdefs = {f.signature.name: f for f in library.function}
    reached: set[str] = set()

    def called(nds) -> Iterator[str]:
        for nd in nds:
            if nd.op in CALL_OPS:
                for value in nd.attr.values():
                    if value.HasField("func"):
                        yield value.func.name

    pending = list(called(node_defs))
    while pending:
        name = pending.pop()
        if name in reached or name not in fdefs:
            continue
        reached.add(name)
        pending.extend(called(fdefs[name].node_def))
    return [f for f in library.function if f.signature.name in reached]


def _open_bundle(export_dir: Path) -> TensorBundle:
    if not (export_dir / "variables").is_dir():
        raise SavedModelError(f"SavedModel '{export_dir}' has no variables/ directory, but its variables are "
                              "restored from it")
    return TensorBundle(export_dir / VARIABLES_PREFIX)


class _Values(Mapping[str, tensor_pb2.TensorProto]):
    """The values of a graph's variable nodes as TensorProtos, each read from the bundle when looked up:
    freezing copies one into its Const and drops it, so one variable at a time is held twice, not all."""

    def __init__(self, export_dir: Path, sources: Mapping[str, VariableSource], graph_def: graph_pb2.GraphDef,
                 signatures: Mapping[str, SignatureDef]):
        self.export_dir = export_dir
        self.sources = sources
        self.graph_def, self.signatures = graph_def, signatures  # for error messages (`_variable_readers`)
        self.variables = {nd.name: None for nd in graph_def.node if nd.op in VARIABLE_OPS}
        self._bundle: TensorBundle | None = None
        self._whole: dict[str, np.ndarray] = {}  # partitioned variables' full tensors, read once

    def __getitem__(self, variable: str) -> tensor_pb2.TensorProto:
        if variable not in self.variables:
            raise KeyError(variable)
        return self.proto(variable)

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)

    def bundle(self) -> TensorBundle:
        if self._bundle is None:
            self._bundle = _open_bundle(self.export_dir)
        return self._bundle

    def checkpointed(self, variable: str, source: Checkpointed) -> tensor_pb2.TensorProto:
        bundle = self.bundle()
        if source.part is None:
            return bundle.tensor_proto(source.key)
        whole = self._whole.get(source.key)
        if whole is None:
            whole = self._whole[source.key] = bundle.read(source.key)
        if whole.shape != source.full_shape:
            raise SavedModelError(f"variable '{variable}' is a slice of '{source.key}' of shape "
                                  f"{list(source.full_shape)}, but '{bundle.index_path}' holds shape {list(whole.shape)}")
        proto = from_array(whole[extent_slices(source.part)])
        proto.dtype = bundle.entry(source.key).dtype
        return proto

    def readers(self, variable: str) -> str:
        """The signatures that need `variable`, for error messages."""
        return _variable_readers(self.graph_def, self.signatures).get(variable, "the signatures")

    def proto(self, variable: str, seen: tuple[str, ...] = ()) -> tensor_pb2.TensorProto:
        asked = seen[0] if seen else variable  # errors name the readers of the variable the graph reads
        source = self.sources.get(variable)
        if source is None:
            raise SavedModelError(f"variable '{variable}' (read by {self.readers(asked)}) is neither restored by "
                                  "the restore op nor assigned by an init op")
        if isinstance(source, Checkpointed):
            return self.checkpointed(variable, source)
        if isinstance(source, Constant):
            return from_array(source.value)
        if isinstance(source, FromVariable):
            if source.variable in seen:
                raise SavedModelError(f"variable '{variable}' is initialized from itself ({' -> '.join(seen)})")
            return self.proto(source.variable, seen + (variable,))
        assert isinstance(source, Untraceable)
        raise SavedModelError(f"variable '{variable}' (read by {self.readers(asked)}) cannot be given a value: "
                              f"{source.why}")


def _feed_assets(graph_def: graph_pb2.GraphDef, assets: Mapping[str, str]) -> None:
    """Asset placeholders become Consts holding the assets' paths.

    NOTE: loaders feed asset tensors only when they run the init op (engine.saved_model.restore traces that). A TF1
    asset tensor is a Const holding the path at export time, which a signature reading it directly gets
    in TensorFlow too, so it stays; a TF2 one is a placeholder, which TensorFlow could not run at all."""
    for nd in graph_def.node:
        path = assets.get(f"{nd.name}:0")
        if path is None or nd.op not in ("Placeholder", "PlaceholderWithDefault"):
            continue
        replace_with_const(nd, from_array(np.array(path.encode("utf-8"), dtype=object)))


def _unsupported_error(error: UnsupportedOpError, export_dir: Path) -> SavedModelError:
    return SavedModelError(f"SavedModel '{export_dir}': its signatures use {error}")


def _drop_traced_assignments(graph_def: graph_pb2.GraphDef, init_roots: Iterable[str], roots: Iterable[str]) -> None:
    """Variable assignments that only the init ops run become NoOps (their inputs kept as control
    inputs, so that what ran before them still does): tracing already gave those variables their
    values (engine.saved_model.restore), and the frozen variables they assign are constants now."""
    nodes = {nd.name: nd for nd in graph_def.node}
    init_only = _ancestors(nodes, init_roots) - _ancestors(nodes, roots)
    for name in init_only:
        nd = nodes[name]
        if nd.op not in VARIABLE_WRITE_OPS:
            continue
        controls = list(dict.fromkeys("^" + input_node(i) for i in nd.input))
        device = nd.device
        nd.Clear()
        nd.name, nd.op, nd.device = name, "NoOp", device
        nd.input.extend(controls)


def _plain_graph(graph_def: graph_pb2.GraphDef, signatures: Mapping[str, SignatureDef], export_dir: Path,
                 sources: Mapping[str, VariableSource], assets: Mapping[str, str],
                 init_ops: Sequence[str], check_ops: bool = True) -> tuple[Graph, set[str]]:
    """Steps 2-5 of the module docstring: the plain graph, and its live variables."""
    tensors = {t.tensor: name for name, sig in signatures.items() for t in sig.inputs + sig.outputs}
    nodes = {nd.name: nd for nd in graph_def.node}
    for tensor, name in tensors.items():
        ref = parse_tensor_name(tensor)
        if ref.node not in nodes:
            raise SavedModelError(f"signature '{name}' names tensor '{tensor}', but the graph has no node "
                                  f"'{ref.node}'")
    signature_roots = {parse_tensor_name(t).node for t in tensors}
    init_roots = {input_node(op) for op in init_ops} & set(nodes)
    roots = signature_roots | init_roots
    graph_def = _prune(graph_def, roots)
    graph_def = inline_calls(graph_def, keep_outputs=roots.__contains__)
    graph_def = _prune(graph_def, roots)
    _drop_traced_assignments(graph_def, init_roots, signature_roots)

    live = written_variables(graph_def)
    graph_def = freeze_variables(graph_def, _Values(export_dir, sources, graph_def, signatures), live)
    _feed_assets(graph_def, assets)
    _prune_library(graph_def)
    try:
        return decode_graph(graph_def, check_ops=check_ops), live
    except UnsupportedOpError as e:
        raise _unsupported_error(e, export_dir) from e


def _variable_readers(graph_def: graph_pb2.GraphDef, signatures: Mapping[str, SignatureDef]) -> dict[str, str]:
    """Variable -> the signatures that need it, for error messages."""
    nodes = {nd.name: nd for nd in graph_def.node}
    readers: dict[str, list[str]] = {}
    for name, sig in signatures.items():
        for var in _ancestors(nodes, [parse_tensor_name(t.tensor).node for t in sig.outputs]):
            if nodes[var].op in VARIABLE_OPS:
                readers.setdefault(var, []).append(name)
    return {var: "signature(s) " + ", ".join(f"'{n}'" for n in names) for var, names in readers.items()}


def load_saved_model(path: str | os.PathLike, tags: Sequence[str] = ("serve",), *, check_ops: bool = True) -> SavedModel:
    """Load the SavedModel in directory `path`: the MetaGraphDef tagged `tags` (exactly, else the first
    whose tags include them), its variables frozen into a plain graph, its signatures. With
    `check_ops=False` ops without a kernel are let through (for `tensorgate inspect`, which lists them).

    >>> sm = load_saved_model("export/1")
    >>> Session(sm.graph).run(["StatefulPartitionedCall:0"], {"serving_default_x:0": x})

    SavedModelError (a GraphError) for anything that stops the load: no such tags (the message lists
    the tag sets there are), a missing or corrupt variables index or data shard (naming the key and
    file), a failed checksum, a restore structure that cannot be traced, or ops the engine lacks.
    """
    export_dir = Path(path)
    proto, raw = _read_saved_model(export_dir)
    index = _choose_meta_graph(proto, tags, export_dir)
    meta_graph = proto.meta_graphs[index]
    signatures = read_signatures(meta_graph, wire_order(raw, index))
    assets_dir = export_dir / "assets"
    assets = _asset_paths(meta_graph, assets_dir)
    try:
        restore_op = meta_graph.saver_def.restore_op_name or None
        init_ops = _init_ops(meta_graph)
        # Only the restore and init machinery is traced: decoding the signatures' functions too would
        # double the load time of a big model.
        roots = [input_node(op) for op in [restore_op, *init_ops] if op]
        wiring = decode_graph(_prune(meta_graph.graph_def, roots), check_ops=False)
        sources = trace_variable_sources(wiring, restore_op, init_ops, assets)
        # TF2's own way, for the variables the restore op does not reach (engine.saved_model.object_graph).
        unrestored = {nd.name for nd in meta_graph.graph_def.node
                      if nd.op in VARIABLE_OPS and (nd.name not in sources or isinstance(sources[nd.name], Untraceable))}
        if unrestored and meta_graph.object_graph_def.nodes:
            sources = {**sources, **object_graph_sources(meta_graph, lambda: _open_bundle(export_dir), unrestored)}
        graph, live = _plain_graph(meta_graph.graph_def, signatures, export_dir, sources, assets, init_ops, check_ops)
    except SavedModelError as e:
        if str(export_dir) in str(e):
            raise
        raise SavedModelError(f"SavedModel '{export_dir}': {e}") from e
    except GraphError as e:
        raise SavedModelError(f"SavedModel '{export_dir}': {e}") from e
    except ValueError as e:  # a node input that is no tensor name ('a:/b'), met while pruning before decoding
        raise SavedModelError(f"SavedModel '{export_dir}': {e}") from e
    return SavedModel(
        path=export_dir,
        graph=graph,
        signatures=signatures,
        tags=tuple(meta_graph.meta_info_def.tags),
        assets_dir=assets_dir if assets_dir.is_dir() else None,
        meta_graph=meta_graph,
        variables={name: sources[name] for name in sorted(sources) if name in graph},
        live_variables=tuple(sorted(live)),
        init_ops=tuple(dict.fromkeys(op for op in (input_node(op) for op in init_ops) if op in graph)),
        # Asset tensors that survive as Consts (TF1 writes the export-time path into them) are fed
        # the asset's path here, as TensorFlow Serving's loader feeds them.
        init_feeds={tensor: np.array(path.encode("utf-8"), dtype=object) for tensor, path in assets.items()
                    if parse_tensor_name(tensor).node in graph},
    )
