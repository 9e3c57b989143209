"""What the TF-DF kernel tests share: running an op, the fixtures' Yggdrasil models, small models trained by ydf,
and feature banks packed as TF-DF's graph packs them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import kernels
from engine.runtime.resources import ResourceManager
from tests.golden import FIXTURES

SAVED_MODELS = FIXTURES / "saved_models"


def run(op: str, *inputs, resources: ResourceManager | None = None, node_name: str = "node", **attrs) -> tuple:
    """The op's outputs on the CPU (TF-DF's ops run there only)."""
    context = {"resources": resources if resources is not None else ResourceManager(), "node_name": node_name}
    return kernels.lookup(op, "cpu").bind(np, attrs, context)(*inputs)


def assets(case: str) -> tuple[Path, str]:
    """A fixture's Yggdrasil model: its directory (the SavedModel's assets/) and its files' prefix."""
    directory = SAVED_MODELS / case / "model" / "assets"
    done = next(directory.glob("*done"))
    return directory, done.name[: -len("done")]


def load(directory: Path, prefix: str = "", output_types: tuple[str, ...] = (), resources=None, node_name="model"):
    """A model resource, loaded as a SavedModel's init op loads it."""
    resources = resources if resources is not None else ResourceManager()
    (handle,) = run("SimpleMLCreateModelResource", resources=resources, node_name=node_name)
    run("SimpleMLLoadModelFromPathWithHandle", handle, np.array(f"{directory}/".encode(), dtype=object),
        file_prefix=prefix, output_types=list(output_types))
    return handle


def banks(batch: int, numerical=None, boolean=None, categorical=None, sets=None) -> tuple:
    """The six feature inputs: dense banks [batch, n] (empty [0, 0] when None) and the categorical sets, given as
    one list of lists per example (each feature's items), packed as the two-level ragged tensor."""
    numerical = np.zeros((0, 0), np.float32) if numerical is None else np.asarray(numerical, np.float32)
    boolean = np.zeros((0, 0), np.float32) if boolean is None else np.asarray(boolean, np.float32)
    categorical = np.zeros((0, 0), np.int32) if categorical is None else np.asarray(categorical, np.int32)
    if sets is None:
        values, cells, rows = np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int64)
    else:
        items = [item for example in sets for feature in example for item in feature]
        lengths = [len(feature) for example in sets for feature in example]
        values = np.array(items, np.int32)
        cells = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        rows = np.concatenate([[0], np.cumsum([len(example) for example in sets])]).astype(np.int64)
    return numerical, boolean, categorical, values, cells, rows


def index_of(handle, feature: str, value: str) -> int:
    """The dictionary index of a categorical feature's value, as TF-DF's lookup tables give it."""
    spec = handle.loaded("test").model.data_spec()
    column = next(c for c in spec.columns if c.name == feature)
    return column.categorical.items[value].index


def train(tmp_path: Path, learner: str, data: dict, **hyperparameters) -> Path:
    """A small model trained by ydf on `data` (label column "label"), saved without a file prefix."""
    import ydf  # the tests that call this skip without ydf

    quiet = ydf.verbose(0)
    try:
        model = getattr(ydf, learner)(**hyperparameters).train(data)
        directory = tmp_path / learner
        model.save(str(directory))
    finally:
        ydf.verbose(quiet)
    return directory
