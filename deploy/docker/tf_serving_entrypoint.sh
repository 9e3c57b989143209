#!/bin/sh
# The image's entrypoint, installed as /usr/bin/tf_serving_entrypoint.sh: the tensorflow/serving image's
# own, so that `docker run`, a Compose file or a Kubernetes manifest written for that image runs this
# one unchanged. It serves the model MODEL_NAME (default model) from MODEL_BASE_PATH/MODEL_NAME
# (default /models/model), gRPC on 8500 and REST on 8501, and passes its arguments on as more flags
# (the last of a repeated flag wins, so `--rest_api_port=0` turns REST off):
#
#   tensorflow_model_server --port=8500 --rest_api_port=8501 \
#       --model_name=${MODEL_NAME} --model_base_path=${MODEL_BASE_PATH}/${MODEL_NAME} "$@"
#
# Beyond TensorFlow Serving's: a first argument that is not a flag is a command, run as it is, so
# `docker run IMAGE tensorgate serve` runs tensorgate's own server on the model repository at
# MODEL_BASE_PATH (unless TENSORGATE_MODEL_REPOSITORY names another), HTTP on 8000 and gRPC on 8001.
# Either way the server replaces this shell (exec): it is the container's main process and receives
# `docker stop`'s SIGTERM itself, for its graceful shutdown.
set -eu

MODEL_NAME=${MODEL_NAME:-model}
MODEL_BASE_PATH=${MODEL_BASE_PATH:-/models}

case "${1-}" in
  -* | "")
    exec tensorflow_model_server --port=8500 --rest_api_port=8501 \
      --model_name="$MODEL_NAME" --model_base_path="$MODEL_BASE_PATH/$MODEL_NAME" "$@"
    ;;
  *)
    # NOTE: set here rather than in the image's ENV: tensorflow_model_server would serve the whole
    # repository beside its one model if the variable were set for it too.
    TENSORGATE_MODEL_REPOSITORY=${TENSORGATE_MODEL_REPOSITORY:-$MODEL_BASE_PATH}
    export TENSORGATE_MODEL_REPOSITORY
    exec "$@"
    ;;
esac
