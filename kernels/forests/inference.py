"""TF-DF's inference ops: a loaded decision forest model (kernels.forests.model) applied to the op's packed feature
banks (kernels.forests.features), run by ydf, with TF-DF's outputs (tensorflow/ops/inference/kernel.cc).

- SimpleMLInferenceOpWithHandle (the model through its handle) and SimpleMLInferenceOp (the model a
  SimpleMLLoadModelFromPath loaded under `model_identifier`) give `dense_predictions`, float [batch,
  dense_output_dim]: a classifier's probability per class (its label's classes, the out-of-dictionary class left
  out; a binary classifier whose engine gives the positive class's probability p answers [1 - p, p], p clamped to
  [0, 1]), or its logits where it was trained not to output probabilities (one column for a binary classifier), a
  regression's value, a ranking's relevance; and `dense_col_representation`, string [dense_output_dim]: the class
  names, "logit", or "". `dense_output_dim` must be the model's output dimension.
- SimpleMLInferenceLeafIndexOpWithHandle gives `leaves`, int32 [batch, num_trees]: the index of each tree's active
  leaf (leaves numbered depth first, the negative child first), for a model loaded with output_types=["LEAVES"].

    >>> dense_predictions, classes = inference_with_handle(np, numerical, boolean, categorical, set_values,
    ...                                                     set_cells, set_rows, model, dense_output_dim=2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.runtime.resources import ResourceManager
from kernels.forests.features import batch_size
from kernels.forests.model import LoadedForest, forest_handle, identified_model, predict
from kernels.registry import kernel

__all__ = ["leaf_indices", "predictions"]

# The banks in input order: (name, dtype, rank).
_BANKS = (("numerical_features", np.float32, 2), ("boolean_features", np.float32, 2),
          ("categorical_int_features", np.int32, 2), ("categorical_set_int_features_values", np.int32, 1),
          ("categorical_set_int_features_row_splits_dim_1", np.int64, 1),
          ("categorical_set_int_features_row_splits_dim_2", np.int64, 1))


def _banks(inputs: tuple, op: str) -> list[np.ndarray]:
    banks = []
    for value, (name, dtype, rank) in zip(inputs, _BANKS):
        value = np.asarray(value)
        if value.ndim != rank:
            raise ValueError(f"{op}: {name} must have rank {rank}, got shape {list(value.shape)}")
        banks.append(value.astype(dtype, copy=False))
    return banks


def _columns(loaded: LoadedForest, inputs: tuple, op: str) -> tuple[int, dict[str, Any]]:
    numerical, boolean, categorical, set_values, set_cells, set_rows = _banks(inputs, op)
    batch = batch_size(numerical, boolean, categorical, set_rows)
    loaded.features.check_banks(numerical, boolean, categorical, batch)
    return batch, loaded.features.columns(numerical, boolean, categorical, set_values, set_cells, set_rows,
                                          batch=batch, slow_engine=loaded.slow_engine, op=op)


def predictions(loaded: LoadedForest, inputs: tuple, dense_output_dim: int, op: str) -> tuple[np.ndarray, np.ndarray]:
    """`dense_predictions` and `dense_col_representation` for the six feature banks `inputs`."""
    classes = loaded.dense_col_representation
    if dense_output_dim != loaded.output_dim:
        raise ValueError(f'{op}: The "dense_output_dim"={dense_output_dim} attribute does not match the model output '
                         f"dimension={loaded.output_dim}")
    batch, columns = _columns(loaded, inputs, op)
    if batch == 0:
        return np.zeros((0, dense_output_dim), np.float32), classes.copy()
    raw = predict(loaded, columns, batch)
    probabilities = loaded.task == "CLASSIFICATION" and loaded.outputs_probabilities
    if probabilities and raw.shape[1] == 1 and dense_output_dim == 2:
        positive = np.clip(raw[:, 0], np.float32(0), np.float32(1))
        return np.stack([np.float32(1) - positive, positive], axis=1), classes.copy()
    if raw.shape[1] != dense_output_dim:
        raise ValueError(f"{op}: the model gives {raw.shape[1]} values per example, not {dense_output_dim}")
    if probabilities and loaded.slow_engine:
        # NOTE: TF-DF's generic engine clamps each probability to [0, 1]; its fast engines do not.
        raw = np.clip(raw, np.float32(0), np.float32(1))
    return raw, classes.copy()


def leaf_indices(loaded: LoadedForest, inputs: tuple, op: str) -> np.ndarray:
    """`leaves`, int32 [batch, num_trees], for the six feature banks `inputs`."""
    if loaded.num_trees < 0:
        raise ValueError(f'{op}: the model was loaded without output_types=["LEAVES"], so it gives no leaves')
    batch, columns = _columns(loaded, inputs, op)
    if batch == 0:
        return np.zeros((0, loaded.num_trees), np.int32)
    return np.asarray(loaded.model.predict_leaves(columns), np.int32).reshape(batch, loaded.num_trees)


def _output_dim(dense_output_dim: int, op: str) -> int:
    if dense_output_dim < 1:
        raise ValueError(f"{op}: dense_output_dim must be at least 1, got {dense_output_dim}")
    return int(dense_output_dim)


@kernel("SimpleMLInferenceOpWithHandle", devices=("cpu",), outputs=2, stateful=True)
def inference_with_handle(xp, numerical_features, boolean_features, categorical_int_features,
                          categorical_set_int_features_values, categorical_set_int_features_row_splits_dim_1,
                          categorical_set_int_features_row_splits_dim_2, model_handle, *,
                          dense_output_dim: int) -> tuple:
    op = "SimpleMLInferenceOpWithHandle"
    inputs = (numerical_features, boolean_features, categorical_int_features, categorical_set_int_features_values,
              categorical_set_int_features_row_splits_dim_1, categorical_set_int_features_row_splits_dim_2)
    loaded = forest_handle(model_handle, op).loaded(op)
    return predictions(loaded, inputs, _output_dim(dense_output_dim, op), op)


@kernel("SimpleMLInferenceOp", devices=("cpu",), outputs=2, stateful=True)
def inference(xp, numerical_features, boolean_features, categorical_int_features,
              categorical_set_int_features_values, categorical_set_int_features_row_splits_dim_1,
              categorical_set_int_features_row_splits_dim_2, *, model_identifier: str, dense_output_dim: int,
              resources: ResourceManager) -> tuple:
    op = "SimpleMLInferenceOp"
    inputs = (numerical_features, boolean_features, categorical_int_features, categorical_set_int_features_values,
              categorical_set_int_features_row_splits_dim_1, categorical_set_int_features_row_splits_dim_2)
    identifier = model_identifier.decode("utf-8") if isinstance(model_identifier, bytes) else model_identifier
    loaded = identified_model(resources, identifier, op).loaded(op)
    return predictions(loaded, inputs, _output_dim(dense_output_dim, op), op)


@kernel("SimpleMLInferenceLeafIndexOpWithHandle", devices=("cpu",), stateful=True)
def inference_leaf_index_with_handle(xp, numerical_features, boolean_features, categorical_int_features,
                                     categorical_set_int_features_values,
                                     categorical_set_int_features_row_splits_dim_1,
                                     categorical_set_int_features_row_splits_dim_2, model_handle) -> tuple:
    op = "SimpleMLInferenceLeafIndexOpWithHandle"
    inputs = (numerical_features, boolean_features, categorical_int_features, categorical_set_int_features_values,
              categorical_set_int_features_row_splits_dim_1, categorical_set_int_features_row_splits_dim_2)
    return (leaf_indices(forest_handle(model_handle, op).loaded(op), inputs, op),)
