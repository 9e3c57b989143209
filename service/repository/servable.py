"""A servable: one loaded, warmed-up version of a model, ready to run requests.

Loading a version parses its graph (a GraphDef, or a SavedModel's `serve` MetaGraphDef with its
variables restored), puts it on its device (config.yaml's `device`, else the server's), checks
every op has a kernel, resolves the signatures (a SavedModel's SignatureDefs, then config.yaml's,
else the default one a frozen graph implies) and warms each signature up, so that the first
request after a version becomes visible pays no compilation. A version directory holding TensorFlow
Serving's warm-up file (`assets.extra/tf_serving_warmup_requests`) then replays its requests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from google.protobuf import json_format

from engine import Graph, Session, SessionOptions, load_graph, parse_tensor_name
from engine.compile.plan import PLACEHOLDER_OPS
from engine.compile.prune import prune_to_signature
from engine.devices import DeviceError, canonical_device, parse_device
from engine.errors import EngineError, GraphError
from engine.graph import dtypes
from engine.graph.attrs import decode_shape
from engine.saved_model.loader import INIT_OP_SIGNATURE_KEY, SavedModel, load_saved_model
from engine.saved_model.signature_defs import CompositeTensorInfo, SignatureDef
from engine.summary import graph_outputs
from service.errors import BadRequest, NotFound
from service.inference.batching import BatchingOptions, BatchScheduler, BatchStats
from service.repository.config import ModelConfig
from service.repository.signatures import DEFAULT_SIGNATURE, Composite, Signature, TensorSpec, fetched_tensors
from service.repository.warmup import WarmupError, WarmupOptions, replay_warmup_file
from service.settings import check_device_available

__all__ = ["Servable", "LoadError", "load_servable", "GRAPHDEF_PLATFORM", "SAVED_MODEL_PLATFORM"]

log = logging.getLogger("tensorgate.servable")

# Attributes that name a node's first output dtype, most specific first, for the metadata of outputs
# that warm-up could not run (ArgMax has T for its input and output_type for its output).
_DTYPE_ATTRS = ("out_type", "output_type", "DstT", "Tout", "dtype", "T")

# Triton's platform names, which the v2 metadata reports.
GRAPHDEF_PLATFORM = "tensorflow_graphdef"
SAVED_MODEL_PLATFORM = "tensorflow_savedmodel"
# SignatureDefs TensorFlow adds for its own use (`__saved_model_init_op`): reported in metadata, as
# TensorFlow Serving reports every SignatureDef, but never compiled or warmed up.
_INTERNAL_SIGNATURE_PREFIX = "__saved_model_"


class LoadError(Exception):
    """A version that cannot be served; the message says why (bad graph, bad signature, warm-up)."""


@dataclass(frozen=True)
class Servable:
    """A loaded version: its graph's Session and its signatures (name -> Signature)."""

    model: str
    version: int
    session: Session
    signatures: Mapping[str, Signature]
    load_seconds: float
    scheduler: BatchScheduler | None = None  # dynamic batching, when the model has it on
    platform: str = GRAPHDEF_PLATFORM  # or SAVED_MODEL_PLATFORM
    # The graph holds paths into the directory it was loaded from (a SavedModel's assets): a servable
    # loaded from a staging directory must be loaded again once the directory has moved into place.
    uses_asset_paths: bool = False
    device: str = "cpu:0"  # canonical: the model's config.yaml `device`, else the server's default
    # The classification extension's labels of outputs, by alias (config.yaml output_labels, Triton's label files).
    output_labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Triton's reshape, by input or output alias (config.yaml `reshape`): see `reshaped`.
    reshape: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def reshaped(self, name: str, array: np.ndarray) -> np.ndarray:
        """`array` of input or output `name` in the shape the model's config reshapes it to (as it is
        without one); BadRequest when its elements do not fill that shape."""
        shape = self.reshape.get(name)
        if shape is None:
            return array
        try:
            return array.reshape(shape)
        except ValueError:
            raise BadRequest(f"'{name}' of shape {list(array.shape)} cannot be reshaped to {list(shape)} (-1: any size), "
                             "as the model's config says") from None

    @property
    def checks_feed_shapes(self) -> bool:
        """Whether requests must match the shapes the signatures declare (the server's
        `check_input_shapes`; TensorFlow Serving feeds any shape)."""
        return self.session.options.plan.check_feed_shapes

    def close(self) -> None:
        """Stop batching (queued requests still run); called once the version leaves service."""
        if self.scheduler is not None:
            self.scheduler.close()

    def signature(self, name: str | None) -> Signature:
        """`name`, or the default signature (`serving_default`, else the only/first one)."""
        if name is None or name == "":
            if DEFAULT_SIGNATURE in self.signatures:
                return self.signatures[DEFAULT_SIGNATURE]
            servable = [s for n, s in self.signatures.items() if not n.startswith(_INTERNAL_SIGNATURE_PREFIX)]
            return (servable or list(self.signatures.values()))[0]
        try:
            return self.signatures[name]
        except KeyError:
            raise NotFound(
                f"model '{self.model}' version {self.version} has no signature '{name}' (it has: {', '.join(self.signatures)})"
            ) from None

    def run(self, feeds: Mapping[str, np.ndarray], fetches: Sequence[str]) -> list[np.ndarray]:
        """Run graph tensors `fetches` given graph tensors `feeds`."""
        return self.session.run(list(fetches), dict(feeds))

    def resolve_input(self, signature: Signature, name: str) -> TensorSpec:
        """A request's input name: a signature alias, else any graph tensor (`node` or `node:i`)."""
        for spec in signature.inputs:
            if spec.alias == name:
                return spec
        return self._graph_tensor(name, "input", signature)

    def resolve_output(self, signature: Signature, name: str, *, composites: bool = False) -> TensorSpec:
        """A requested output: a signature alias, a component of a ragged or sparse output
        (`tokens.values`), else any graph tensor. A ragged or sparse output as a whole only with
        `composites` (its caller knows how to return one); BadRequest naming its components otherwise."""
        for spec in signature.outputs:
            if spec.alias == name:
                if spec.composite is not None and not composites:
                    parts = ", ".join(f"'{c.alias}'" for c in spec.composite.components)
                    raise BadRequest(f"output '{name}' of signature '{signature.name}' is a {spec.composite.kind} "
                                     f"tensor, which is fetched here as its components: {parts}")
                return spec
            for component in spec.composite.components if spec.composite is not None else ():
                if component.alias == name:
                    return component
        return self._graph_tensor(name, "output", signature)

    def _graph_tensor(self, name: str, role: str, signature: Signature) -> TensorSpec:
        graph = self.session.graph
        try:
            ref = parse_tensor_name(name)
        except ValueError:
            ref = None
        if ref is None or not graph.has_tensor(ref):
            aliases = [s.alias for s in (signature.inputs if role == "input" else signature.outputs)]
            raise BadRequest(
                f"unknown {role} '{name}' for model '{self.model}' version {self.version}: not an {role} of signature "
                f"'{signature.name}' ({', '.join(aliases) or 'none'}) nor a tensor of the graph"
            )
        if role == "input":
            return _input_spec(graph, name, str(ref))
        return TensorSpec(name, str(ref), None, None)


