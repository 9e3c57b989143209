"""The input features of TF-DF's inference ops, as ydf takes them: the op's packed banks unpacked into one column per
feature of the Yggdrasil model.

TF-DF's inference ops take a model's features packed by type (tensorflow/ops/inference/kernel.cc):
`numerical_features` float [batch, n] (NaN missing), `boolean_features` float [batch, n] (NaN missing),
`categorical_int_features` int32 [batch, n] (already integerized by the graph's lookup tables: -1 missing, 0 out
of the dictionary, an index outside [-1, size) read as 0) and the categorical sets as a two-level ragged tensor
(`values`, `row_splits_dim_1` over (example, feature) cells, `row_splits_dim_2` over examples; a set whose first
item is -1 is missing). Within a bank the columns follow the order of the model's input features (the header's
`input_features`, data-spec column indices). ydf takes one array per data-spec column: floats, bools, and for a
categorical feature the dictionary's strings (which ydf looks up again: "" is missing, an unknown string out of
the dictionary) or, for an integerized one, the indices themselves.

    >>> city = CategoricalFeature("city", 3, np.array([b"<OOD>", b"paris", b"rome", b""], dtype=np.bytes_))
    >>> layout = FeatureLayout(numerical=("age",), categorical=(city,))
    >>> layout.columns(np.array([[31.0], [np.nan]], np.float32), np.zeros((0, 0), np.float32),
    ...                np.array([[2], [-1]], np.int32), np.zeros(0, np.int32), np.zeros(1, np.int64),
    ...                np.zeros(1, np.int64), batch=2, slow_engine=False, op="SimpleMLInferenceOpWithHandle")
    {'age': array([31., nan], dtype=float32), 'city': array([b'rome', b''], dtype='|S5')}

Two inputs have no representation in ydf's Python API, and are refused by name rather than answered wrongly: a
missing boolean value (ydf's boolean columns are numpy bools) and a missing categorical set (ydf reads an empty
set, or a set of strings, never a missing one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CategoricalFeature", "FeatureLayout", "batch_size"]

# ydf's missing categorical string (PopulateColumnCategoricalNPBytes reads "" as missing).
MISSING_STRING = b""


@dataclass(frozen=True)
class CategoricalFeature:
    """A categorical or categorical-set feature: its data-spec name, dictionary size (`number_of_unique_values`,
    index 0 being out of the dictionary) and, unless it is already integerized, the string of each index with
    ydf's missing string last (so that -1 indexes it)."""

    name: str
    size: int
    keys: np.ndarray | None = None
    # Indices whose dictionary string ydf cannot be given back (none, "", or one with trailing NULs, which numpy's
    # bytes arrays drop).
    unrepresentable: frozenset[int] = frozenset()

    def strings(self, indices: np.ndarray, op: str) -> np.ndarray:
        """What ydf reads as these indices (already in [-1, size)): integers for an integerized feature, else the
        dictionary's strings."""
        if self.keys is None:
            return indices.astype(np.int32)
        if self.unrepresentable:
            bad = np.isin(indices, list(self.unrepresentable))
            if bad.any():
                raise ValueError(f"{op}: index {int(indices[bad][0])} of categorical feature '{self.name}' has a "
                                 "dictionary string that ydf cannot be given (empty, or ending in NUL bytes)")
        return self.keys[indices]


def _in_dictionary(values: np.ndarray, size: int) -> np.ndarray:
    """TF-DF's rule for integerized categorical values: one outside [-1, size) is out of the dictionary (0)."""
    return np.where((values < -1) | (values >= size), 0, values)


