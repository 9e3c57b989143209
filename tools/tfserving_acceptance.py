"""Run TensorFlow Serving's own acceptance test, unchanged, against the `tensorflow_model_server` this
package installs: `tensorflow_serving/model_servers/tensorflow_model_server_test.py` with its
`test_util` base and its test models (`servables/tensorflow/testdata`), laid out where the test looks
for them (`$TEST_SRCDIR/tf_serving/tensorflow_serving/...`), our script in the place of TF Serving's binary.

It is run by hand, like tools/make_fixtures.py, with a Python that has TensorFlow 2.21 (and, for its
`test_tf_text`, tensorflow-text), `tensorflow-serving-api --no-deps`, tf-keras (its Keras tests are Keras 2's), portpicker and six:

    python tools/tfserving_acceptance.py --python /tmp/tfvenv/bin/python \\
        --serving /work/.mirror/tensorflow+serving/repo [--workdir /tmp/tfs_accept] [-- TEST_NAME ...]

`--serving` is a clone of github.com/tensorflow/serving (a bare one will do: files are read with
`git show`). A test model kept out of the clone (Git LFS, a partial clone) is reported; for
`tf_text_regression` (TF Text's model-server regression model: y = x + 1 beside many TF Text ops) our
own fixture of the same recipe, tests/fixtures/saved_models/tf_text_ops_regression, takes its place.
The tests that need TensorFlow Lite, the TensorFlow profiler service or TF-TRT are not run (README,
"Replacing TensorFlow Serving", says why); the rest must pass.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = "tensorflow_serving/model_servers"
TESTDATA = "tensorflow_serving/servables/tensorflow/testdata"
# TensorFlow Lite models, the TensorFlow profiler service: not what tensorgate serves.
EXCLUDED = {
    "testPredictOnTfLite": "TensorFlow Lite model",
    "testPredictWithSignatureDefOnTfLite": "TensorFlow Lite model",
    "test_profiler_service_with_valid_trace_request": "TensorFlow's profiler service",
}


# test_tf_text reads `flags.os.environ` through tensorflow.python.platform.flags, which no longer imports
# os in TensorFlow 2.21 (an AttributeError in the test itself, before any server is involved).
SITECUSTOMIZE = """
import os
try:
    from tensorflow.python.platform import flags
    flags.os = os
except ImportError:  # the server under test runs without TensorFlow
    pass
"""


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def lay_out(serving: Path, workdir: Path) -> tuple[Path, list[str]]:
    """Copy the test, its base and its test models out of the clone into `workdir/tf_serving`; returns
    the source root and the files the clone lacks."""
    src = workdir / "tf_serving"
    missing = []
    listing = _git(serving, "ls-tree", "-r", "HEAD", f"{TESTS}/", f"{TESTDATA}/").decode().splitlines()
    for line in listing:
        meta, path = line.split("\t", 1)
        if not (path.endswith(".py") or path.startswith(TESTDATA)):
            continue
        target = src / path
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.write_bytes(_git(serving, "cat-file", "blob", meta.split()[2]))
        except subprocess.CalledProcessError:
            missing.append(path)
    for package in ("tensorflow_serving", TESTS, f"{TESTS}/test_util"):
        (src / package / "__init__.py").touch()
    return src, missing


def link_apis(python: str, src: Path) -> None:
    """The tests import `tensorflow_serving.apis` (the tensorflow-serving-api wheel, with its `config`
    and other schema packages) beside the `tensorflow_serving.model_servers` laid out here: one
    package, so the wheel's subpackages are linked in."""
    code = "import os, tensorflow_serving.apis as a; print(os.path.dirname(os.path.dirname(a.__file__)))"
    wheel = Path(subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip())
    for sub in wheel.iterdir():
        link = src / "tensorflow_serving" / sub.name
        if sub.is_dir() and sub.name != "__pycache__" and (link.is_symlink() or not link.exists()):
            link.unlink(missing_ok=True)
            link.symlink_to(sub)


def substitute_tf_text_regression(src: Path) -> None:
    """Our fixture of TF Text's model-server regression recipe, where the clone lacks TF Serving's."""
    import shutil

    target = src / TESTDATA / "tf_text_regression" / "01"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(ROOT / "tests" / "fixtures" / "saved_models" / "tf_text_ops_regression" / "model", target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="a Python with TensorFlow and tensorflow-serving-api")
    parser.add_argument("--serving", type=Path, required=True, help="a clone of tensorflow/serving")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tfs_accept"))
    parser.add_argument("--server", type=Path, default=Path(sys.prefix) / "bin" / "tensorflow_model_server",
                        help="the tensorflow_model_server to test (default: this venv's)")
    parser.add_argument("tests", nargs="*", help="test names, e.g. testPredictUDS (default: every test but the excluded ones)")
    args = parser.parse_args()

    src, missing = lay_out(args.serving, args.workdir)
    link_apis(args.python, src)
    binary = src / TESTS / "tensorflow_model_server"
    binary.unlink(missing_ok=True)
    binary.symlink_to(args.server.resolve())
    if any("tf_text_regression/" in m for m in missing):
        substitute_tf_text_regression(src)
        missing = [m for m in missing if "tf_text_regression/" not in m]
    for path in missing:
        print(f"not in the clone (LFS or partial): {path}", file=sys.stderr)
    site = args.workdir / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "TEST_SRCDIR": str(args.workdir), "PYTHONPATH": f"{src}:{site}",
           # The Keras tests build tf.keras models as TF Serving's test was written for (Keras 2, tf_keras):
           # Keras 3's export names the signature's input `inputs` and output `output_0`, not x and y,
           # and TF Serving itself answers those requests "input size does not match signature".
           "TF_USE_LEGACY_KERAS": "1"}
    tests = [f"TensorflowModelServerTest.{name}" for name in args.tests or _test_names(args.python, src, env)
             if args.tests or name not in EXCLUDED]
    command = [args.python, str(src / TESTS / "tensorflow_model_server_test.py"), *tests]
    print(" ".join(command), file=sys.stderr)
    return subprocess.run(command, env=env, cwd=args.workdir, check=False).returncode


def _test_names(python: str, src: Path, env: dict) -> list[str]:
    """Every test of the file (unittest has no "all but these": the excluded ones are left out by name)."""
    code = ("import unittest, tensorflow_model_server_test as t; "
            "print('\\n'.join(unittest.TestLoader().getTestCaseNames(t.TensorflowModelServerTest)))")
    return subprocess.run([python, "-c", code], cwd=src / TESTS, env=env, capture_output=True, text=True,
                          check=True).stdout.split()

if __name__ == "__main__":
    sys.exit(main())
