"""`_TensorgateRotary`: rotary position embeddings in the rotate-half form, as one op, which
engine/passes/fuse_rotary.py writes in place of the chain a graph spells it with:

    y = x * cos + rotate_half(x) * sin,     rotate_half(x) = concat(-x2, x1) over the last axis

where x1 and x2 are the halves of x's last axis (Llama, Mistral, Gemma, GPT-NeoX; Keras Hub spells the
concatenation as a stack on axis -2 and a reshape). cos and sin are inputs, broadcast against x as the
chain's Mul broadcasts them, so the op holds whatever positions and frequencies the graph computed.
On CPU a float32 x with cos and sin that broadcast to its shape (with its last axis as their own) runs as
one compiled pass over its rows (kernels/nn/transformer_rows.py); the numpy code is its twin.
"""

from __future__ import annotations

import numpy

from kernels.jit import use_compiled
from kernels.nn import transformer_rows
from kernels.registry import kernel

__all__ = ["rotary"]


@kernel("_TensorgateRotary")
def rotary(xp, x, cos, sin, *, compiled: bool = False):
    """x * cos + concat(-x2, x1) * sin, the halves over x's last axis (which must be even)."""
    if x.ndim == 0 or x.shape[-1] % 2:
        raise ValueError(f"_TensorgateRotary: x has shape {list(x.shape)}; its last axis must have an even size")
    shape = numpy.broadcast_shapes(x.shape, cos.shape, sin.shape)
    if (use_compiled(xp, compiled, x.dtype, cos.dtype, sin.dtype) and shape == x.shape and x.size
            and all(t.ndim and t.shape[-1] == x.shape[-1] for t in (cos, sin))):
        return (transformer_rows.rotate_half(x, cos, sin),)
    half = x.shape[-1] // 2
    rotated = xp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos + rotated * sin,)
