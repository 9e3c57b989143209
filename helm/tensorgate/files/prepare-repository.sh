#!/bin/sh
# Prepares the model repository before the server starts, in the server's image:
# - source "image": copies the models baked into the image (/models) into the pod's volume;
# - writes each model's config.yaml from the chart's ConfigMap (model.<name>.yaml), copied beside
#   and renamed into place, and only when it differs: on a shared volume every replica runs this,
#   and rewriting an unchanged file would make the others reload the model.
# REPOSITORY, CONFIG_DIR and IMAGE_MODELS override the paths (tests/deploy runs it outside a pod).
set -eu
repo=${REPOSITORY:-/repository}
config_dir=${CONFIG_DIR:-/config}
if [ "${SEED_FROM_IMAGE:-false}" = true ]; then
  cp -R "${IMAGE_MODELS:-/models}/." "$repo/"
fi
for file in "$config_dir"/model.*.yaml; do
  [ -f "$file" ] || continue
  model=$(basename "$file" .yaml)
  model=${model#model.}
  target="$repo/$model/config.yaml"
  if [ -f "$target" ] && [ "$(cat "$file")" = "$(cat "$target")" ]; then
    continue
  fi
  mkdir -p "$repo/$model"
  cp "$file" "$repo/$model/.config.yaml.incoming"
  mv "$repo/$model/.config.yaml.incoming" "$target"
  echo "wrote $target"
done
