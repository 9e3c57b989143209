"""Where an op comes from: core TensorFlow, or the pip package of custom ops that registers it.

A graph exported with a custom-op package (TensorFlow Text, TensorFlow Decision Forests, TensorFlow Addons,
TensorFlow I/O, ...) holds that package's op names; an op tensorgate has no kernel for is reported with its
package, so that a user knows what the model needs. The ops of core TensorFlow and of the packages
TensorFlow Serving links come from their registries (the generated `op_packages`); the other packages are
known by the prefix they give their ops' names (TensorFlow's convention for custom ops is `Namespace>Op`).
"""

from __future__ import annotations

from engine.graph.op_packages import PACKAGE_OPS, TENSORFLOW_OPS

__all__ = ["op_origin", "origin_note", "origins"]

# Op-name prefixes of custom-op packages, from each package's op registrations.
_PREFIXES = (
    ("TFText>", "tensorflow-text"),
    ("Sentencepiece", "tensorflow-text"),
    ("SimpleML", "tensorflow-decision-forests"),
    ("YggdrasilDecisionForests", "tensorflow-decision-forests"),
    ("Addons>", "tensorflow-addons"),
    ("IO>", "tensorflow-io"),
    ("Scann>", "scann (TensorFlow Recommenders' ScaNN)"),
    ("TFRA>", "tensorflow-recommenders-addons"),
    ("TRTEngineOp", "TF-TRT (a graph converted by TensorFlow-TensorRT)"),
    ("TfLite", "TensorFlow Lite"),
)


def op_origin(op: str) -> str | None:
    """The package an op comes from: "TensorFlow" for core ops, a pip package name for custom ops, or None
    when the op is in no registry or naming convention tensorgate knows."""
    if op in TENSORFLOW_OPS:
        return "TensorFlow"
    if op in PACKAGE_OPS:
        return PACKAGE_OPS[op]
    for prefix, package in _PREFIXES:
        if op.startswith(prefix):
            return package
    return None


def origin_note(op: str) -> str:
    """What to print after an unsupported op's name: " (core TensorFlow)", " (from <package>)" or nothing."""
    origin = op_origin(op)
    return "" if origin is None else " (core TensorFlow)" if origin == "TensorFlow" else f" (from {origin})"


def origins(ops) -> dict[str, str]:
    """Op -> origin, for the ops whose origin is known."""
    return {op: origin for op in ops if (origin := op_origin(op)) is not None}
