"""Kernels of the tf.Example parsing ops: ParseExampleV2, ParseExample (v1) and ParseSingleExample, which
turn serialized `Example` protos into dense, sparse and ragged tensors, one per requested feature.

The ops differ in how they take their keys (1-D string tensors, scalar string inputs, attrs) and in the
inputs they accept; the parsing itself is kernels.parsing.example_parser's, TensorFlow's fast parser:

* dense features have a batch dim and their shape; a missing one takes its default or is required; a
  shape whose first dim is unknown (FixedLenSequenceFeature allow_missing) is padded with the default
  to the batch's longest;
* sparse features give indices [n, 2] (example, position), values and dense shape [batch, longest];
  ragged ones give values and row_splits of `ragged_split_types`;
* a scalar `serialized` (ParseExampleV2, ParseSingleExample) parses one Example: no batch dim, sparse
  indices [n, 1] and shape [n], empty ragged splits, and TensorFlow's single-example error messages.

Only float32, int64 and bytes features exist. A batch is read by a compiled walk over its wire bytes where
the plan allows compiled kernels (kernels.parsing.example_wire_walk), by its numpy twin otherwise.
"""

from __future__ import annotations

from typing import Any

from kernels.host import format_dims
from kernels.jit import use_compiled
from kernels.parsing.example_parser import (
    ExampleConfig,
    dense_specs,
    list_specs,
    parse_example_batch,
    parse_single_example,
)
from kernels.registry import kernel

__all__ = ["parse_example_v2", "parse_example", "parse_single_example_op"]


def _check_serialized(serialized: Any, names: Any, *, scalar_ok: bool) -> None:
    if serialized.ndim > 1 or (serialized.ndim == 0 and not scalar_ok):
        wanted = "a scalar or vector" if scalar_ok else "a vector"
        raise ValueError(f"Expected serialized to be {wanted}, got shape: {format_dims(serialized.shape)}")
    if names.size > 0 and names.shape != serialized.shape:
        raise ValueError(f"Expected names have the same shape as serialized: name.shape={format_dims(names.shape)}, "
                         f"serialized.shape={format_dims(serialized.shape)}")


def _parse(xp: Any, config: ExampleConfig, serialized: Any, names: Any, memory_limit: int | None,
           compiled: bool) -> tuple:
    if serialized.ndim == 0:
        return parse_single_example(config, serialized.item()).outputs()
    return parse_example_batch(config, list(serialized), list(names.reshape(-1)), memory_limit,
                               compiled=use_compiled(xp, compiled)).outputs()


def _v2_outputs(attrs: dict) -> int:
    return 3 * attrs["num_sparse"] + len(attrs["Tdense"]) + 2 * len(attrs["ragged_value_types"])


@kernel("ParseExampleV2", devices=("cpu",), outputs=_v2_outputs)
def parse_example_v2(xp: Any, serialized: Any, names: Any, sparse_keys: Any, dense_keys: Any, ragged_keys: Any,
                     *dense_defaults: Any, Tdense: tuple, num_sparse: int, sparse_types: tuple,
                     ragged_value_types: tuple, ragged_split_types: tuple, dense_shapes: tuple,
                     memory_limit: int | None = None, compiled: bool = False) -> tuple:
    """Parse a vector (or a scalar) of serialized Examples; keys come as 1-D string tensors."""
    _check_serialized(serialized, names, scalar_ok=True)
    dense_keys, sparse_keys, ragged_keys = (k.reshape(-1).tolist() for k in (dense_keys, sparse_keys, ragged_keys))
    # The keys and defaults are constants in a served graph: the config is built once per distinct content.
    cache_key = (tuple(dense_keys), tuple(sparse_keys), tuple(ragged_keys), Tdense, num_sparse, sparse_types,
                 ragged_value_types, ragged_split_types, dense_shapes, tuple(map(_content, dense_defaults)))
    try:
        config = _CONFIGS.get(cache_key)
    except TypeError:  # an attr given as a list, not decoded from a graph: nothing to cache it by
        cache_key, config = None, None
    if config is None:
        config = _v2_config(dense_keys, sparse_keys, ragged_keys, dense_defaults, Tdense, num_sparse, sparse_types,
                            ragged_value_types, ragged_split_types, dense_shapes)
        if cache_key is not None:
            if len(_CONFIGS) >= _MAX_CONFIGS:
                _CONFIGS.clear()
            _CONFIGS[cache_key] = config
    return _parse(xp, config, serialized, names, memory_limit, compiled)


