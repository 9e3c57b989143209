"""The decision forest model resource: the Yggdrasil model that TF-DF's load ops read from a SavedModel's assets,
held by `ydf` (Yggdrasil Decision Forests' own Python package), and the ops that create and load it.

A TF-DF SavedModel's init op creates the resource (SimpleMLCreateModelResource) and loads it
(SimpleMLLoadModelFromPathWithHandle: `path` is the assets directory, `file_prefix` the prefix of the model's files
there); TF1 exports made with TF-DF's older wrapper load it with SimpleMLLoadModelFromPath under a
`model_identifier`, which SimpleMLInferenceOp names again. Loading reads what TF-DF's kernel reads
(tensorflow/ops/inference/kernel.cc, YggdrasilModelResource): the header (task, input features, whether a
classifier outputs probabilities), the data spec (feature types, dictionaries, the label's classes), and builds
the engine TF-DF would pick: a fast engine unless none fits the model or the op asked for LEAVES (then the slow,
generic one, which `ydf` runs with `use_slow_engine`).

    >>> forest = ForestModel("simple_ml_model_1")
    >>> forest.load("/models/m/1/assets/", file_prefix="a1b2c3", output_types=(), allow_slow_inference=True, op="...")
    >>> forest.loaded("SimpleMLInferenceOpWithHandle").dense_col_representation
    array([b'1', b'2'], dtype=object)

ydf publishes wheels for x86_64 only: without it every op that needs a model fails naming itself and ydf.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from engine.runtime.resources import Resource, ResourceManager, resource_name
from kernels.forests.features import CategoricalFeature, FeatureLayout
from kernels.registry import kernel

__all__ = ["ForestModel", "LoadedForest", "YdfMissingError", "require_ydf"]

# The container of models named by `model_identifier` (kernel.cc's kModelContainer).
MODEL_CONTAINER = "simple_ml_model_serving"
LEAVES = "LEAVES"
_SUPPORTED_TASKS = ("CLASSIFICATION", "REGRESSION", "RANKING")


class YdfMissingError(RuntimeError):
    """A TF-DF op ran where the `ydf` package is not installed."""


def require_ydf(op: str) -> ModuleType:
    """The `ydf` module; YdfMissingError naming `op` when it is not installed."""
    try:
        import ydf  # an optional dependency: x86_64 wheels only
    except ImportError as e:
        raise YdfMissingError(
            f"{op} runs TensorFlow Decision Forests models with the 'ydf' package (Yggdrasil Decision Forests), which "
            f"is not installed here (ydf publishes wheels for x86_64 only): {e}") from None
    return ydf


@dataclass(frozen=True)
class LoadedForest:
    """One loaded model: the ydf model and what the inference ops need to feed it and shape its output."""

    model: Any
    path: str
    model_name: str
    task: str
    features: FeatureLayout
    dense_col_representation: np.ndarray
    outputs_probabilities: bool
    slow_engine: bool
    # The number of trees, when loaded with output_types=["LEAVES"]; -1 otherwise (TF-DF's num_trees_).
    num_trees: int = -1

    @property
    def output_dim(self) -> int:
        return len(self.dense_col_representation)


class ForestModel(Resource):
    """A model resource, empty until a load op fills it; a later load replaces the model."""

    kind = "decision forest model"

    def __init__(self, name: str):
        super().__init__(name)
        self._lock = threading.Lock()
        self._loaded: LoadedForest | None = None

    def describe(self) -> str:
        loaded = self._loaded
        if loaded is None:
            return f"{self.kind} '{self.name}' (not loaded)"
        return f"{self.kind} '{self.name}' ({loaded.model_name}, {loaded.task.lower()}, from {loaded.path})"

    @property
    def is_loaded(self) -> bool:
        return self._loaded is not None

    def loaded(self, op: str) -> LoadedForest:
        loaded = self._loaded
        if loaded is None:
            require_ydf(op)
            raise ValueError(f"{op}: the decision forest model '{self.name}' is not loaded: its load op "
                             "(SimpleMLLoadModelFromPathWithHandle, in the SavedModel's init op) has not run")
        return loaded

    def load(self, path: str, *, file_prefix: str, output_types: tuple[str, ...], allow_slow_inference: bool,
             op: str, if_empty: bool = False) -> None:
        """Load the model in directory `path` (replacing any loaded one; with `if_empty`, only if none is)."""
        with self._lock:
            if if_empty and self._loaded is not None:
                return
            self._loaded = _load(path, file_prefix, output_types, allow_slow_inference, op)


# --- loading ------------------------------------------------------------------------------------------------------


def _load(path: str, file_prefix: str, output_types: tuple[str, ...], allow_slow_inference: bool,
          op: str) -> LoadedForest:
    ydf = require_ydf(op)
    from yggdrasil_decision_forests.dataset import data_spec_pb2  # ydf's own protos
    from yggdrasil_decision_forests.model import abstract_model_pb2

    for output_type in output_types:
        if output_type != LEAVES:
            raise ValueError(f"{op}: Unknown output types: {output_type}")
    header_path = os.path.join(path, f"{file_prefix}header.pb")
    try:
        with open(header_path, "rb") as f:
            header = abstract_model_pb2.AbstractModel.FromString(f.read())
        quiet = ydf.verbose(0)
        try:
            model = ydf.load_model(path, ydf.ModelIOOptions(file_prefix=file_prefix))
        finally:
            ydf.verbose(quiet)
    except Exception as e:  # noqa: BLE001  (ydf's loader raises what its C++ status says)
        raise ValueError(f"{op}: cannot load the Yggdrasil model in {path!r} (file prefix {file_prefix!r}): "
                         f"{e}") from None
    spec = model.data_spec()
    task = abstract_model_pb2.Task.Name(header.task)
    if task not in _SUPPORTED_TASKS:
        raise ValueError(f"{op}: a {task} model (the Yggdrasil model in {path!r}) cannot be served here: only "
                         f"{', '.join(t.lower() for t in _SUPPORTED_TASKS)} models are")
    leaves = LEAVES in output_types
    num_trees = -1
    if leaves:
        if not hasattr(model, "predict_leaves"):
            raise ValueError(f"{op}: The model is not a decision forest (output_types asks for its LEAVES)")
        num_trees = model.num_trees()
    fast = bool(model.list_compatible_engines())
    if not leaves and not fast and not allow_slow_inference:
        raise ValueError(f"{op}: No compatible fast inference engine found for the model, and "
                         "allow_slow_inference=false")
    loaded = LoadedForest(
        model=model, path=path, model_name=header.name, task=task,
        features=_layout(spec, list(header.input_features), data_spec_pb2, op),
        dense_col_representation=_col_representation(header, spec, task),
        outputs_probabilities=header.classification_outputs_probabilities, slow_engine=leaves or not fast,
        num_trees=num_trees)
    try:
        _warm_up(loaded)
    except Exception as e:  # noqa: BLE001  (what ydf's reader or engine says)
        raise ValueError(f"{op}: ydf cannot run the Yggdrasil model in {path!r}: {e}") from None
    return loaded


def _col_representation(header, spec, task: str) -> np.ndarray:
    """kernel.cc's ComputeDenseColRepresentation: the label's classes for a classifier (its dictionary's strings,
    the index for an integerized label), "logit" for a binary classifier giving logits, "" otherwise."""
    if task != "CLASSIFICATION":
        return np.array([b""], dtype=object)
    label = spec.columns[header.label_col_idx]
    num_classes = label.categorical.number_of_unique_values - 1
    if num_classes == 2 and not header.classification_outputs_probabilities:
        return np.array([b"logit"], dtype=object)
    by_index = {item.index: key for key, item in label.categorical.items.items()}
    names = []
    for index in range(1, num_classes + 1):
        if label.categorical.is_already_integerized:
            names.append(str(index))
        else:
            names.append(by_index.get(index, f"NA({index})"))
    return np.array([name.encode("utf-8") for name in names], dtype=object)


def _layout(spec, input_features: list[int], data_spec_pb2, op: str) -> FeatureLayout:
    """The model's input features by bank, in the order of the header's `input_features` (kernel.cc's
    FeatureIndex), and the data spec's other columns."""
    types = data_spec_pb2.ColumnType
    banks: dict[str, list] = {"numerical": [], "boolean": [], "categorical": [], "categorical_set": []}
    for index in input_features:
        column = spec.columns[index]
        if column.type in (types.NUMERICAL, types.DISCRETIZED_NUMERICAL):
            banks["numerical"].append(column.name)
        elif column.type == types.BOOLEAN:
            banks["boolean"].append(column.name)
        elif column.type in (types.CATEGORICAL, types.CATEGORICAL_SET):
            if column.type == types.CATEGORICAL_SET and column.categorical.is_already_integerized:
                raise ValueError(f"{op}: categorical-set feature '{column.name}' is already integerized, which ydf "
                                 "cannot be given")
            bank = "categorical" if column.type == types.CATEGORICAL else "categorical_set"
            banks[bank].append(_categorical(column))
        else:
            raise ValueError(f'{op}: Non supported feature type "{types.Name(column.type)}" for feature '
                             f'"{column.name}".')
    others = {}
    inputs = set(input_features)
    for index, column in enumerate(spec.columns):
        if index in inputs:
            continue
        if column.type in (types.NUMERICAL, types.DISCRETIZED_NUMERICAL):
            others[column.name] = "float"
        elif column.type == types.BOOLEAN:
            others[column.name] = "bool"
        elif column.type == types.CATEGORICAL:
            others[column.name] = "int" if column.categorical.is_already_integerized else "string"
        elif column.type == types.HASH:
            others[column.name] = "string"
        elif column.type == types.CATEGORICAL_SET and not column.categorical.is_already_integerized:
            others[column.name] = "set"
    return FeatureLayout(numerical=tuple(banks["numerical"]), boolean=tuple(banks["boolean"]),
                         categorical=tuple(banks["categorical"]), categorical_set=tuple(banks["categorical_set"]),
                         other_columns=others)


