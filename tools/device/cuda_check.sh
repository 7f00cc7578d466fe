#!/usr/bin/env bash
# On the GPU machine: build the CUDA backend and cuda_wx_check for sm_90a (CUDA only: the machine lacks the CPU
# build's -dev libraries), run the checks and the bench (weight products, DeltaNet, attention, routing), log
# everything under $OUT. Usage: tools/device/cuda_check.sh [cuda_wx_check args...]; CUDA_CHECK_SANITIZE=1 also
# runs the quick checks under compute-sanitizer (memcheck), for at most CUDA_SANITIZE_TIMEOUT seconds (240).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-out}
build=${CUDA_BUILD_DIR:-/tmp/deltaserve-build-cuda}
mkdir -p "$out"

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
nvcc --version | tail -2 | tee -a "$out/gpu.txt"
start=$(date +%s)
cmake -S "$root/tools/cuda" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  >"$out/build.log" 2>&1
ninja -C "$build" -j"$(nproc)" -k 0 cuda_wx_check >>"$out/build.log" 2>&1 || { tail -80 "$out/build.log"; exit 1; }
echo "build: $(($(date +%s) - start)) s"

status=0
"$build/cuda_wx_check" "$@" 2>&1 | tee "$out/cuda_wx_check.log" || status=$?
if [[ "${CUDA_CHECK_SANITIZE:-0}" == 1 ]]; then
  timeout "${CUDA_SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool memcheck --report-api-errors no --print-limit 20 "$build/cuda_wx_check" --quick --no-bench \
    >"$out/sanitizer.log" 2>&1 || status=$?
  tail -5 "$out/sanitizer.log"
fi
exit $status
