"""A servable: one loaded, warmed-up version of a model, ready to run requests.

Loading a version parses its graph, checks every op has a kernel, resolves the signatures (from
config.yaml, or the default one a frozen graph implies) and warms each signature up, so that the
first request after a version becomes visible pays no compilation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
import numpy as np

from engine import Graph, Session, SessionOptions, load_graph, parse_tensor_name
from engine.errors import EngineError, GraphError
from engine.plan import PLACEHOLDER_OPS
from engine.prune import prune_to_signature
from engine.summary import graph_outputs
from service.batching import BatchingOptions, BatchScheduler, BatchStats
from service.config import ModelConfig
from service.errors import BadRequest, NotFound
from service.signatures import DEFAULT_SIGNATURE, Signature, TensorSpec

__all__ = ["Servable", "LoadError", "load_servable"]

log = logging.getLogger("tensorgate.servable")

# Attributes that name a node's first output dtype, most specific first, for the metadata of outputs
# that warm-up could not run (ArgMax has T for its input and output_type for its output).
_DTYPE_ATTRS = ("out_type", "output_type", "DstT", "Tout", "dtype", "T")


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

    def close(self) -> None:
        """Stop batching (queued requests still run); called once the version leaves service."""
        if self.scheduler is not None:
            self.scheduler.close()

    def signature(self, name: str | None) -> Signature:
        """`name`, or the default signature (`serving_default`, else the only/first one)."""
        if name is None or name == "":
            if DEFAULT_SIGNATURE in self.signatures:
                return self.signatures[DEFAULT_SIGNATURE]
            return next(iter(self.signatures.values()))
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

    def resolve_output(self, signature: Signature, name: str) -> TensorSpec:
        for spec in signature.outputs:
            if spec.alias == name:
                return spec
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


def _warm_up(session: Session, signature: Signature) -> Signature:
    """Compile the signature's plan and, where the input shapes allow, run it at batch 1 and 2.

    The runs fill in the outputs' dtypes and shapes for metadata: a dimension that follows the
    batch becomes unknown (-1 in metadata). A signature whose inputs have unknown dimensions other
    than the leading one is only compiled: guessing sizes there (an image's height) could fail a
    valid model.
    """
    fetches = [s.tensor for s in signature.outputs]
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
    except EngineError as e:
        raise LoadError(f"warm-up of signature '{signature.name}' failed: {e}") from None
    shapes = [tuple(a.shape) for a in first]
    if any(s.shape and s.shape[0] is None for s in signature.inputs):
        try:
            second = session.run(fetches, {s.tensor: _warmup_value(s, 2) for s in signature.inputs})
            shapes = [tuple(None if a != b else a for a, b in zip(x.shape, y.shape)) if x.ndim == y.ndim else None
                      for x, y in zip(first, second)]
        except EngineError:
            pass  # a graph that only takes batch 1; the shapes of the first run stand
    outputs = tuple(
        TensorSpec(spec.alias, spec.tensor, arr.dtype, shape) for spec, arr, shape in zip(signature.outputs, first, shapes)
    )
    return Signature(signature.name, signature.inputs, outputs)


def load_servable(
    model: str,
    version: int,
    source: Path | bytes,
    config: ModelConfig,
    options: SessionOptions,
    *,
    batching: BatchingOptions | None = None,
    on_batch: Callable[[BatchStats], None] | None = None,
) -> Servable:
    """Parse, check, resolve signatures and warm up; raises LoadError saying what is wrong.
    With `batching`, the servable gets a batch scheduler (started once everything else loaded)."""
    start = time.perf_counter()
    try:
        graph = load_graph(source)
        session = Session(graph, device="cpu", options=options)
    except GraphError as e:
        raise LoadError(str(e)) from None
    signatures = {name: _warm_up(session, sig) for name, sig in _build_signatures(graph, config).items()}
    seconds = time.perf_counter() - start
    scheduler = None
    if batching is not None:
        scheduler = BatchScheduler(
            lambda feeds, fetches: session.run(list(fetches), dict(feeds)), batching, name=f"{model}-{version}", on_batch=on_batch
        )
    log.info("loaded %s version %d in %.3f s%s", model, version, seconds, " (batching)" if scheduler else "")
    return Servable(model, version, session, signatures, seconds, scheduler)