def _categorical(column) -> CategoricalFeature:
    """A categorical feature's dictionary as an array of strings by index, ydf's missing string ("") last."""
    size = column.categorical.number_of_unique_values
    if column.categorical.is_already_integerized:
        return CategoricalFeature(column.name, size)
    keys: list[bytes | None] = [None] * size
    for key, item in column.categorical.items.items():
        if 0 <= item.index < size:
            keys[item.index] = key.encode("utf-8")
    unrepresentable = {i for i, key in enumerate(keys) if i > 0 and (not key or key.endswith(b"\x00"))}
    if not keys[0] or keys[0].endswith(b"\x00"):
        # NOTE: index 0 is "out of the dictionary": any string the dictionary lacks reads as it.
        known = {key for key in keys if key}
        keys[0] = b"<OOD>"
        while keys[0] in known:
            keys[0] += b"_"
    strings = np.array([key or b"" for key in keys] + [b""], dtype=np.bytes_)
    return CategoricalFeature(column.name, size, strings, frozenset(unrepresentable))


def _warm_up(loaded: LoadedForest) -> None:
    """One missing-valued example through the model, so that ydf builds its engine now and a model whose features
    ydf cannot be fed fails to load rather than on its first request."""
    features = loaded.features
    empty_sets = np.zeros(len(features.categorical_set) + 1, np.int64)
    columns = features.columns(
        np.full((1, len(features.numerical)), np.nan, np.float32), np.zeros((1, len(features.boolean)), np.float32),
        np.full((1, len(features.categorical)), -1, np.int32), np.zeros(0, np.int32), empty_sets,
        np.array([0, len(features.categorical_set)], np.int64), batch=1, slow_engine=loaded.slow_engine,
        op="warm-up")
    predict(loaded, columns, 1)
    if loaded.num_trees >= 0:
        loaded.model.predict_leaves(columns)


