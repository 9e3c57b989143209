"""TF-DF's model resource and load ops: the Yggdrasil models in the golden fixtures' assets (written by TF-DF 1.12
and by ydf), loaded as a SavedModel's init op loads them, and the errors TF-DF's kernels give (messages from
tensorflow/ops/inference/kernel.cc)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.runtime.resources import ResourceManager
from kernels.forests.model import ForestModel
from tests.kernels.forests.helpers import assets, banks, load, run, train

pytest.importorskip("ydf")

PATH = "SimpleMLLoadModelFromPathWithHandle"


def test_a_tf_df_keras_model_loads_from_its_assets() -> None:
    handle = load(*assets("forests_gbt_binary"))
    loaded = handle.loaded("test")
    assert loaded.task == "CLASSIFICATION" and loaded.model_name == "GRADIENT_BOOSTED_TREES"
    # TF-DF's Keras models integerize the label: its classes are named by their indices.
    assert loaded.dense_col_representation.tolist() == [b"1", b"2"]
    assert "GRADIENT_BOOSTED_TREES" in handle.describe() and "not loaded" not in handle.describe()


def test_classes_are_the_label_dictionarys_strings_and_a_regression_has_one_unnamed_column() -> None:
    assert load(*assets("forests_ops")).loaded("test").dense_col_representation.tolist() == [b"cat", b"dog", b"emu"]
    assert load(*assets("forests_gbt_regression")).loaded("test").dense_col_representation.tolist() == [b""]


def test_resources_are_shared_by_shared_name_and_otherwise_kept_per_node() -> None:
    resources = ResourceManager()
    (a,) = run("SimpleMLCreateModelResource", shared_name="forest", resources=resources, node_name="a")
    (b,) = run("SimpleMLCreateModelResource", shared_name="forest", resources=resources, node_name="b")
    (c,) = run("SimpleMLCreateModelResource", resources=resources, node_name="c")
    (c_again,) = run("SimpleMLCreateModelResource", resources=resources, node_name="c")
    assert a is b and c is c_again and a is not c
    assert isinstance(a, ForestModel) and not a.is_loaded and "not loaded" in a.describe()


def test_loading_again_replaces_the_model() -> None:
    handle = load(*assets("forests_rf_multiclass"))
    directory, prefix = assets("forests_gbt_regression")
    run(PATH, handle, np.array(f"{directory}/".encode(), dtype=object), file_prefix=prefix)
    assert handle.loaded("test").task == "REGRESSION"


def test_the_older_load_op_keeps_the_model_already_under_its_identifier() -> None:
    resources = ResourceManager()
    for case in ("forests_v1_ops", "forests_ops"):  # a binary classifier, then a three-class one
        directory, _ = assets(case)
        run("SimpleMLLoadModelFromPath", np.array(f"{directory}/".encode(), dtype=object), model_identifier="m1",
            resources=resources)
    features = banks(1, numerical=[[0.5]], categorical=[[1]], sets=[[[2]]])
    predictions, classes = run("SimpleMLInferenceOp", *features, model_identifier="m1", dense_output_dim=2,
                               resources=resources)
    assert classes.tolist() == [b"no", b"yes"] and predictions.shape == (1, 2)


def test_inference_before_any_load_says_so() -> None:
    features = banks(1, numerical=[[0.5]])
    with pytest.raises(ValueError, match=r'likely due to the "LoadModel\*" not having been run before'):
        run("SimpleMLInferenceOp", *features, model_identifier="nope", dense_output_dim=2)
    (handle,) = run("SimpleMLCreateModelResource")
    with pytest.raises(ValueError, match="^SimpleMLInferenceOpWithHandle: the decision forest model 'node' is not "
                                         "loaded"):
        run("SimpleMLInferenceOpWithHandle", *features, handle, dense_output_dim=2)


def test_bad_load_arguments_are_refused() -> None:
    directory, prefix = assets("forests_gbt_binary")
    with pytest.raises(ValueError, match=f"^{PATH}: Unknown output types: PROBABILITIES$"):
        load(directory, prefix, output_types=("PROBABILITIES",))
    (handle,) = run("SimpleMLCreateModelResource")
    two = np.array([b"/a/", b"/b/"], dtype=object)
    with pytest.raises(ValueError, match='The "path" attribute is expected to contains exactly one entry.'):
        run(PATH, handle, two, file_prefix=prefix)
    with pytest.raises(ValueError, match=f"^{PATH}: cannot load the Yggdrasil model in '/no/such/model/'"):
        run(PATH, handle, np.array(b"/no/such/model/", dtype=object))
    with pytest.raises(ValueError, match="cannot load the Yggdrasil model"):  # the right directory, a wrong prefix
        run(PATH, handle, np.array(f"{directory}/".encode(), dtype=object), file_prefix="0000")
    with pytest.raises(TypeError, match=f"^{PATH} needs a decision forest model handle"):
        run(PATH, np.float32(1), np.array(f"{directory}/".encode(), dtype=object), file_prefix=prefix)


def test_a_model_of_a_task_tf_df_does_not_serve_here_is_refused(tmp_path) -> None:
    rng = np.random.default_rng(0)
    directory = train(tmp_path, "IsolationForestLearner", {"x": rng.normal(size=64).astype(np.float32)},
                      num_trees=3)
    with pytest.raises(ValueError, match="a ANOMALY_DETECTION model .* cannot be served here"):
        load(directory)