@dataclass(frozen=True)
class FeatureLayout:
    """The model's input features by bank, each in bank-column order, and what ydf is fed for the data spec's other
    columns (the label, weights: ydf's dataset reader wants them all)."""

    numerical: tuple[str, ...] = ()
    boolean: tuple[str, ...] = ()
    categorical: tuple[CategoricalFeature, ...] = ()
    categorical_set: tuple[CategoricalFeature, ...] = ()
    # column name -> ("float" | "bool" | "int" | "string" | "set"): fed as missing (NaN, False, -1, "", {}).
    other_columns: dict[str, str] = field(default_factory=dict)

    def check_banks(self, numerical: np.ndarray, boolean: np.ndarray, categorical: np.ndarray, batch: int) -> None:
        """The banks' widths are the model's feature counts, and a bank with features has a row per example."""
        for bank, features, what in ((numerical, self.numerical, "numerical_features"),
                                     (boolean, self.boolean, "boolean_features"),
                                     (categorical, self.categorical, "categorical_int_features")):
            if bank.shape[1] != len(features):
                raise ValueError(f"Unexpected dimension of {what} bank: {bank.shape[1]} columns for the model's "
                                 f"{len(features)} such features.")
            if features and bank.shape[0] != batch:
                raise ValueError(f"{what} has {bank.shape[0]} rows for a batch of {batch}")

    def columns(self, numerical: np.ndarray, boolean: np.ndarray, categorical: np.ndarray, set_values: np.ndarray,
                set_cells: np.ndarray, set_rows: np.ndarray, *, batch: int, slow_engine: bool,
                op: str) -> dict[str, Any]:
        """One column per data-spec column, as ydf's `predict` takes them."""
        data: dict[str, Any] = {}
        for j, name in enumerate(self.numerical):
            data[name] = np.ascontiguousarray(numerical[:, j], dtype=np.float32)
        for j, name in enumerate(self.boolean):
            values = boolean[:, j]
            if np.isnan(values).any():
                raise ValueError(f"{op}: boolean feature '{name}' has a missing value (NaN), which ydf cannot be "
                                 "given (its boolean columns have no missing value)")
            # NOTE: TF-DF's fast engines read a float as a C++ bool (non-zero is true), its generic engine as >= 0.5.
            data[name] = values >= 0.5 if slow_engine else values != 0
        for j, feature in enumerate(self.categorical):
            data[feature.name] = feature.strings(_in_dictionary(categorical[:, j], feature.size), op)
        for j, feature in enumerate(self.categorical_set):
            data[feature.name] = self._sets(feature, j, set_values, set_cells, set_rows, batch, op)
        for name, kind in self.other_columns.items():
            data[name] = _missing_column(kind, batch)
        return data

    def _sets(self, feature: CategoricalFeature, column: int, values: np.ndarray, cells: np.ndarray,
              rows: np.ndarray, batch: int, op: str) -> list[np.ndarray]:
        """Feature `column`'s set of each example, from the two-level ragged tensor (kernel.cc's
        ExtractCategoricalSetInt)."""
        width = len(self.categorical_set)
        sets = []
        for example in range(batch):
            if example >= rows.shape[0] or rows[example] != example * width:
                raise ValueError(f"{op}: Unexpected features_row_splits_dim_2 size: categorical_set_int_features_"
                                 f"row_splits_dim_2 must be [0, {width}, {2 * width}, ...] over the batch")
            cell = example * width + column
            if cell + 1 >= cells.shape[0]:
                raise ValueError(f"{op}: Unexpected features_row_splits_dim_1 size: {cells.shape[0]} splits for "
                                 f"{batch} examples of {width} categorical-set features")
            begin, end = int(cells[cell]), int(cells[cell + 1])
            if not 0 <= begin <= end <= values.shape[0]:
                raise ValueError(f"{op}: categorical_set_int_features_row_splits_dim_1 has [{begin}, {end}) for "
                                 f"{values.shape[0]} values")
            items = _in_dictionary(values[begin:end], feature.size)
            if items.size and (items == -1).any():
                what = "is missing ([-1])" if items[0] == -1 else "holds -1"
                raise ValueError(f"{op}: categorical-set feature '{feature.name}' of example {example} {what}, which "
                                 "ydf cannot be given (its sets are never missing)")
            sets.append(feature.strings(items, op))
        return sets


def _missing_column(kind: str, batch: int) -> Any:
    if kind == "float":
        return np.full(batch, np.nan, np.float32)
    if kind == "bool":
        return np.zeros(batch, np.bool_)
    if kind == "int":
        return np.full(batch, -1, np.int32)
    if kind == "string":
        return np.full(batch, MISSING_STRING, dtype="S1")
    return [np.empty(0, dtype="S1") for _ in range(batch)]


def batch_size(numerical: np.ndarray, boolean: np.ndarray, categorical: np.ndarray, set_rows: np.ndarray) -> int:
    """The batch: the first dimension of the banks that have one (kernel.cc's ComputeBatchSize: a bank of 0 rows,
    and the set's row splits [0], stand for none)."""
    batch = 0
    for size in (numerical.shape[0], boolean.shape[0], categorical.shape[0], set_rows.shape[0] - 1):
        if size > 0:
            if batch and size != batch:
                raise ValueError(f"The batch size of the input features are inconsistent: {batch} vs {size}.")
            batch = size
    return batch
