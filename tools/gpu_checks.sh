#!/usr/bin/env bash
# The GPU checks every session lent a GPU runs first (GPU_CHECKS.md in the team's shared folder), as one
# command on that machine, from the repository root:
#
#   tools/gpu_checks.sh OUT_DIR
#
# It expects python3 with cupy, pytest and pytest-xdist (the lent machines' image has them, and torch for
# the PyTorch baseline), tensorgate's other dependencies importable (carried as wheels: see the device
# tool's notes), and the bench models as bench/models/<name>/model.slim.pb + case.json
# (tools/bench_slim.py pack, here, after tools/make_fixtures.py --bench). Each step has a time limit so
# that one slow step cannot eat the others' time; every log lands in OUT_DIR:
#   env.txt        nvidia-smi, python, cupy and the card
#   gpu_tests.log  the GPU test files (engine devices, GPU kernels, the server's devices)
#   golden.log     every golden fixture on device gpu (TENSORGATE_TEST_DEVICE=gpu), failures by case
#   bench.log      bench/gpu_bench.py: BERT-mini/MobileNetV2 b1 eager vs CUDA graphs, ResNet50 b64 vs PyTorch
#   bench.json     the same figures
set -u
OUT=${1:?usage: tools/gpu_checks.sh OUT_DIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"

{
  nvidia-smi
  python3 -c "import sys, cupy, numpy; print(sys.version); print('cupy', cupy.__version__, 'numpy', numpy.__version__);
print(cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())"
  python3 tools/bench_slim.py unpack
} >"$OUT/env.txt" 2>&1

timeout "${GPU_TESTS_TIMEOUT:-150}" python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short \
  tests/engine/devices/test_gpu.py tests/kernels/test_gpu_kernels.py tests/service/test_devices.py \
  >"$OUT/gpu_tests.log" 2>&1
echo "exit status $?" >>"$OUT/gpu_tests.log"

XDIST=""
python3 -c "import xdist" 2>/dev/null && XDIST="-n ${GOLDEN_WORKERS:-8}"
TENSORGATE_TEST_DEVICE=gpu timeout "${GOLDEN_TIMEOUT:-220}" python3 -m pytest -v -p no:cacheprovider -rfE --tb=line \
  $XDIST tests/engine/runtime/test_golden.py -k test_matches_tensorflow \
  >"$OUT/golden.log" 2>&1
echo "exit status $?" >>"$OUT/golden.log"

timeout "${BENCH_TIMEOUT:-150}" python3 bench/gpu_bench.py --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1
echo "exit status $?" >>"$OUT/bench.log"
tail -n 3 "$OUT"/*.log
