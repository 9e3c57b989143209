"""`tensorgate inspect`: what a user sees about a graph before serving it."""

import json
import subprocess
import sys

import numpy as np

from service.cli import main
from tests.engine.graphs import GraphBuilder

F32 = np.dtype(np.float32)


def graph_file(tmp_path, *, unsupported=False):
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 4))
    g.const("w", np.ones((4, 2), np.float32))
    g.node("dense/MatMul", "MatMul", ["x", "w"], T=F32)
    g.node("dense/Relu", "Relu", ["dense/MatMul"], T=F32)
    g.node("probs", "Softmax", ["dense/Relu"], T=F32)
    if unsupported:
        g.node("weird", "FancyOp", ["x"])
        g.node("weird2", "FancyOp", ["weird:1"])
    path = tmp_path / "model.pb"
    path.write_bytes(g.bytes())
    return path


def test_inspect_prints_summary(tmp_path, capsys):
    assert main(["inspect", str(graph_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "nodes: 5" in out
    assert "x:0  float  [?,4]" in out
    assert "default outputs:\n  probs:0" in out
    assert "unsupported ops: none" in out


def test_inspect_lists_unsupported_ops_with_nodes(tmp_path, capsys):
    assert main(["inspect", "--json", str(graph_file(tmp_path, unsupported=True))]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["unsupported_ops"] == {"FancyOp": ["weird", "weird2"]}
    assert summary["op_counts"]["FancyOp"] == 2
    # An unknown op's output count is inferred from its consumers: weird:0 is unused, weird:1 is read.
    assert summary["outputs"] == ["probs:0", "weird:0", "weird2:0"]
    assert summary["inputs"] == [{"name": "x:0", "dtype": "float", "shape": [None, 4], "has_default": False}]


def test_inspect_bad_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\xff\xff\xff garbage")
    assert main(["inspect", str(bad)]) == 1
    assert "not a GraphDef" in capsys.readouterr().err


def test_console_script_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "inspect", str(graph_file(tmp_path))], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "MatMul" in proc.stdout
