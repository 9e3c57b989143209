"""Golden fixtures: every graph under tests/fixtures must give the outputs real TensorFlow gave.

Each fixture directory holds a model (`model.pb` or `model.pbtxt`), `case.json` and `data.npz`, written
by tools/make_fixtures.py with TensorFlow (tests/fixtures/README.md has the format). TensorFlow is not
needed here: the expected outputs are stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import engine

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _case_dirs() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.rglob("case.json"))


def _model_path(case_dir: Path) -> Path:
    for name in ("model.pb", "model.pbtxt"):
        if (case_dir / name).exists():
            return case_dir / name
    raise FileNotFoundError(f"{case_dir} has no model.pb or model.pbtxt")


def _load_array(data, entry: dict) -> np.ndarray:
    """The stored array, in the dtype TensorFlow produced (bfloat16 and strings are stored specially)."""
    stored = data[entry["key"]]
    dtype = entry.get("dtype")
    if dtype == "bfloat16":
        return stored.view(ml_dtypes.bfloat16)
    if dtype == "string":
        return stored.astype(object)
    return stored


def _assert_matches(name: str, actual, expected: np.ndarray, rtol: float, atol: float) -> None:
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype}, TensorFlow gives {expected.dtype}"
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape}, TensorFlow gives {expected.shape}"
    if expected.dtype == object:
        assert actual.tolist() == expected.tolist(), f"{name}: strings differ"
        return
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=name)
        return
    wide = np.complex128 if expected.dtype.kind == "c" else np.float64
    expected_wide, actual_wide = expected.astype(wide), actual.astype(wide)
    finite = np.abs(expected_wide[np.isfinite(expected_wide)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(actual_wide, expected_wide, rtol=rtol, atol=atol * scale, equal_nan=True,
                               err_msg=name)


@pytest.mark.parametrize("case_dir", _case_dirs(), ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_matches_tensorflow(case_dir: Path) -> None:
    case = json.loads((case_dir / "case.json").read_text())
    with np.load(case_dir / "data.npz") as data:
        feeds = {entry["name"]: _load_array(data, entry) for entry in case["feeds"]}
        expected = [_load_array(data, entry) for entry in case["fetches"]]

    graph = engine.load_graph(_model_path(case_dir))
    sess = engine.Session(graph, device="cpu")
    outs = sess.run([entry["name"] for entry in case["fetches"]], feeds)

    assert len(outs) == len(expected)
    for entry, actual, want in zip(case["fetches"], outs, expected):
        _assert_matches(entry["name"], actual, want, case["rtol"], case["atol"])


def test_fixtures_are_present() -> None:
    assert len(_case_dirs()) > 100, "tests/fixtures is missing; regenerate with tools/make_fixtures.py"
