#!/bin/sh
# Mirrors an S3-compatible prefix (S3_URL: s3://bucket/prefix holding <model>/<version>/... and
# <model>/config.yaml) into the model repository, the way the server wants versions to arrive:
# the bucket is synced into a dot-directory of the repository (the server never looks there), then
# each version the repository lacks is copied beside its final place and renamed into it, so the
# server's poller sees a whole version or none. A config.yaml is replaced only when it changed.
# Versions are immutable: a version number already present is not copied again (publish a new one).
# With SYNC_INTERVAL_SECONDS > 0 it repeats forever (the sidecar); otherwise it runs once (init).
# REPOSITORY overrides /repository (tests/deploy runs it outside a pod).
set -eu
: "${S3_URL:?S3_URL must name s3://bucket/prefix}"
repo=${REPOSITORY:-/repository}
mirror="$repo/.s3-mirror"

sync_once() {
  mkdir -p "$mirror"
  if [ -n "${S3_ENDPOINT:-}" ]; then
    aws --endpoint-url "$S3_ENDPOINT" s3 sync --delete --only-show-errors "${S3_URL%/}/" "$mirror/"
  else
    aws s3 sync --delete --only-show-errors "${S3_URL%/}/" "$mirror/"
  fi
  for model_dir in "$mirror"/*/; do
    [ -d "$model_dir" ] || continue
    model=$(basename "$model_dir")
    mkdir -p "$repo/$model"
    for version_dir in "$model_dir"*/; do
      [ -d "$version_dir" ] || continue
      version=$(basename "$version_dir")
      [ -e "$repo/$model/$version" ] && continue
      incoming="$repo/$model/.incoming-$version"
      rm -rf "$incoming"
      cp -R "$version_dir" "$incoming"
      mv "$incoming" "$repo/$model/$version"
      echo "added $model/$version"
    done
    config="$model_dir/config.yaml"
    target="$repo/$model/config.yaml"
    if [ -f "$config" ] && ! { [ -f "$target" ] && [ "$(cat "$config")" = "$(cat "$target")" ]; }; then
      cp "$config" "$repo/$model/.config.yaml.incoming"
      mv "$repo/$model/.config.yaml.incoming" "$target"
      echo "updated $model/config.yaml"
    fi
  done
}

sync_once
interval=${SYNC_INTERVAL_SECONDS:-0}
while [ "$interval" -gt 0 ]; do
  sleep "$interval"
  sync_once || echo "sync failed; retrying in ${interval}s" >&2
done
