"""Op functions: each adds one op (plus the Const inputs it needs) to the default graph, checking its
inputs' dtypes and static shapes first, and returns the op's output Tensor(s)."""

from engine.builder.ops.array_ops import *
from engine.builder.ops.array_ops import __all__ as _array_all
from engine.builder.ops.constants import *
from engine.builder.ops.constants import __all__ as _constants_all
from engine.builder.ops.math_ops import *
from engine.builder.ops.math_ops import __all__ as _math_all
from engine.builder.ops.nn_ops import *
from engine.builder.ops.nn_ops import __all__ as _nn_all
from engine.builder.ops.slicing import strided_slice

__all__ = [*_constants_all, *_array_all, *_math_all, *_nn_all, "strided_slice"]
