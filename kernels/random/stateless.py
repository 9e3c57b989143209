"""Stateless random ops: TensorFlow's StatelessRandom* kernels, whose values depend only on their seed (v1)
or their key, counter and algorithm (v2), as TensorFlow's CPU kernels give them: bit-for-bit, except float32
normals, within an ulp (TensorFlow takes log, sin and cos from glibc's float functions).

Keras 3's random layers run these at serving time: a layer's seed-generator variable becomes a seed,
`StatelessRandomGetKeyCounter` turns it into a Philox key and counter, and `StatelessRandomUniformV2` draws
from them. The generator and distributions are in kernels.random.philox. Only Philox is implemented, as on
TensorFlow's CPU (algorithm 1; 3, "auto", selects it); TensorFlow's CPU refuses ThreeFry (2) with the same
"Unsupported algorithm id" error as here.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from kernels.host import format_dims, host_vector
from kernels.limits import check_elements
from kernels.random.philox import (
    Generator,
    full_range_ints,
    generator_from_seed,
    key_counter_arrays,
    normal_floats,
    truncated_normal_floats,
    uniform_floats,
    uniform_ints,
)
from kernels.registry import kernel

__all__ = [
    "get_alg",
    "get_key_counter",
    "get_key_counter_alg",
    "random_normal",
    "random_normal_v2",
    "random_uniform",
    "random_uniform_full_int",
    "random_uniform_full_int_v2",
    "random_uniform_int",
    "random_uniform_int_v2",
    "random_uniform_v2",
    "truncated_normal",
    "truncated_normal_v2",
]

RNG_ALG_PHILOX, RNG_ALG_THREEFRY, RNG_ALG_AUTO_SELECT = 1, 2, 3

_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64))
_INTS = (np.dtype(np.int32), np.dtype(np.int64))
_FULL_INTS = (*_INTS, np.dtype(np.uint32), np.dtype(np.uint64))


# --- inputs ------------------------------------------------------------------------------------------------


def _output_shape(shape: Any) -> tuple[int, ...]:
    if shape.ndim > 1:
        raise ValueError(f"shape must be a vector of {{int32,int64}}, got shape {format_dims(shape.shape)}")
    dims = tuple(host_vector(shape))
    for d in dims:
        if d < 0:
            raise ValueError(f"Dimension {d} must be >= 0")
    return dims


def _seed_generator(seed: Any) -> Generator:
    if seed.shape != (2,):
        raise ValueError(f"seed must have shape [2], not {format_dims(seed.shape)}")
    return generator_from_seed(seed)


def _key_counter_generator(key: Any, counter: Any, alg: Any) -> Generator:
    """TensorFlow's GetKeyCounterAlgFromInputs and its checks, in its order, then the Philox generator."""
    if alg.ndim != 0:
        raise ValueError(f"input 3 (0-based) must have shape [], not {format_dims(alg.shape)}")
    algorithm = int(alg)
    if algorithm == RNG_ALG_AUTO_SELECT:
        algorithm = RNG_ALG_PHILOX
    if key.shape != (1,):
        raise ValueError(f"key must have shape [1], not {format_dims(key.shape)}. "
                         "(Note that batched keys are not supported yet.)")
    # NOTE: TensorFlow 2.21 takes the algorithm id as the minimum counter length (a Philox counter has 2).
    minimum = max(algorithm, 2) if algorithm == RNG_ALG_PHILOX else algorithm
    if counter.ndim != 1 or counter.shape[0] < minimum:
        raise ValueError(f"counter must be a vector with length at least {minimum}; got shape: "
                         f"{format_dims(counter.shape)}. (Note that batched counters are not supported yet.)")
    if algorithm != RNG_ALG_PHILOX:
        raise ValueError(f"Unsupported algorithm id: {algorithm}")
    k = int(key[0])
    c_low, c_high = (int(v) for v in counter[:2].tolist())
    return (k & 0xFFFFFFFF, k >> 32), (c_low & 0xFFFFFFFF, c_low >> 32, c_high & 0xFFFFFFFF, c_high >> 32)


