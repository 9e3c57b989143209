"""The graph optimizer: passes run on each signature's pruned graph before it is planned.

A pass is a module with `run(graph, ctx) -> graph`: it returns a new Graph (in topological order) and
never mutates its input. `PassContext` says what a pass must leave alone: nodes whose outputs are
fetched, fed or run as targets keep their names and meaning, and opaque nodes (engine.passes.guards:
control flow, function calls, stateful ops) are never folded, merged, rewritten or removed.

The pipeline, in order, and why:

0. functionalize_loops: TensorFlow's v1 while loops (Enter/Merge/Switch/NextIteration/Exit frames) that
   are well-formed become While calls of a condition and a body function, first, so that every pass after
   it sees no frames and each body, compiled as a function, goes through this pipeline of its own. The
   first of the two passes that rewrite control-flow nodes; frames it does not raise stay on the dataflow
   executor.
0a. functionalize_conds: then TensorFlow's v1 conds (Switch and Merge outside loop frames) become If calls of
   a then and an else function, so that a graph whose control flow is all raised runs on the plan executor
   (and a loop body holding a cond, compiled as a function, runs as a plain plan).
1. fold_constants: everything computable from constants becomes a constant first, so the passes
   after it see Keras' batch-norm `Rsqrt(variance + epsilon) * gamma` as one per-channel Const,
   and `x * 1` where the 1 was computed.
2. simplify_arithmetic: neutral operands, 1/y, Transpose and Reshape pairs, and a Mul folded into
   the next convolution's weights; before the folds below, so a Mul it removes cannot block them.
3. fold_batch_norm: FusedBatchNorm into the weights before it, leaving Conv2D + BiasAdd ...
4. fold_affine: ... which, with Keras' per-channel Mul/AddV2 chains, folds into the weights too.
5. eliminate_common_subexpressions: after the folds, which make fresh constants and rewire readers,
   and before fusion, which needs each chain's final set of readers.
6. fuse_layer_norm: Keras' LayerNormalization chain (Mean, SquaredDifference, Rsqrt, Mul, AddV2)
   into one `_TensorgateLayerNorm`.
6a. fuse_rms_norm: RMSNorm (Llama, Gemma, T5), however spelled (Pow/Square/Mul(x, x), Rsqrt or
   1 / Sqrt or a division, constant gamma either side), into one `_TensorgateRmsNorm`.
6b. fuse_rotary: rotary embeddings, x * cos + rotate_half(x) * sin (Keras Hub's stack + reshape or a
   concatenation), into one `_TensorgateRotary`.
7. fuse_gelu: GELU's Erf/Erfc/Tanh chains into one `_TensorgateGelu`, before the dense fusions so
   that they can take it as an activation.
7a. fuse_swish: swish (SiLU, x * sigmoid(x), tf.nn.silu's custom-gradient IdentityN too) and hard swish
   (x * relu6(x + 3) / 6) chains into `_TensorgateSwish`/`_TensorgateHardSwish`, before the dense and
   convolution fusions so that they take them as activations.
8. fuse_dense: dense layers over the last axis (Tensordot's MatMul between Reshapes, BatchMatMulV2
   or Einsum against weights) + bias (+ activation) into `_FusedMatMul`/`_TensorgateDense`.
9. fold_tensordot: the Tensordot scaffolding Keras freezes around a dense layer on 3-D data (Shape,
   Gather, Prod, Pack, Transpose, two Reshapes) and the matmul fuse_dense made of it, into one
   `_TensorgateDense` over the original tensor.
9a. fuse_attention: scaled dot-product attention from the Softmax out (products of q and k and of the
   probabilities and v in any layout, scales, an additive bias, a where-mask, Keras' grouped-query
   repeat) into one `_TensorgateAttention`; after the dense fusions, so its inputs are final.
9b. fuse_projection: the bias-free dense layers fuse_dense left (Tensordot MatMul, BatchMatMulV2,
   EinsumDense) into `_TensorgateProjection`, and gated feed-forward pairs (SwiGLU, GeGLU, ReGLU) into
   one `_TensorgateGatedProjection`; after fuse_swish and fuse_gelu, whose ops it takes as gates.
10. fuse_pad: a zero Pad (Keras' ZeroPadding2D) read only by VALID convolutions becomes their
   EXPLICIT padding, saving the padded copy; before fuse_activation, which copies the padding into
   the fused node.
11. fuse_activation: Conv2D/DepthwiseConv2dNative/MatMul + BiasAdd (+ residual Add) + activation
   into one fused kernel, on the chains the folds produced.
11a. fuse_squeeze_excite: squeeze-and-excitation blocks (spatial mean, two 1x1 convolutions, a sigmoid or
   hard-sigmoid gate, the Mul), with the 1x1 projection after them, into one `_TensorgateSqueezeExcite`
   that never writes the excited tensor, and the 1x1 expansion and depthwise step before them into one
   banded `_TensorgateExpandDepthwise`; on the fused ops fuse_activation wrote. CPU only.
12. fuse_inverted_residual: MobileNetV2's blocks (1x1 expand, depthwise, 1x1 project, the fused ops
   fuse_activation just wrote) into one `_TensorgateInvertedResidual`, computed in bands of rows so the
   expanded activation stays in cache. CPU only.
12a. fuse_separable: a depthwise convolution and the 1x1 convolution reading it (Keras' SeparableConv2D,
   MobileNet's depthwise + pointwise pairs, the fused ops fuse_activation wrote) into one
   `_TensorgateSeparableConv2D`, computed in bands of rows so the depthwise result stays in cache; after
   fuse_inverted_residual, which takes MobileNetV2's blocks first. CPU only.
12b. fuse_preactivation: a batch norm (Mul and AddV2 by per-channel constants) and ReLU before 1x1
   convolutions (DenseNet, pre-activation ResNets), which no fold can take, into each convolution as a
   prologue applied chunk by chunk (`_TensorgatePreactivatedConv2D`); after fuse_activation, whose fused
   convolutions it takes. CPU only.
13. winograd: a convolution with a constant 3x3 filter, stride 1, into `_TensorgateWinogradConv2D`,
   which takes the filter's Winograd transform as a constant too (computed once, here); after
   fuse_activation, whose fused nodes it rewrites. CPU only.
14. remove_dead_nodes: last, dropping what the others bypassed (old weights, folded Muls, merged
   duplicates).

`PlanOptions(constant_folding=False)` leaves out fold_constants; `PlanOptions(optimize=False)` all the
others (`pipeline_names`). `tensorgate inspect --optimized model.pb` shows each pass's effect.

Beside the pipeline, fuse_recurrence recognises Keras' LSTM and GRU time loops in While bodies (read
symbolically by loop_trace, which also reads a loop condition as bounds on its counters); the planner
applies it when it binds a While (engine.runtime.calls), running the loop as one `_TensorgateLSTM` or
`_TensorgateGRU` where the loop's inputs allow and as the loop otherwise (also left out by
`PlanOptions(optimize=False)`). fuse_dynamic_rnn does the same for tf.compat.v1.nn.dynamic_rnn's loops over
TF1's LSTM and GRU cells, once functionalize_loops has raised them. padded_nms_loop recognises the padded,
tiled NMS loops of Model Garden and tf.image (proven by canonical's digests of what a body computes) and runs
each as one `_TensorgatePaddedNms`; independent_iterations recognises loops whose iterations are independent
(tf.map_fn's) and runs them on the kernel pool at once (always, being exact).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.graph import Graph
from engine.passes import (
    eliminate_common_subexpressions,
    fold_tensordot,
    fold_affine,
    fold_batch_norm,
    fold_constants,
    functionalize_conds,
    functionalize_loops,
    fuse_activation,
    fuse_attention,
    fuse_dense,
    fuse_gelu,
    fuse_inverted_residual,
    fuse_layer_norm,
    fuse_pad,
    fuse_preactivation,
    fuse_projection,
    fuse_rms_norm,
    fuse_rotary,
    fuse_separable,
    fuse_squeeze_excite,
    fuse_swish,
    remove_dead_nodes,
    simplify_arithmetic,
    winograd,
)
from engine.passes.context import PassContext
from engine.passes.rewrite import topological_order

__all__ = ["CONSTANT_FOLDING", "PIPELINE", "Pass", "PassContext", "optimize", "pipeline_names"]

Pass = Callable[[Graph, PassContext], Graph]

CONSTANT_FOLDING = "fold_constants"

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("functionalize_loops", functionalize_loops.run),
    ("functionalize_conds", functionalize_conds.run),
    (CONSTANT_FOLDING, fold_constants.run),
    ("simplify_arithmetic", simplify_arithmetic.run),
    ("fold_batch_norm", fold_batch_norm.run),
    ("fold_affine", fold_affine.run),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions.run),
    ("fuse_layer_norm", fuse_layer_norm.run),
    ("fuse_rms_norm", fuse_rms_norm.run),
    ("fuse_rotary", fuse_rotary.run),
    ("fuse_gelu", fuse_gelu.run),
    ("fuse_swish", fuse_swish.run),
    ("fuse_dense", fuse_dense.run),
    ("fold_tensordot", fold_tensordot.run),
    ("fuse_attention", fuse_attention.run),
    ("fuse_projection", fuse_projection.run),
    ("fuse_pad", fuse_pad.run),
    ("fuse_activation", fuse_activation.run),
    ("fuse_squeeze_excite", fuse_squeeze_excite.run),
    ("fuse_inverted_residual", fuse_inverted_residual.run),
    ("fuse_separable", fuse_separable.run),
    ("fuse_preactivation", fuse_preactivation.run),
    ("winograd", winograd.run),
    ("remove_dead_nodes", remove_dead_nodes.run),
)


def pipeline_names(constant_folding: bool = True, optimize: bool = True) -> list[str]:
    """The passes that run: constant folding if `constant_folding`, every other pass if `optimize`."""
    return [name for name, _ in PIPELINE if (constant_folding if name == CONSTANT_FOLDING else optimize)]


def optimize(graph: Graph, ctx: PassContext, passes: Sequence[str] | None = None) -> Graph:
    """Run the pipeline (or the named subset of it, in pipeline order) over `graph`."""
    unknown = set(passes or ()) - {name for name, _ in PIPELINE}
    if unknown:
        raise ValueError(f"unknown optimization passes {sorted(unknown)}; known: {[name for name, _ in PIPELINE]}")
    # Passes walk nodes in order and rely on inputs coming first; a GraphDef need not list them so.
    graph = Graph(nodes=tuple(topological_order(graph.nodes)), output_counts=graph.output_counts, library=graph.library)
    for name, run in PIPELINE:
        if passes is None or name in passes:
            graph = run(graph, ctx)
    return graph