_CONFIGS: dict[tuple, ExampleConfig] = {}
_MAX_CONFIGS = 256


def _content(default: Any) -> tuple:
    """A dense default as a hashable value: equal for equal defaults."""
    data = tuple(default.reshape(-1).tolist()) if default.dtype == object else default.tobytes()
    return default.dtype.str, default.shape, data


def _v2_config(dense_keys: list, sparse_keys: list, ragged_keys: list, dense_defaults: tuple, Tdense: tuple,
               num_sparse: int, sparse_types: tuple, ragged_value_types: tuple, ragged_split_types: tuple,
               dense_shapes: tuple) -> ExampleConfig:
    """ParseExampleV2's features, its inputs and attrs checked as TensorFlow checks them."""
    if len(dense_keys) != len(Tdense):
        raise ValueError(f"Expected len(dense_keys) == len(dense_types) but got: {len(dense_keys)} vs. {len(Tdense)}")
    if len(sparse_keys) != num_sparse:
        raise ValueError(f"Expected len(sparse_keys) == num_sparse but got: {len(sparse_keys)} vs. {num_sparse}")
    if len(ragged_keys) != len(ragged_value_types):
        raise ValueError(f"Expected len(ragged_keys) == len(ragged_value_types) but got: {len(ragged_keys)} vs. "
                         f"{len(ragged_value_types)}")
    return ExampleConfig(dense_specs(dense_keys, Tdense, dense_shapes, dense_defaults),
                         list_specs(sparse_keys, sparse_types), list_specs(ragged_keys, ragged_value_types,
                                                                           ragged_split_types))


def _v1_outputs(attrs: dict) -> int:
    return 3 * attrs["Nsparse"] + attrs["Ndense"]


@kernel("ParseExample", devices=("cpu",), outputs=_v1_outputs)
def parse_example(xp: Any, serialized: Any, names: Any, *keys_and_defaults: Any, Nsparse: int, Ndense: int,
                  sparse_types: tuple, Tdense: tuple, dense_shapes: tuple, memory_limit: int | None = None,
                  compiled: bool = False) -> tuple:
    """Parse a vector of serialized Examples; each key comes as a scalar string input."""
    _check_serialized(serialized, names, scalar_ok=False)
    sparse_keys = [k.item() for k in keys_and_defaults[:Nsparse]]
    dense_keys = [k.item() for k in keys_and_defaults[Nsparse:Nsparse + Ndense]]
    if len(sparse_types) != Nsparse:
        raise ValueError("len(sparse_keys) != len(sparse_types)")
    config = ExampleConfig(dense_specs(dense_keys, Tdense, dense_shapes, keys_and_defaults[Nsparse + Ndense:]),
                           list_specs(sparse_keys, sparse_types))
    return _parse(xp, config, serialized, names, memory_limit, compiled)


def _single_outputs(attrs: dict) -> int:
    return 3 * attrs["num_sparse"] + len(attrs["Tdense"])


@kernel("ParseSingleExample", devices=("cpu",), outputs=_single_outputs)
def parse_single_example_op(xp: Any, serialized: Any, *dense_defaults: Any, num_sparse: int, sparse_keys: tuple,
                            dense_keys: tuple, sparse_types: tuple, Tdense: tuple, dense_shapes: tuple) -> tuple:
    """Parse one serialized Example (a scalar); keys come as attrs."""
    if serialized.ndim != 0:
        raise ValueError(f"Expected serialized to be a scalar, got shape: {format_dims(serialized.shape)}")
    if len(sparse_keys) != len(sparse_types):
        raise ValueError("len(sparse_keys) != len(sparse_types)")
    config = ExampleConfig(dense_specs(list(dense_keys), Tdense, dense_shapes, dense_defaults),
                           list_specs(list(sparse_keys), sparse_types))
    return parse_single_example(config, serialized.item()).outputs()
