"""The chart's repository scripts (helm/tensorgate/files), run here with sh: what prepare-repository
writes before the server starts, and how s3-sync brings versions in (with a stand-in `aws` that
"syncs" from a local directory, as `aws s3 sync --delete` would)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.conftest import CHART
from tests.service.conftest import EXAMPLES

FILES = CHART / "files"
FAKE_AWS = """#!/bin/sh
# aws [--endpoint-url URL] s3 sync --delete --only-show-errors s3://bucket/prefix/ DEST/
[ "$1" = --endpoint-url ] && { echo "$2" > "$FAKE_BUCKET.endpoint"; shift 2; }
src=$FAKE_BUCKET; dest=$(eval echo \\${$#})
rm -rf "$dest" && mkdir -p "$dest" && cp -R "$src/." "$dest/"
"""

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")


def run(script: str, env: dict[str, str]) -> str:
    result = subprocess.run(["sh", str(FILES / script)], env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_prepare_seeds_from_the_image_and_writes_configs_only_when_they_change(tmp_path):
    repo, config = tmp_path / "repo", tmp_path / "config"
    repo.mkdir(), config.mkdir()
    (config / "model.iris_classifier.yaml").write_text("labels: {stable: 1}\n")
    (config / "model.new_model.yaml").write_text("version_policy: all\n")
    env = {"REPOSITORY": str(repo), "CONFIG_DIR": str(config), "IMAGE_MODELS": str(EXAMPLES), "SEED_FROM_IMAGE": "true"}
    out = run("prepare-repository.sh", env)
    assert (repo / "half_plus_two" / "1" / "model.pb").read_bytes() == (EXAMPLES / "half_plus_two" / "1" / "model.pb").read_bytes()
    assert (repo / "iris_classifier" / "config.yaml").read_text() == "labels: {stable: 1}\n"
    assert (repo / "new_model" / "config.yaml").read_text() == "version_policy: all\n"
    assert "wrote" in out and not list(repo.rglob(".config.yaml.incoming"))
    # A second replica on the same volume rewrites nothing (an unchanged file would still reload models).
    before = (repo / "iris_classifier" / "config.yaml").stat().st_mtime_ns
    assert "wrote" not in run("prepare-repository.sh", {**env, "SEED_FROM_IMAGE": "false"})
    assert (repo / "iris_classifier" / "config.yaml").stat().st_mtime_ns == before


def test_s3_sync_adds_whole_versions_and_changed_configs(tmp_path):
    bin_dir, bucket, repo = tmp_path / "bin", tmp_path / "bucket", tmp_path / "repo"
    bin_dir.mkdir(), repo.mkdir()
    (bin_dir / "aws").write_text(FAKE_AWS)
    (bin_dir / "aws").chmod(0o755)
    shutil.copytree(EXAMPLES / "iris_classifier", bucket / "iris_classifier")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_BUCKET": str(bucket), "REPOSITORY": str(repo),
           "S3_URL": "s3://models/prod", "S3_ENDPOINT": "http://minio:9000"}
    out = run("s3-sync.sh", env)
    assert sorted(out.split("\n")[:2]) == ["added iris_classifier/1", "added iris_classifier/2"]
    assert (repo / "iris_classifier" / "2" / "model.pb").exists() and (repo / "iris_classifier" / "config.yaml").exists()
    assert Path(f"{bucket}.endpoint").read_text().strip() == "http://minio:9000"
    # Nothing the server would load is left half-copied; the mirror is a dot-directory it ignores.
    assert sorted(p.name for p in (repo / "iris_classifier").iterdir()) == ["1", "2", "config.yaml"]
    assert sorted(p.name for p in repo.iterdir()) == [".s3-mirror", "iris_classifier"]
    # Next round: a new version and a changed config arrive; existing versions are left alone.
    shutil.copytree(bucket / "iris_classifier" / "2", bucket / "iris_classifier" / "3")
    (bucket / "iris_classifier" / "config.yaml").write_text("version_policy: {latest: 3}\n")
    version_1 = (repo / "iris_classifier" / "1" / "model.pb").stat().st_mtime_ns
    out = run("s3-sync.sh", env)
    assert out.split() == ["added", "iris_classifier/3", "updated", "iris_classifier/config.yaml"]
    assert (repo / "iris_classifier" / "config.yaml").read_text() == "version_policy: {latest: 3}\n"
    assert (repo / "iris_classifier" / "1" / "model.pb").stat().st_mtime_ns == version_1
    assert run("s3-sync.sh", env) == ""  # in sync: nothing to do