def _input_spec(graph: Graph, alias: str, tensor: str) -> TensorSpec:
    """A placeholder declares dtype and shape; for any other fed tensor the engine checks what it can."""
    ref = parse_tensor_name(tensor)
    node = graph.node(ref.node)
    if node.op in PLACEHOLDER_OPS or node.op == "PlaceholderWithDefault":
        return TensorSpec(alias, str(ref), node.attrs.get("dtype"), node.attrs.get("shape"))
    return TensorSpec(alias, str(ref), None, None)


def _output_dtype(graph: Graph, tensor: str) -> np.dtype | None:
    ref = parse_tensor_name(tensor)
    if ref.index != 0:
        return None  # other outputs often have types of their own (TopKV2's indices)
    node = graph.node(ref.node)
    for attr in _DTYPE_ATTRS:
        value = node.attrs.get(attr)
        if isinstance(value, np.dtype):
            return value
    return None


def _check_tensor(graph: Graph, tensor: str, where: str) -> str:
    try:
        ref = parse_tensor_name(tensor)
    except ValueError as e:
        raise LoadError(f"{where}: {e}") from None
    if not graph.has_tensor(ref):
        raise LoadError(f"{where}: the graph has no tensor '{ref}'")
    return str(ref)


def _alias_of(ref_name: str) -> str:
    node, _, index = ref_name.rpartition(":")
    return node if index == "0" else ref_name


