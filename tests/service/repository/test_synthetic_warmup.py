"""The load-time warm-up feeds zeros and empty strings, our guess and not a request: a model those fail
(Triton's simple_string parses its string inputs as numbers: StringToNumber("") fails) still loads and
serves, the failure logged. Only a user's own warm-up file may fail a version (test_warmup.py)."""

from __future__ import annotations

import logging

import numpy as np
import yaml

import engine.builder as gb
from engine import SessionOptions
from service.repository.config import parse_model_config
from service.repository.servable import load_servable


def write_simple_string(path) -> None:
    """Two string inputs parsed as int32, their sum and difference written back as strings."""
    graph = gb.GraphBuilder()
    with graph.as_default():
        a = gb.placeholder("string", [None, 16], name="INPUT0")
        b = gb.placeholder("string", [None, 16], name="INPUT1")
        parsed = [graph.create_op("StringToNumber", [t], attrs={"out_type": np.dtype("int32")},
                                  outputs=[(np.dtype("int32"), t.shape)], name=f"parse{i}").outputs[0]
                  for i, t in enumerate((a, b))]
        total, diff = gb.add(parsed[0], parsed[1]), gb.subtract(parsed[0], parsed[1])
        for name, t in (("OUTPUT0", total), ("OUTPUT1", diff)):
            graph.create_op("AsString", [t], attrs={"T": np.dtype("int32")}, outputs=[(np.dtype(object), t.shape)],
                            name=name)
    path.mkdir(parents=True)
    graph.save(str(path / "model.pb"))


def test_a_model_the_synthetic_warm_up_fails_still_loads_and_serves(tmp_path, caplog):
    write_simple_string(tmp_path / "1")
    config = parse_model_config(yaml.safe_dump({"signatures": {"serving_default": {
        "inputs": {"INPUT0": "INPUT0:0", "INPUT1": "INPUT1:0"}, "outputs": {"OUTPUT0": "OUTPUT0:0", "OUTPUT1": "OUTPUT1:0"}}}}),
        source="config.yaml")
    with caplog.at_level(logging.WARNING):
        servable = load_servable("simple_string", 1, tmp_path / "1" / "model.pb", config, SessionOptions())
    try:
        assert "warm-up of signature 'serving_default' with zeros failed; serving it anyway" in caplog.text
        x = np.array([[str(i).encode() for i in range(16)]], dtype=object)
        y = np.array([[b"1"] * 16], dtype=object)
        total, diff = servable.run({"INPUT0:0": x, "INPUT1:0": y}, ["OUTPUT0:0", "OUTPUT1:0"])
        assert total.tolist() == [[str(i + 1).encode() for i in range(16)]]
        assert diff.tolist() == [[str(i - 1).encode() for i in range(16)]]
    finally:
        servable.close()
