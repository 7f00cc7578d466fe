#!/usr/bin/env bash
# On the GPU machine, in one call: build cuda_wx_check and cuda_model_check side by side, then the kernel
# checks (cuda_check.sh, --quick --no-bench unless args say otherwise) and the whole-model checks and bench
# (cuda_model.sh with $BENCH_CONFIG). Logs under $OUT/kernels and $OUT/model; each part runs even when
# another fails. Usage: tools/device/cuda_all.sh [cuda_model.sh bench args...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-all-out}
mkdir -p "$out/kernels" "$out/model"
start=$(date +%s)
# Both builds at once (each a no-op when the scripts below re-run them).
(cmake -S "$root/tools/cuda" -B /tmp/deltaserve-build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
   -DCMAKE_CUDA_ARCHITECTURES=90a && ninja -C /tmp/deltaserve-build-cuda -j8 cuda_wx_check) \
  >"$out/kernels/build.log" 2>&1 &
k=$!
(cmake -S "$root/tools/cuda/model" -B /tmp/deltaserve-build-cuda-model -G Ninja -DCMAKE_BUILD_TYPE=Release \
   -DCMAKE_CUDA_ARCHITECTURES=90a ${DS_VENDOR_INCLUDE:+-DDS_VENDOR_INCLUDE=$DS_VENDOR_INCLUDE} &&
   ninja -C /tmp/deltaserve-build-cuda-model -j8 cuda_model_check) >"$out/model/build.log" 2>&1 &
m=$!
wait $k; kb=$?
wait $m; mb=$?
echo "builds: kernels rc $kb, model rc $mb, $(($(date +%s) - start)) s"
status=0
echo "== kernels: cuda_check.sh ${KERNEL_ARGS:---quick --no-bench}"
# shellcheck disable=SC2086
OUT="$out/kernels" timeout "${KERNEL_TIMEOUT:-120}" bash "$root/tools/device/cuda_check.sh" \
  ${KERNEL_ARGS:---quick --no-bench} >/dev/null 2>&1 || status=1
tail -3 "$out/kernels/cuda_wx_check.log" 2>/dev/null || tail -30 "$out/kernels/build.log"
echo "== model: cuda_model.sh $*"
OUT="$out/model" bash "$root/tools/device/cuda_model.sh" "$@" || status=1
echo "whole call: $(($(date +%s) - start)) s, status $status"
exit $status