def _needed_placeholders(graph: Graph, fetches: Sequence[str]) -> list[str]:
    """The placeholders the fetches depend on, in graph order."""
    needed = prune_to_signature(graph, (), [parse_tensor_name(f) for f in fetches], ())
    return [f"{node.name}:0" for node in needed if node.op in PLACEHOLDER_OPS]


def _build_signatures(graph: Graph, config: ModelConfig) -> dict[str, Signature]:
    if not config.signatures:
        outputs = [str(ref) for ref in graph_outputs(graph)]
        if not outputs:
            raise LoadError("the graph has no outputs (every tensor is consumed); declare a signature in config.yaml")
        inputs = _needed_placeholders(graph, outputs)
        return {
            DEFAULT_SIGNATURE: Signature(
                DEFAULT_SIGNATURE,
                tuple(_input_spec(graph, _alias_of(t), t) for t in inputs),
                tuple(TensorSpec(_alias_of(t), t, _output_dtype(graph, t), None) for t in outputs),
            )
        }
    signatures = {}
    for name, sig in config.signatures.items():
        inputs = tuple(
            _input_spec(graph, alias, _check_tensor(graph, t, f"signature '{name}' input '{alias}'")) for alias, t in sig.inputs.items()
        )
        outputs = []
        for alias, t in sig.outputs.items():
            ref = _check_tensor(graph, t, f"signature '{name}' output '{alias}'")
            outputs.append(TensorSpec(alias, ref, _output_dtype(graph, ref), None))
        signatures[name] = Signature(name, inputs, tuple(outputs))
    return signatures


def _warmup_value(spec: TensorSpec, batch: int) -> np.ndarray:
    shape = tuple(batch if d is None else d for d in spec.shape)
    if spec.dtype == np.dtype(object):
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=spec.dtype)


