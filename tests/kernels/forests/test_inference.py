"""TF-DF's inference ops on packed feature banks: TensorFlow's numbers for a fixture's model fed as TF-DF's graph
feeds it, TF-DF's rules for out-of-dictionary indices, booleans and categorical sets, the output shapes, and the
errors (messages from tensorflow/ops/inference/kernel.cc). The SavedModels end to end are the golden fixtures'
(tests/engine/saved_model/test_saved_model.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.kernels.forests.helpers import SAVED_MODELS, assets, banks, index_of, load, run, train

ydf = pytest.importorskip("ydf")

INFER = "SimpleMLInferenceOpWithHandle"
LEAVES = "SimpleMLInferenceLeafIndexOpWithHandle"
MISSING = -1000.0  # how the fixtures' requests mark a missing float (tools/fixtures/saved_models_forests.py)


def _fixture_inputs(case: str) -> dict[str, np.ndarray]:
    spec = json.loads((SAVED_MODELS / case / "signatures.json").read_text())
    with np.load(SAVED_MODELS / case / "data.npz") as data:
        entries = spec["signatures"][0]
        inputs = {e["alias"]: data[e["key"]] for e in entries["inputs"]}
        inputs["expected"] = data[entries["outputs"][0]["key"]]
    return inputs


def test_the_op_gives_tensorflows_probabilities_for_banks_packed_as_tf_dfs_graph_packs_them() -> None:
    handle = load(*assets("forests_gbt_binary"))
    inputs = _fixture_inputs("forests_gbt_binary")
    layout = handle.loaded("test").features
    columns = {"x": inputs["x"], "y": inputs["y"], "grade": inputs["grade"].astype(np.float32)}
    numerical = np.stack([np.where(columns[n] == MISSING, np.nan, columns[n]) for n in layout.numerical], axis=1)
    # The graph's lookup table: "" is missing (-1), a string the dictionary lacks is out of it (0).
    color = [-1 if not c else index_of(handle, "color", c.decode()) if c in (b"red", b"green", b"blue", b"amber")
             else 0 for c in inputs["color"]]
    predictions, classes = run(INFER, *banks(len(color), numerical=numerical, categorical=np.array(color)[:, None]),
                               handle, dense_output_dim=2)
    positive = inputs["expected"][:, 0]
    np.testing.assert_allclose(predictions[:, 1], positive, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predictions[:, 0], 1 - positive, rtol=1e-5, atol=1e-6)
    assert predictions.dtype == np.float32 and classes.dtype == object and classes.tolist() == [b"1", b"2"]


def test_indices_outside_the_dictionary_read_as_out_of_the_dictionary() -> None:
    # TF-DF reads an index below -1 or at least the dictionary's size as 0, for string and integerized features.
    handle = load(*assets("forests_rf_multiclass"))
    layout = handle.loaded("test").features
    assert [f.name for f in layout.categorical] == ["color", "grade"]
    size = layout.categorical[0].size
    numerical = np.tile([[0.4, -0.3]], (5, 1))
    for column in range(2):
        categorical = np.tile([[1, 2]], (5, 1))
        categorical[:, column] = [0, size, 1000, -2, -7]
        predictions, _ = run(INFER, *banks(5, numerical=numerical, categorical=categorical), handle,
                             dense_output_dim=3)
        np.testing.assert_array_equal(predictions, np.tile(predictions[:1], (5, 1)))


def test_banks_are_checked_against_the_model() -> None:
    handle = load(*assets("forests_gbt_binary"))  # three numerical features, one categorical
    numerical, categorical = np.zeros((2, 3), np.float32), np.ones((2, 1), np.int32)
    with pytest.raises(ValueError, match='^SimpleMLInferenceOpWithHandle: The "dense_output_dim"=3 attribute does '
                                         "not match the model output dimension=2$"):
        run(INFER, *banks(2, numerical=numerical, categorical=categorical), handle, dense_output_dim=3)
    with pytest.raises(ValueError, match="^Unexpected dimension of numerical_features bank: 2 columns for the "
                                         "model's 3 such features.$"):
        run(INFER, *banks(2, numerical=numerical[:, :2], categorical=categorical), handle, dense_output_dim=2)
    with pytest.raises(ValueError, match="^The batch size of the input features are inconsistent: 2 vs 3.$"):
        run(INFER, *banks(2, numerical=numerical, categorical=np.ones((3, 1))), handle, dense_output_dim=2)
    with pytest.raises(ValueError, match="^categorical_int_features has 0 rows for a batch of 2$"):
        run(INFER, *banks(2, numerical=numerical, categorical=np.zeros((0, 1))), handle, dense_output_dim=2)
    features = list(banks(2, numerical=numerical, categorical=categorical))
    features[0] = numerical[0]
    with pytest.raises(ValueError, match=r"^SimpleMLInferenceOpWithHandle: numerical_features must have rank 2, "
                                         r"got shape \[3\]$"):
        run(INFER, *features, handle, dense_output_dim=2)
    with pytest.raises(ValueError, match="dense_output_dim must be at least 1, got 0"):
        run(INFER, *banks(2, numerical=numerical, categorical=categorical), handle, dense_output_dim=0)


def test_an_empty_batch_gives_empty_outputs() -> None:
    handle = load(*assets("forests_rf_multiclass"))
    predictions, classes = run(INFER, *banks(0, numerical=np.zeros((0, 2)), categorical=np.zeros((0, 2))), handle,
                               dense_output_dim=3)
    assert predictions.shape == (0, 3) and predictions.dtype == np.float32 and classes.tolist() == [b"1", b"2", b"3"]
    handle = load(*assets("forests_ops"), output_types=("LEAVES",))
    (leaves,) = run(LEAVES, *banks(0, numerical=np.zeros((0, 1)), categorical=np.zeros((0, 1))), handle)
    assert leaves.shape == (0, 4) and leaves.dtype == np.int32


def test_leaves_need_a_model_loaded_for_them() -> None:
    features = banks(2, numerical=[[0.1], [2.0]], categorical=[[1], [3]], sets=[[[1, 3]], [[]]])
    (leaves,) = run(LEAVES, *features, load(*assets("forests_ops"), output_types=("LEAVES",)))
    assert leaves.shape == (2, 4) and leaves.dtype == np.int32 and (leaves >= 0).all()
    with pytest.raises(ValueError, match=r'^SimpleMLInferenceLeafIndexOpWithHandle: the model was loaded without '
                                         r'output_types=\["LEAVES"\], so it gives no leaves$'):
        run(LEAVES, *features, load(*assets("forests_ops")))


def test_categorical_sets_come_from_the_two_level_ragged_tensor() -> None:
    handle = load(*assets("forests_ops"))
    a, c = index_of(handle, "tags", "a"), index_of(handle, "tags", "c")
    numerical, categorical = np.zeros((4, 1), np.float32), np.ones((4, 1), np.int32)
    # Order and repeats do not matter; an index out of the dictionary is out of it.
    sets = [[[a, c]], [[c, a, a]], [[a, 0]], [[a, 99]]]
    predictions, _ = run(INFER, *banks(4, numerical=numerical, categorical=categorical, sets=sets), handle,
                         dense_output_dim=3)
    np.testing.assert_array_equal(predictions[0], predictions[1])
    np.testing.assert_array_equal(predictions[2], predictions[3])
    with pytest.raises(ValueError, match="categorical-set feature 'tags' of example 1 is missing"):
        run(INFER, *banks(2, numerical=numerical[:2], categorical=categorical[:2], sets=[[[a]], [[-1]]]), handle,
            dense_output_dim=3)
    features = list(banks(2, numerical=numerical[:2], categorical=categorical[:2], sets=[[[a]], [[c]]]))
    features[5] = np.array([0, 2, 2], np.int64)  # the second example's cells must start at 1 (one set feature)
    with pytest.raises(ValueError, match="Unexpected features_row_splits_dim_2 size"):
        run(INFER, *features, handle, dense_output_dim=3)
    features = list(banks(2, numerical=numerical[:2], categorical=categorical[:2], sets=[[[a]], [[c]]]))
    features[4] = features[4][:2]
    with pytest.raises(ValueError, match="Unexpected features_row_splits_dim_1 size"):
        run(INFER, *features, handle, dense_output_dim=3)


def test_booleans_read_as_tf_dfs_engines_read_them(tmp_path) -> None:
    # TF-DF's fast engines read a float as a C++ bool (non-zero is true); its generic engine, which a model loaded
    # for LEAVES runs, reads >= 0.5 as true.
    rng = np.random.default_rng(3)
    flag = rng.random(200) < 0.5
    data = {"flag": flag, "noise": rng.normal(size=200).astype(np.float32), "label": np.where(flag, "on", "off")}
    directory = train(tmp_path, "GradientBoostedTreesLearner", data, label="label", num_trees=5)
    features = banks(3, numerical=[[0.0]] * 3, boolean=[[0.3], [1.0], [0.0]])
    for output_types, same_as in (((), 1), (("LEAVES",), 2)):
        handle = load(directory, output_types=output_types)
        assert handle.loaded("test").features.boolean == ("flag",)
        predictions, _ = run(INFER, *features, handle, dense_output_dim=2)
        assert not np.array_equal(predictions[1], predictions[2])
        np.testing.assert_array_equal(predictions[0], predictions[same_as])
    with pytest.raises(ValueError, match="boolean feature 'flag' has a missing value"):
        run(INFER, *banks(1, numerical=[[0.0]], boolean=[[np.nan]]), handle, dense_output_dim=2)


def test_a_binary_classifier_trained_to_give_logits_gives_one_logit_column(tmp_path) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=200).astype(np.float32)
    data = {"x": x, "label": np.where(x + rng.normal(scale=0.5, size=200) > 0, "yes", "no")}
    directory = train(tmp_path, "GradientBoostedTreesLearner", data, label="label", num_trees=5,
                      apply_link_function=False)
    handle = load(directory)
    values = np.array([[-2.0], [0.0], [2.0]], np.float32)
    logits, classes = run(INFER, *banks(3, numerical=values), handle, dense_output_dim=1)
    assert classes.tolist() == [b"logit"] and logits.shape == (3, 1)
    probabilities, _ = run(INFER, *banks(3, numerical=values), load(train(
        tmp_path / "p", "GradientBoostedTreesLearner", data, label="label", num_trees=5)), dense_output_dim=2)
    np.testing.assert_allclose(1 / (1 + np.exp(-logits[:, 0])), probabilities[:, 1], rtol=1e-5)


def test_a_ranking_model_gives_one_relevance_column(tmp_path) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=120).astype(np.float32)
    data = {"x": x, "group": np.repeat([f"q{i}".encode() for i in range(20)], 6), "label": (x > 0).astype(np.float32)}
    directory = train(tmp_path, "GradientBoostedTreesLearner", data, label="label", ranking_group="group",
                      task=ydf.Task.RANKING, num_trees=5)
    relevance, classes = run(INFER, *banks(3, numerical=[[-2.0], [0.0], [2.0]]), load(directory),
                             dense_output_dim=1)
    assert classes.tolist() == [b""] and relevance.shape == (3, 1) and relevance[0, 0] < relevance[2, 0]
