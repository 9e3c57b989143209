# Plain Dockerfile syntax, no `# syntax=` frontend and no BuildKit-only flags: it builds with BuildKit and with
# the classic builder alike, where no registry can be reached for a frontend image (air-gapped builders).
# tensorgate's container image, a drop-in for the tensorflow/serving image: python:3.11-slim,
# dependencies installed from a pinned, hashed lock, a non-root user, the example models baked in at
# /models for a quick start.
#
#   docker build -t tensorgate:0.1.0 .
#
# By default it runs as tensorflow/serving does (deploy/docker/tf_serving_entrypoint.sh): TensorFlow
# Serving's command line, `tensorflow_model_server`, serving the model MODEL_NAME (default model) from
# MODEL_BASE_PATH/MODEL_NAME (default /models/model), gRPC on 8500 and REST on 8501; arguments after the
# image name are more of its flags:
#
#   docker run --rm -p 8500:8500 -p 8501:8501 -e MODEL_NAME=half_plus_two tensorgate:0.1.0          # an example model
#   docker run --rm -p 8501:8501 -v "$PWD/my_model:/models/my_model" -e MODEL_NAME=my_model tensorgate:0.1.0
#   docker run --rm -p 8500:8500 -p 8501:8501 -v "$PWD/models:/models" tensorgate:0.1.0 \
#       --model_config_file=/models/models.config --enable_batching
#
# A first argument that is not a flag is a command: `tensorgate serve` runs tensorgate's own server on
# the whole model repository at /models, HTTP (TensorFlow Serving REST, the Open Inference Protocol,
# /metrics) on 8000 and gRPC (TensorFlow Serving's and the Open Inference Protocol's services,
# grpc.health.v1.Health, reflection) on 8001, configured by TENSORGATE_* variables
# (-e TENSORGATE_GRPC_PORT=0 turns gRPC off):
#
#   docker run --rm -p 8000:8000 -p 8001:8001 tensorgate:0.1.0 tensorgate serve                              # the example models
#   docker run --rm -p 8000:8000 -p 8001:8001 -v "$PWD/my_models:/models" tensorgate:0.1.0 tensorgate serve  # your repository
#
# The GPU variant is the same file with two build arguments: CuPy for CUDA 12 and the CUDA libraries
# it loads come from requirements-gpu.lock (PyPI wheels, so no CUDA base image is needed; the NVIDIA
# container runtime brings the driver), and the server runs models on the GPU by default:
#
#   docker build --build-arg REQUIREMENTS=requirements-gpu.lock --build-arg DEVICE=gpu -t tensorgate:0.1.0-gpu .
#   docker run --rm --gpus all -p 8500:8500 -p 8501:8501 -e MODEL_NAME=half_plus_two tensorgate:0.1.0-gpu
#
# Size, measured (`make image`, see docs/deploy.md): CPU 674 MB uncompressed on a Python base made from Debian
# bookworm (156 MB) + /opt/venv 515 MB (llvmlite 173 MB for the compiled kernels, numpy 73, pyicu 50, ydf 45,
# numba 35, ml_dtypes 24, grpcio 19); on python:3.11-slim (~125 MB) about 640 MB. GPU: roughly 3 GB more (the
# CUDA libraries), an estimate. From `docker run` to ready: 1.5-1.7 s for the example models.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ARG REQUIREMENTS=requirements.lock
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY requirements.lock requirements-gpu.lock /tmp/
# --require-hashes: every wheel is the one the lock names, byte for byte.
RUN /opt/venv/bin/pip install --no-deps --require-hashes -r "/tmp/${REQUIREMENTS}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY engine/ engine/
COPY kernels/ kernels/
COPY service/ service/
# The project itself, without dependencies (all came from the lock); then the installers go, since
# nothing at run time installs packages.
RUN /opt/venv/bin/pip install --no-deps --no-compile . \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib/python3.11/site-packages/engine \
       /opt/venv/lib/python3.11/site-packages/kernels /opt/venv/lib/python3.11/site-packages/service \
    && /opt/venv/bin/pip uninstall -q -y pip setuptools

FROM ${PYTHON_IMAGE}
ARG DEVICE=cpu
LABEL org.opencontainers.image.title="tensorgate" \
      org.opencontainers.image.description="A model server for TensorFlow graphs (TF Serving REST and the Open Inference Protocol)" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed uid/gid >= 10000, so that it never maps to a host user and Kubernetes' runAsNonRoot can check it.
# TensorFlow Serving's binary is /usr/bin/tensorflow_model_server: manifests that name it by path find
# ours there (the venv's console script, copied below).
# TensorFlow Serving's entrypoint, at its path (made executable below, whatever mode the checkout gave it),
# and the health check (see HEALTHCHECK below).
COPY deploy/docker/tf_serving_entrypoint.sh /usr/bin/tf_serving_entrypoint.sh
COPY deploy/docker/healthcheck.py /usr/local/lib/tensorgate/healthcheck.py
RUN groupadd --system --gid 10001 tensorgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin tensorgate \
    && ln -s /opt/venv/bin/tensorflow_model_server /usr/bin/tensorflow_model_server \
    && chmod 0755 /usr/bin/tf_serving_entrypoint.sh
COPY --from=build /opt/venv /opt/venv
# The example models, owned by the server's user: uploads, staging and trash live inside the repository.
# Mount your own repository over /models (the documented path); a mount replaces these.
COPY --chown=10001:10001 models/ /models/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    CUPY_CACHE_DIR=/tmp/cupy-kernel-cache \
    TENSORGATE_KERNEL_CACHE_DIR=/tmp/tensorgate-kernels \
    TENSORGATE_HOST=0.0.0.0 \
    TENSORGATE_PORT=8000 \
    TENSORGATE_GRPC_PORT=8001 \
    TENSORGATE_DEVICE=${DEVICE} \
    MODEL_BASE_PATH=/models \
    MODEL_NAME=model
# No TENSORGATE_MODEL_REPOSITORY here: tensorflow_model_server would serve the whole repository beside
# its model. The entrypoint gives commands (`tensorgate serve`) MODEL_BASE_PATH as the repository.
USER 10001:10001
WORKDIR /tmp
# gRPC and REST of TensorFlow Serving's command line; HTTP and gRPC of `tensorgate serve`.
EXPOSE 8500 8501 8000 8001
# The two command lines listen on different ports (and flags move them), so the check reads the
# server's command line from /proc and asks the port it serves HTTP on for /v2/health/live: liveness,
# not readiness (a model that fails to load keeps the server unready by design, but must not get the
# container restarted in a loop by an orchestrator that acts on "unhealthy"); with gRPC alone, whether
# the gRPC port accepts connections. tensorflow_model_server listens only once its models have loaded:
# start-period covers that, as it covers warm-up for `tensorgate serve`.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "/usr/local/lib/tensorgate/healthcheck.py"]
ENTRYPOINT ["/usr/bin/tf_serving_entrypoint.sh"]
