"""Suite-wide: golden SavedModels of TensorFlow Decision Forests (saved_models/forests_*) need ydf, whose
wheels are x86_64 only (pyproject.toml); where it is not installed, every test run on one of them skips,
saying why, rather than failing on a dependency the platform cannot have."""

from __future__ import annotations

import importlib.util

import pytest

FOREST_CASE_PREFIX = "forests_"


def pytest_collection_modifyitems(config, items) -> None:
    if importlib.util.find_spec("ydf") is not None:
        return
    skip = pytest.mark.skip(reason="a TF-DF model: needs ydf, which is not installed (its wheels are x86_64 only)")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(FOREST_CASE_PREFIX in str(value) for value in params.values()):
            item.add_marker(skip)
