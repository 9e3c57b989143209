"""Folding a zero Pad into the convolutions that read it, as their EXPLICIT padding.

    Conv2D(Pad(x, [[0, 0], [0, 1], [0, 1], [0, 0]]), W, padding="VALID")
        ->  Conv2D(x, W, padding="EXPLICIT", explicit_paddings=[0, 0, 0, 1, 0, 1, 0, 0])

Keras writes asymmetric padding (ZeroPadding2D before MobileNetV2's and EfficientNet's stride-2
depthwise convolutions, ResNet's first convolution) as a Pad and a VALID convolution: a full copy of
the activation, bordered with zeros, that the convolution then reads. The depthwise kernels write
padding cells as zeros into the tiles they build anyway, so there the copy is pure cost (8% of
MobileNetV2 at batch 32); Conv2D pads into its own buffer, which costs what the Pad did. A VALID window
over the padded tensor and an EXPLICIT window over the original one give the same output size and the
same sums; a convolution already EXPLICIT adds the Pad's amounts to its own.

The Pad qualifies when its paddings are a constant, non-negative, on the spatial axes only (of every
reader's data_format), its pad value is zero (Pad, or PadV2 with a constant 0), and every reader is a
convolution (Conv2D, DepthwiseConv2dNative or their fused forms) taking it as the input, not the filter.
Max pooling is left alone: it pads with -inf, where a Pad's zeros can win. The Pad itself is dropped
unless it is fetched or has a control consumer; a fed Pad is left alone (its readers see the feed).
"""

from __future__ import annotations

import numpy as np

from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import Consumers, constant_value, merged_controls, rebuild

__all__ = ["run"]

_CONVOLUTIONS = frozenset({"Conv2D", "DepthwiseConv2dNative", "_FusedConv2D", "_FusedDepthwiseConv2dNative"})
_SPATIAL_AXES = {"NHWC": (1, 2), "NCHW": (2, 3)}


def _zero_padding_amounts(graph: Graph, pad: Node, ctx: PassContext) -> np.ndarray | None:
    """The Pad's [4, 2] paddings when it pads with zeros by constant, non-negative amounts, else None."""
    if pad.op not in ("Pad", "PadV2") or is_opaque(pad) or ctx.is_fed(pad.name) or len(pad.inputs) < 2:
        return None
    paddings = constant_value(graph, pad.inputs[1], ctx.fed)
    if paddings is None or paddings.shape != (4, 2) or paddings.dtype.kind not in "iu" or (paddings < 0).any():
        return None
    if pad.op == "PadV2":
        value = constant_value(graph, pad.inputs[2], ctx.fed) if len(pad.inputs) > 2 else None
        # NOTE: -0.0 == 0 pads with -0.0, which a convolution's sums cannot tell from +0.0.
        if value is None or value.size != 1 or value.reshape(()) != 0:
            return None
    return paddings.astype(np.int64)


def _takes_padding(reader: Node, pad_out: TensorRef, paddings: np.ndarray) -> bool:
    """Whether `reader` is a VALID or EXPLICIT convolution reading the Pad as its input (only), and the
    Pad pads only the spatial axes of the reader's data_format."""
    if reader.op not in _CONVOLUTIONS or reader.attrs.get("padding") not in ("VALID", "EXPLICIT"):
        return False
    if reader.inputs[0] != pad_out or pad_out in reader.inputs[1:]:
        return False
    spatial = _SPATIAL_AXES.get(reader.attrs.get("data_format", "NHWC"))
    return spatial is not None and not any(paddings[d].any() for d in range(4) if d not in spatial)


def _with_padding(reader: Node, pad: Node, paddings: np.ndarray) -> Node:
    """`reader` reading the Pad's input, the Pad's amounts added to its explicit padding."""
    explicit = [0] * 8
    if reader.attrs.get("padding") == "EXPLICIT":
        explicit = [int(v) for v in reader.attrs.get("explicit_paddings", ())] or explicit
    explicit = [e + int(p) for e, p in zip(explicit, paddings.reshape(-1))]
    attrs = {**reader.attrs, "padding": "EXPLICIT", "explicit_paddings": tuple(explicit)}
    # The Pad's control inputs gated what the convolution read (a frame, a branch): they now gate it.
    controls = merged_controls([reader, pad])
    return Node(reader.name, reader.op, (pad.inputs[0], *reader.inputs[1:]), controls, reader.device, attrs)


def run(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: list[str] = []
    for pad in graph.nodes:
        paddings = _zero_padding_amounts(graph, pad, ctx)
        if paddings is None:
            continue
        pad_out = TensorRef(pad.name, 0)
        readers = [graph.node(name) for name in dict.fromkeys(consumers.data.get(pad_out, ()))]
        if not readers or not all(_takes_padding(r, pad_out, paddings) for r in readers):
            continue
        for reader in readers:
            replaced[reader.name] = _with_padding(reader, pad, paddings)
        if not ctx.is_pinned(pad.name) and not consumers.control.get(pad.name):
            removed.append(pad.name)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
