#!/bin/bash
# `make e2e-k8s`: the image and the chart on a real single-node Kubernetes (1.20, built from Debian's source
# package by ../shared/k8s/), checked as a user would (deploy/e2e/k8s_checks.py). Not part of `make test`.
#
#   deploy/e2e/k8s.sh [CHECKS-ARGS...]     e.g. --interface tfserving, --keep (leave the release installed)
#
# Reuses what is there: a built Kubernetes in $W (default /tmp/kr), a running cluster, the image (make image
# builds it when `docker image inspect` does not find it). K8S_SCRIPTS names the directory of
# build-kubernetes.sh and start-cluster.sh (default: ../shared/k8s beside the checkout).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export W=${W:-/tmp/kr}
K8S_SCRIPTS=${K8S_SCRIPTS:-$ROOT/../shared/k8s}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
IMAGE=${IMAGE:-tensorgate:$VERSION}
t() { echo "[$(date +%T)] $*"; }
start=$(date +%s)

if [ ! -x "$W/bin/kube-apiserver" ]; then
  t "building Kubernetes (once, ~10 min)"
  bash "$K8S_SCRIPTS/build-kubernetes.sh"
fi
if ! "$W/bin/kubectl" --kubeconfig "$W/kubeconfig" get nodes 2>/dev/null | grep -q " Ready"; then
  t "starting the cluster"
  bash "$K8S_SCRIPTS/start-cluster.sh" >/dev/null
fi
# dockerd sets the FORWARD chain's policy to DROP, and with bridge-nf-call-iptables on, traffic between pods on
# the CNI bridge goes through that chain: pods could not reach each other (nor a Service, from a pod: helm test).
for dir in -i -o; do
  iptables -C FORWARD $dir cni0 -j ACCEPT 2>/dev/null || iptables -I FORWARD 1 $dir cni0 -j ACCEPT
done
if ! docker image inspect k8s.gcr.io/pause:3.2 >/dev/null 2>&1; then
  t "the kubelet's pause image, FROM scratch (nothing is pulled)"
  mkdir -p "$W/img/pause"
  gcc -Os -static -o "$W/img/pause/pause" "$W/kubernetes-1.20.2/build/pause/linux/pause.c"
  printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$W/img/pause/Dockerfile"
  DOCKER_BUILDKIT=0 docker build -q -t k8s.gcr.io/pause:3.2 "$W/img/pause" >/dev/null
fi
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  t "make image"
  "$ROOT/deploy/image/build.sh" "$IMAGE"
fi
t "cluster and image ready ($(( $(date +%s) - start )) s)"
"$ROOT/.venv/bin/python" "$ROOT/deploy/e2e/k8s_checks.py" --kubeconfig "$W/kubeconfig" --bin "$W/bin" --image "$IMAGE" "$@"
t "e2e done in $(( $(date +%s) - start )) s"