def _composite_spec(saved: SavedModel, signature: str, composite: CompositeTensorInfo) -> TensorSpec:
    """A ragged or sparse output, with TensorFlow's TensorInfo for it in the JSON form TensorFlow
    Serving's metadata gives (dtype DT_INVALID and a `composite_tensor` for a ragged tensor)."""
    info = saved.meta_graph.signature_def[signature].outputs[composite.alias]
    tensor_info = json_format.MessageToDict(info, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    components = tuple(TensorSpec(c.alias, c.tensor, c.dtype, c.shape, component_of=composite.alias)
                       for c in composite.components)
    return TensorSpec(composite.alias, "", composite.dtype, composite.shape,
                      Composite(composite.kind, components, composite.ragged_rank, tensor_info))


def _declared_outputs(saved: SavedModel, sig: SignatureDef) -> tuple[TensorSpec, ...]:
    """The SignatureDef's outputs in its order; a ragged or sparse one (its components, in the engine's
    signature) as one output."""
    composites = {c.alias: c for c in sig.composites}
    outputs = []
    for t in sig.outputs:
        if t.component_of is None:
            outputs.append(TensorSpec(t.alias, t.tensor, t.dtype, t.shape))
        elif t.component_of in composites:  # its first component: the composite goes here
            outputs.append(_composite_spec(saved, sig.name, composites.pop(t.component_of)))
    return tuple(outputs)


def _declared_signatures(saved: SavedModel) -> dict[str, Signature]:
    """A SavedModel's SignatureDefs as signatures, with their aliases, tensor names, dtypes and shapes
    as declared (what TensorFlow Serving's metadata reports), TensorFlow's init-op entry included."""
    signatures = {}
    for name, sig in saved.signatures.items():
        inputs = tuple(TensorSpec(t.alias, t.tensor, t.dtype, t.shape) for t in sig.inputs)
        signatures[name] = Signature(name, inputs, _declared_outputs(saved, sig), sig.method_name)
    init_op = saved.meta_graph.signature_def.get(INIT_OP_SIGNATURE_KEY)
    if init_op is not None:
        # It names an op to run at load time, not tensors: kept as written, for metadata only.
        def spec(alias: str, info) -> TensorSpec:
            dtype = dtypes.to_numpy(info.dtype) if info.dtype else None
            shape = decode_shape(info.tensor_shape) if info.HasField("tensor_shape") else None
            return TensorSpec(alias, info.name, dtype, shape)

        signatures[INIT_OP_SIGNATURE_KEY] = Signature(
            INIT_OP_SIGNATURE_KEY,
            tuple(spec(a, info) for a, info in sorted(init_op.inputs.items())),
            tuple(spec(a, info) for a, info in sorted(init_op.outputs.items())),
            init_op.method_name,
        )
    return signatures


def _warm_up(session: Session, signature: Signature, *, declared: bool = False) -> Signature:
    """Compile the signature's plan and, where the input shapes allow, run it at batch 1 (and 2).

    The runs fill in the outputs' dtypes and shapes for metadata: a dimension that follows the
    batch becomes unknown (-1 in metadata). A signature whose inputs have unknown dimensions other
    than the leading one is only compiled: guessing sizes there (an image's height) could fail a
    valid model. Batch 2 is tried only when some input's leading dimension is unknown.

    A `declared` signature (a SavedModel's SignatureDef) keeps the dtypes and shapes it declares, so it
    runs at batch 1 only: that run compiles what its kernels compile and faults in the weights.
    A failing run never rejects a signature: zeros and empty strings are our guess, not a user's
    request, and not valid data for every model (a `tf.debugging` assertion, an index lookup, Triton's
    simple_string parsing its string inputs as numbers); TensorFlow Serving and Triton serve models
    without such a warm-up. It is logged, and the outputs keep what the graph declares. Only a
    signature that cannot be compiled is a load error (a user's own warm-up file may fail a version too:
    service.repository.warmup).
    """
    if signature.name.startswith(_INTERNAL_SIGNATURE_PREFIX):
        return signature
    fetches = fetched_tensors(signature.outputs)
    feeds = [s.tensor for s in signature.inputs]
    try:
        session.plan_for(feeds, fetches)
    except EngineError as e:
        raise LoadError(f"signature '{signature.name}': {e}") from None
    runnable = all(
        s.dtype is not None and s.shape is not None and all(d is not None for d in s.shape[1:]) for s in signature.inputs
    )
    if not runnable:
        return signature
    try:
        first = session.run(fetches, {s.tensor: _warmup_value(s, 1) for s in signature.inputs})
    except (EngineError, ValueError, TypeError, ArithmeticError, IndexError, KeyError) as e:
        log.warning("warm-up of signature '%s' with zeros failed; serving it anyway: %s", signature.name, e)
        return signature
    if declared:
        # The SignatureDef's own dtypes and shapes stand: the batch-2 run below would only learn shapes.
        return signature
    shapes = [tuple(a.shape) for a in first]
    if any(s.shape and s.shape[0] is None for s in signature.inputs):
        try:
            second = session.run(fetches, {s.tensor: _warmup_value(s, 2) for s in signature.inputs})
            shapes = [tuple(None if a != b else a for a, b in zip(x.shape, y.shape)) if x.ndim == y.ndim else None
                      for x, y in zip(first, second)]
        except (EngineError, ValueError, TypeError, ArithmeticError, IndexError, KeyError):
            pass  # a graph that only takes batch 1; the shapes of the first run stand
    outputs = tuple(
        TensorSpec(spec.alias, spec.tensor, arr.dtype, shape) for spec, arr, shape in zip(signature.outputs, first, shapes)
    )
    return Signature(signature.name, signature.inputs, outputs, signature.method_name)


# A frozen TF1 graph with lookup tables keeps the op that fills them under this name
# (`tf.compat.v1.tables_initializer()`); it runs once per session, as a SavedModel's init op does.
GRAPHDEF_INIT_OP = "init_all_tables"


@dataclass(frozen=True)
class _Loaded:
    graph: Graph
    declared: dict[str, Signature]
    platform: str
    uses_asset_paths: bool
    saved: SavedModel | None

    def initialize(self, session: Session) -> None:
        """Fill the session's lookup tables (the SavedModel's init ops, a frozen graph's
        `init_all_tables`); live variables start from their checkpoint values on first use."""
        if self.saved is not None:
            self.saved.initialize(session)
        elif GRAPHDEF_INIT_OP in self.graph:
            session.run([], targets=[GRAPHDEF_INIT_OP])


def _load_graph(source: Path | bytes, tags: tuple[str, ...] = ("serve",)) -> _Loaded:
    """The graph, its declared signatures, its platform and whether it holds asset paths: a
    directory is a SavedModel (its MetaGraph tagged `tags`), a file or bytes a GraphDef."""
    if isinstance(source, Path) and source.is_dir():
        saved = load_saved_model(source, tags=tags)
        # TF2 lists assets in asset_file_def, TF1 in a collection; either way they are files in assets/.
        uses_assets = saved.assets_dir is not None and any(saved.assets_dir.iterdir())
        return _Loaded(saved.graph, _declared_signatures(saved), SAVED_MODEL_PLATFORM, uses_assets, saved)
    return _Loaded(load_graph(source), {}, GRAPHDEF_PLATFORM, False, None)


def load_servable(
    model: str,
    version: int,
    source: Path | bytes,
    config: ModelConfig,
    options: SessionOptions,
    *,
    batching: BatchingOptions | None = None,
    on_batch: Callable[[BatchStats], None] | None = None,
    default_device: str = "cpu",
    warmup: WarmupOptions | None = None,
    saved_model_tags: tuple[str, ...] = ("serve",),
) -> Servable:
    """Parse, check, resolve signatures and warm up; raises LoadError saying what is wrong.
    `source` is a GraphDef (bytes, or a `model.pb[txt]` path) or a SavedModel directory. The
    version runs on config.yaml's `device`, else on `default_device`. The version directory's
    warm-up file, if any, is replayed last (`warmup` says how). A SavedModel's MetaGraph is the one
    tagged `saved_model_tags`.
    With `batching`, the servable gets a batch scheduler (started once everything else loaded)."""
    start = time.perf_counter()
    device = _device(config.device or default_device)
    try:
        loaded = _load_graph(source, saved_model_tags)
        # A server never saves the graph back: the parsed GraphDef it was decoded from would keep a second
        # copy of every constant (as much memory again as the weights) for as long as the version is loaded.
        graph, declared = replace(loaded.graph, graph_def=None), loaded.declared
        session = Session(graph, device=device, options=_options_for(device, options))
        loaded.initialize(session)
    except (GraphError, DeviceError) as e:
        raise LoadError(str(e)) from None
    except EngineError as e:
        raise LoadError(f"the model's init op failed: {e}") from None
    except OSError as e:
        raise LoadError(f"cannot read the model: {e}") from None
    signatures = {name: _warm_up(session, sig, declared=True) for name, sig in declared.items()}
    servable_declared = [name for name in declared if not name.startswith(_INTERNAL_SIGNATURE_PREFIX)]
    if config.signatures or not servable_declared:
        # config.yaml's signatures add to a SavedModel's, or replace those of the same name.
        signatures.update((name, _warm_up(session, sig)) for name, sig in _build_signatures(graph, config).items())
    if any(resource.mutable for resource in session.resources):
        # Warm-up ran the signatures, and some wrote state (a counter, a mutable table): the first
        # request must see the state a fresh load gives, as in TensorFlow Serving, which does not warm up.
        session.resources.clear()
        loaded.initialize(session)
    servable = Servable(model, version, session, signatures, 0.0, None, loaded.platform, loaded.uses_asset_paths, device,
                        {name: tuple(labels) for name, labels in config.output_labels.items()},
                        {name: tuple(shape) for name, shape in config.reshape.items()})
    version_dir = _version_dir(source)
    if version_dir is not None:
        # NOTE: after our own warm-up's state is undone: what these requests write stays, as in TensorFlow Serving.
        try:
            replay_warmup_file(servable, version_dir, warmup)
        except WarmupError as e:
            raise LoadError(str(e)) from None
    seconds = time.perf_counter() - start
    scheduler = None
    if batching is not None:
        scheduler = BatchScheduler(
            lambda feeds, fetches: session.run(list(fetches), dict(feeds)), batching, name=f"{model}-{version}", on_batch=on_batch
        )
    log.info("loaded %s version %d on %s in %.3f s%s", model, version, device, seconds, " (batching)" if scheduler else "")
    return replace(servable, load_seconds=seconds, scheduler=scheduler)


def _version_dir(source: Path | bytes) -> Path | None:
    """The version directory a source was loaded from (a SavedModel directory, or a GraphDef file's
    parent); None for bytes."""
    if not isinstance(source, Path):
        return None
    return source if source.is_dir() else source.parent



def _options_for(device: str, options: SessionOptions) -> SessionOptions:
    """A model placed on logical CPU N needs a session with at least N + 1 logical CPUs."""
    kind, index = parse_device(device)
    if kind == "cpu" and index >= options.logical_cpus:
        return replace(options, logical_cpus=index + 1)
    return options


def _device(spec: str) -> str:
    """The canonical name of a device this process has; LoadError (naming the device) otherwise, so
    that a model meant for a missing GPU fails to load alone while the others serve."""
    try:
        check_device_available(spec)
        return canonical_device(spec)
    except DeviceError as e:
        raise LoadError(str(e)) from None
