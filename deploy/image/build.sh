#!/bin/bash
# `make image`: the CPU image from the Dockerfile, on a machine that cannot pull from a registry.
#
#   deploy/image/build.sh [TAG]          # default tag: tensorgate:<the package's version>
#
# The Dockerfile's base is python:3.11-slim. Where that cannot be pulled, this script makes a Python 3.11
# base from Debian itself (bookworm's python3 is 3.11): debootstrap a minimal root file system, install
# python3, python3-venv, python-is-python3 and ca-certificates in it, and import it into docker as
# local/python:3.11-bookworm (once; reused after). It is passed as PYTHON_IMAGE, so the Dockerfile itself stays
# right for the real python:3.11-slim. USE_PYTHON_IMAGE=python:3.11-slim skips the bootstrap where pulls work.
#
# Then it builds the image, and measures what deployments need to know: the image's size, and the time from
# `docker run` to ready (TensorFlow Serving's command line serving half_plus_two, and `tensorgate serve`).
# The base image's pip gets PIP_CERT from the machine's CA bundle, so that a TLS-intercepting proxy the machine
# trusts is trusted in the build too.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
TAG=${1:-tensorgate:$VERSION}
BASE=${USE_PYTHON_IMAGE:-local/python:3.11-bookworm}
WORK=${IMAGE_WORK:-/tmp/tensorgate-image}
t() { echo "[$(date +%T)] $*"; }

# --- a docker daemon (no systemd on these machines: start containerd and dockerd ourselves)
if ! docker info >/dev/null 2>&1; then
  t "starting containerd and dockerd"
  mkdir -p "$WORK"
  setsid nohup containerd >"$WORK/containerd.log" 2>&1 &
  sleep 2
  setsid nohup dockerd --containerd=/run/containerd/containerd.sock >"$WORK/dockerd.log" 2>&1 &
  for _ in $(seq 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null
fi

# --- the Python base, made from Debian when it is not there
if [ -z "${USE_PYTHON_IMAGE:-}" ] && ! docker image inspect "$BASE" >/dev/null 2>&1; then
  t "debootstrap bookworm (minbase) + python3.11"
  MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  ROOTFS="$WORK/rootfs"
  rm -rf "$ROOTFS" && mkdir -p "$ROOTFS"
  debootstrap --variant=minbase bookworm "$ROOTFS" "${MIRROR:-http://deb.debian.org/debian}" >"$WORK/debootstrap.log" 2>&1
  chroot "$ROOTFS" apt-get install -y -qq --no-install-recommends python3 python3-venv python-is-python3 \
    ca-certificates >"$WORK/apt.log" 2>&1
  # The machine's CA bundle (which may hold a proxy's CA the machine trusts), for the build's pip.
  cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
  chroot "$ROOTFS" apt-get clean
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/* "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/*
  tar -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' - "$BASE" >/dev/null
  rm -rf "$ROOTFS"
fi
t "base: $BASE ($(docker image inspect -f '{{.Size}}' "$BASE" | awk '{printf "%.0f MB", $1/1e6}'))"

# --- the image
t "docker build -t $TAG"
start=$(date +%s)
docker build --network host --build-arg "PYTHON_IMAGE=$BASE" -t "$TAG" "$ROOT" >"$WORK/build.log" 2>&1 \
  || { tail -30 "$WORK/build.log"; exit 1; }
t "built in $(( $(date +%s) - start )) s: $TAG, $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}') uncompressed"

# --- start to ready, both command lines
ready() {  # ready NAME URL DOCKER-RUN-ARGS...: seconds from `docker run` to a 200 from URL
  local name=$1 url=$2; shift 2
  docker rm -f "$name" >/dev/null 2>&1 || true
  local t0; t0=$(date +%s.%N)
  docker run -d --name "$name" "$@" >/dev/null
  for _ in $(seq 1200); do
    if curl -fs -o /dev/null "$url"; then
      python3 -c 'import sys; print(f"{float(sys.argv[1]) - float(sys.argv[2]):.1f}")' "$(date +%s.%N)" "$t0"
      docker rm -f "$name" >/dev/null
      return 0
    fi
    sleep 0.05
  done
  docker logs "$name" | tail -20
  docker rm -f "$name" >/dev/null
  return 1
}
s=$(ready tg-ready-tfs http://127.0.0.1:18501/v1/models/half_plus_two -p 127.0.0.1:18501:8501 -e MODEL_NAME=half_plus_two "$TAG")
t "start to ready, tensorflow_model_server --model_name=half_plus_two: ${s} s"
s=$(ready tg-ready-serve http://127.0.0.1:18000/v2/health/ready -p 127.0.0.1:18000:8000 "$TAG" tensorgate serve)
t "start to ready, tensorgate serve (the example repository): ${s} s"
