"""BuildError: an op function refused its arguments while a graph was being built.

Raised at build time, before any GraphDef exists, the way TensorFlow's graph mode refuses a MatMul of
[?,4] by [3,2]: the message names the op type, the node's name and the mismatch.
"""

from __future__ import annotations

__all__ = ["BuildError"]


class BuildError(ValueError):
    """An op's inputs or attrs do not fit it (dtype, rank, static shape, attr value).

    >>> gb.matmul(x, w)        # x: [?,4], w: [3,2]
    BuildError: MatMul 'MatMul': dimensions must be equal, but are 4 and 3 (input shapes [?,4], [3,2])
    """

    def __init__(self, op_type: str, name: str, reason: str):
        self.op_type, self.name, self.reason = op_type, name, reason
        super().__init__(f"{op_type} '{name}': {reason}")