def _check_dtype(dtype: Any, allowed: tuple[np.dtype, ...], op: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in allowed:
        raise ValueError(f"{op} has no kernel for dtype {dtype.name}; TensorFlow allows "
                         f"{', '.join(d.name for d in allowed)}")
    return dtype


def _draw(xp: Any, dims: tuple[int, ...], dtype: np.dtype, draw, memory_limit: int | None = None) -> tuple[Any]:
    """`draw(size)` shaped to `dims`; an empty output draws nothing (and, as in TensorFlow, checks nothing
    more: the integer ops' bounds are checked inside `draw`). The shape is a value a client may send:
    an output over the memory limit is refused before anything is drawn."""
    size = math.prod(dims)
    check_elements(size, dtype, memory_limit, "random output", dims)
    if size == 0:
        return (xp.zeros(dims, dtype=dtype),)
    return (draw(size).reshape(dims),)


def _int_bounds(minval: Any, maxval: Any) -> tuple[int, int]:
    if minval.ndim != 0:
        raise ValueError(f"minval must be 0-D, got shape {format_dims(minval.shape)}")
    if maxval.ndim != 0:
        raise ValueError(f"maxval must be 0-D, got shape {format_dims(maxval.shape)}")
    lo, hi = int(minval), int(maxval)
    if lo >= hi:
        raise ValueError(f"Need minval < maxval, got {lo} >= {hi}")
    return lo, hi


# --- key, counter and algorithm ----------------------------------------------------------------------------


@kernel("StatelessRandomGetKeyCounter", outputs=2)
def get_key_counter(xp, seed):
    """The Philox key ([1] uint64) and counter ([2] uint64) that a [2] seed scrambles to."""
    return key_counter_arrays(xp, _seed_generator(seed))


@kernel("StatelessRandomGetKeyCounterAlg", outputs=3)
def get_key_counter_alg(xp, seed):
    """Key and counter as StatelessRandomGetKeyCounter, and the algorithm: Philox (1)."""
    key, counter = key_counter_arrays(xp, _seed_generator(seed))
    return key, counter, xp.asarray(RNG_ALG_PHILOX, dtype=xp.int32)


@kernel("StatelessRandomGetAlg")
def get_alg(xp):
    """The algorithm TensorFlow's CPU picks: Philox (1)."""
    return (xp.asarray(RNG_ALG_PHILOX, dtype=xp.int32),)


# --- v2: shape, key, counter, alg --------------------------------------------------------------------------


@kernel("StatelessRandomUniformV2")
def random_uniform_v2(xp, shape, key, counter, alg, *, dtype=np.float32, memory_limit=None):
    """Floats uniform in [0, 1)."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FLOATS, "StatelessRandomUniformV2")
    gen = _key_counter_generator(key, counter, alg)
    return _draw(xp, dims, dtype, lambda n: uniform_floats(xp, gen, n, dtype), memory_limit)


@kernel("StatelessRandomNormalV2")
def random_normal_v2(xp, shape, key, counter, alg, *, dtype=np.float32, memory_limit=None):
    """Standard normal floats (Box-Muller)."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FLOATS, "StatelessRandomNormalV2")
    gen = _key_counter_generator(key, counter, alg)
    return _draw(xp, dims, dtype, lambda n: normal_floats(xp, gen, n, dtype), memory_limit)


@kernel("StatelessTruncatedNormalV2")
def truncated_normal_v2(xp, shape, key, counter, alg, *, dtype=np.float32, memory_limit=None):
    """Standard normal floats inside (-2, 2), by rejection."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FLOATS, "StatelessTruncatedNormalV2")
    gen = _key_counter_generator(key, counter, alg)
    return _draw(xp, dims, dtype, lambda n: truncated_normal_floats(xp, gen, n, dtype), memory_limit)


@kernel("StatelessRandomUniformIntV2")
def random_uniform_int_v2(xp, shape, key, counter, alg, minval, maxval, *, dtype, memory_limit=None):
    """Integers uniform in [minval, maxval) (with TensorFlow's slight modulo bias)."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _INTS, "StatelessRandomUniformIntV2")
    gen = _key_counter_generator(key, counter, alg)
    return _draw(xp, dims, dtype, lambda n: uniform_ints(xp, gen, n, dtype, *_int_bounds(minval, maxval)), memory_limit)


@kernel("StatelessRandomUniformFullIntV2")
def random_uniform_full_int_v2(xp, shape, key, counter, alg, *, dtype=np.uint64, memory_limit=None):
    """Integers over the whole range of `dtype`."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FULL_INTS, "StatelessRandomUniformFullIntV2")
    gen = _key_counter_generator(key, counter, alg)
    return _draw(xp, dims, dtype, lambda n: full_range_ints(xp, gen, n, dtype), memory_limit)


# --- v1: shape, seed ---------------------------------------------------------------------------------------


@kernel("StatelessRandomUniform")
def random_uniform(xp, shape, seed, *, dtype=np.float32, memory_limit=None):
    """Floats uniform in [0, 1) from a [2] seed."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FLOATS, "StatelessRandomUniform")
    gen = _seed_generator(seed)
    return _draw(xp, dims, dtype, lambda n: uniform_floats(xp, gen, n, dtype), memory_limit)


@kernel("StatelessRandomNormal")
def random_normal(xp, shape, seed, *, dtype=np.float32, memory_limit=None):
    """Standard normal floats from a [2] seed."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FLOATS, "StatelessRandomNormal")
    gen = _seed_generator(seed)
    return _draw(xp, dims, dtype, lambda n: normal_floats(xp, gen, n, dtype), memory_limit)


@kernel("StatelessTruncatedNormal")
def truncated_normal(xp, shape, seed, *, dtype=np.float32, memory_limit=None):
    """Standard normal floats inside (-2, 2) from a [2] seed."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FLOATS, "StatelessTruncatedNormal")
    gen = _seed_generator(seed)
    return _draw(xp, dims, dtype, lambda n: truncated_normal_floats(xp, gen, n, dtype), memory_limit)


@kernel("StatelessRandomUniformInt")
def random_uniform_int(xp, shape, seed, minval, maxval, *, dtype, memory_limit=None):
    """Integers uniform in [minval, maxval) from a [2] seed."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _INTS, "StatelessRandomUniformInt")
    gen = _seed_generator(seed)
    return _draw(xp, dims, dtype, lambda n: uniform_ints(xp, gen, n, dtype, *_int_bounds(minval, maxval)), memory_limit)


@kernel("StatelessRandomUniformFullInt")
def random_uniform_full_int(xp, shape, seed, *, dtype=np.uint64, memory_limit=None):
    """Integers over the whole range of `dtype` from a [2] seed."""
    dims, dtype = _output_shape(shape), _check_dtype(dtype, _FULL_INTS, "StatelessRandomUniformFullInt")
    gen = _seed_generator(seed)
    return _draw(xp, dims, dtype, lambda n: full_range_ints(xp, gen, n, dtype), memory_limit)
