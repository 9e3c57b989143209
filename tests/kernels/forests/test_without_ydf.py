"""TF-DF's ops where `ydf` is not installed (its wheels are x86_64 only): each op that needs a model fails naming
itself and ydf; creating the resource, and TF-DF's batch rules, need no ydf."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from engine.runtime.resources import ResourceManager
from kernels.forests.features import CategoricalFeature, batch_size
from kernels.forests.model import YdfMissingError
from tests.kernels.forests.helpers import banks, run


@pytest.fixture
def no_ydf(monkeypatch):
    monkeypatch.setitem(sys.modules, "ydf", None)  # `import ydf` now raises ImportError


def test_each_op_needing_a_model_names_itself_and_ydf(no_ydf) -> None:
    resources = ResourceManager()
    (handle,) = run("SimpleMLCreateModelResource", resources=resources)
    path = np.array(b"/models/m/1/assets/", dtype=object)
    features = banks(1, numerical=[[0.5]])
    for op, call in [
        ("SimpleMLLoadModelFromPathWithHandle", lambda: run("SimpleMLLoadModelFromPathWithHandle", handle, path)),
        ("SimpleMLLoadModelFromPath", lambda: run("SimpleMLLoadModelFromPath", path, model_identifier="m",
                                                  resources=resources)),
        ("SimpleMLInferenceOpWithHandle", lambda: run("SimpleMLInferenceOpWithHandle", *features, handle,
                                                      dense_output_dim=2)),
        ("SimpleMLInferenceLeafIndexOpWithHandle", lambda: run("SimpleMLInferenceLeafIndexOpWithHandle", *features,
                                                               handle)),
        ("SimpleMLInferenceOp", lambda: run("SimpleMLInferenceOp", *features, model_identifier="m",
                                            dense_output_dim=2, resources=resources)),
    ]:
        with pytest.raises(YdfMissingError, match=f"^{op} runs TensorFlow Decision Forests models with the 'ydf' "
                                                  r"package \(Yggdrasil Decision Forests\), which is not installed"):
            call()


def test_the_batch_is_the_first_dimension_of_the_banks_that_have_one() -> None:
    empty = np.zeros((0, 0), np.float32)
    assert batch_size(np.zeros((3, 2)), empty, np.zeros((0, 0)), np.zeros(1)) == 3
    assert batch_size(empty, empty, np.zeros((4, 1)), np.array([0, 2, 4, 6, 8])) == 4
    assert batch_size(empty, empty, empty, np.zeros(1)) == 0
    with pytest.raises(ValueError, match="^The batch size of the input features are inconsistent: 3 vs 2.$"):
        batch_size(np.zeros((3, 1)), empty, np.zeros((2, 1)), np.zeros(1))
    with pytest.raises(ValueError, match="inconsistent: 3 vs 4"):
        batch_size(np.zeros((3, 1)), empty, empty, np.arange(5))


def test_a_dictionary_string_ydf_cannot_be_given_is_refused_only_when_used() -> None:
    # ydf reads "" as missing and numpy's bytes arrays drop trailing NULs: such a dictionary entry has no string
    # that ydf would read back as its index.
    keys = np.array([b"<OOD>", b"a", b"", b"b", b""], dtype=np.bytes_)
    city = CategoricalFeature("city", 4, keys, frozenset({2}))
    assert city.strings(np.array([3, 0, -1, 1]), "op").tolist() == [b"b", b"<OOD>", b"", b"a"]
    with pytest.raises(ValueError, match="^op: index 2 of categorical feature 'city' has a dictionary string that "
                                         "ydf cannot be given"):
        city.strings(np.array([1, 2]), "op")
    assert CategoricalFeature("grade", 5).strings(np.array([4, -1], np.int64), "op").dtype == np.int32
