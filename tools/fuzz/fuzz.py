"""Coverage-guided fuzzing of the protobuf-level readers with atheris (libFuzzer for Python), by hand:

    make fuzz                                        # every target, 60 s each
    make fuzz FUZZ_TARGET=tensor_bundle FUZZ_SECONDS=600
    .venv/bin/python tools/fuzz/fuzz.py graph_def --seconds 30 [-- extra libFuzzer flags]

Targets (tools/fuzz/targets.py): graph_def, saved_model, tensor_bundle, example, tfrecord, v2_binary.
Each starts from its corpus (.fuzz/corpus/<target>/, made by tools/fuzz/make_corpus.py from the golden
fixtures) and adds the inputs that reach new code to it. An input that raises anything but the
reader's typed errors is a crash: libFuzzer prints the traceback and writes the input to
.fuzz/crashes/<target>/crash-<sha1>; replay one with `tools/fuzz/fuzz.py <target> <file>`. Keep it as an
`@example` in tests/fuzz/ once fixed. atheris is not a dependency of the package: `make fuzz` installs it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUZZ_DIR = ROOT / ".fuzz"
TARGET_NAMES = ("graph_def", "saved_model", "tensor_bundle", "example", "tfrecord", "v2_binary")


def _run_one(target: str, seconds: int, extra: list[str]) -> int:
    """Fuzz one target in this process (libFuzzer exits the process when it is done)."""
    import atheris

    scratch = FUZZ_DIR / "scratch" / target
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    os.environ["TENSORGATE_FUZZ_SCRATCH"] = str(scratch)
    sys.path.insert(0, str(ROOT))
    with atheris.instrument_imports(include=["engine", "service", "kernels"]):
        from tools.fuzz.targets import TARGETS
    corpus = FUZZ_DIR / "corpus" / target
    crashes = FUZZ_DIR / "crashes" / target
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    replay = [a for a in extra if not a.startswith("-")]
    flags = [f"-artifact_prefix={crashes}/", "-rss_limit_mb=4096", "-timeout=20", "-max_len=1048576"]
    if not replay:
        flags += [f"-max_total_time={seconds}", str(corpus)]
    atheris.Setup([sys.argv[0], *flags, *extra], TARGETS[target])
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", choices=[*TARGET_NAMES, "all"])
    parser.add_argument("--seconds", type=int, default=60, help="how long to fuzz each target")
    parser.add_argument("extra", nargs="*", help="crash files to replay, or libFuzzer flags after --")
    args = parser.parse_args()
    if args.target != "all":
        return _run_one(args.target, args.seconds, args.extra)
    failed = []
    for target in TARGET_NAMES:  # one process each: libFuzzer runs once per process
        print(f"--- fuzzing {target} for {args.seconds} s", flush=True)
        if subprocess.run([sys.executable, __file__, target, "--seconds", str(args.seconds), *args.extra]).returncode:
            failed.append(target)
    if failed:
        print(f"crashes in: {', '.join(failed)} (inputs under {FUZZ_DIR / 'crashes'})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