def predict(loaded: LoadedForest, columns: dict[str, Any], batch: int) -> np.ndarray:
    """ydf's predictions for the columns of `batch` examples, one row each (one value per class, or one value)."""
    raw = loaded.model.predict(columns, use_slow_engine=loaded.slow_engine, num_threads=1)
    return np.asarray(raw, np.float32).reshape(batch, -1)


# --- the ops ------------------------------------------------------------------------------------------------------


def _path(path: Any, op: str) -> str:
    paths = np.asarray(path).ravel()
    if paths.size != 1:
        raise ValueError(f'{op}: The "path" attribute is expected to contains exactly one entry.')
    return _text(paths[0])


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def forest_handle(handle: Any, op: str) -> ForestModel:
    if not isinstance(handle, ForestModel):
        raise TypeError(f"{op} needs a decision forest model handle (SimpleMLCreateModelResource), got "
                        f"{type(handle).__name__}")
    return handle


def identified_model(resources: ResourceManager, model_identifier: str, op: str) -> ForestModel:
    """The model a SimpleMLLoadModelFromPath op loaded under `model_identifier`."""
    name = f"{MODEL_CONTAINER}/{model_identifier}"
    found = resources.get(name)
    if not isinstance(found, ForestModel) or not found.is_loaded:
        require_ydf(op)
        raise ValueError(f"{op}: Resource {name} does not exist. This error caused the simpleML model not to be "
                         "available for inference. This error is likely due to the \"LoadModel*\" not having been "
                         "run before.")
    return found


@kernel("SimpleMLCreateModelResource", devices=("cpu",), stateful=True)
def create_model_resource(xp, *, container: str = "", shared_name: str = "", resources: ResourceManager,
                          node_name: str) -> tuple:
    name = resource_name(container, shared_name, node_name)
    return (resources.get_or_create(name, ForestModel, lambda: ForestModel(name)),)


@kernel("SimpleMLLoadModelFromPathWithHandle", devices=("cpu",), outputs=0, stateful=True)
def load_model_from_path_with_handle(xp, model_handle, path, *, output_types=(), file_prefix: str = "",
                                     allow_slow_inference: bool = True) -> tuple:
    op = "SimpleMLLoadModelFromPathWithHandle"
    forest_handle(model_handle, op).load(
        _path(path, op), file_prefix=_text(file_prefix), output_types=tuple(_text(t) for t in output_types or ()),
        allow_slow_inference=bool(allow_slow_inference), op=op)
    return ()


@kernel("SimpleMLLoadModelFromPath", devices=("cpu",), outputs=0, stateful=True)
def load_model_from_path(xp, path, *, model_identifier: str, resources: ResourceManager) -> tuple:
    # NOTE: as in TF-DF's kernel, a model already loaded under the identifier stays (the op logs "already loaded").
    op = "SimpleMLLoadModelFromPath"
    name = f"{MODEL_CONTAINER}/{_text(model_identifier)}"
    forest = resources.get_or_create(name, ForestModel, lambda: ForestModel(name))
    forest.load(_path(path, op), file_prefix="", output_types=(), allow_slow_inference=True, op=op, if_empty=True)
    return ()
