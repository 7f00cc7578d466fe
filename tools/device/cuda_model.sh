#!/usr/bin/env bash
# On the GPU machine: build cuda_model_check for sm_90a on its own (tools/cuda/model: the CUDA backend, the
# model library and the host model code it needs, with header-only fmt/nlohmann from $DS_VENDOR_INCLUDE),
# then the whole-model checks on the fixtures under $FIXTURE_ROOT (default: the repository) and the
# real-shape bench on $BENCH_CONFIG; logs under $OUT. Each part runs even when an earlier one fails.
# Usage: tools/device/cuda_model.sh [bench args, e.g. --encoding 4:32 --streams 1,8,32,64]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-model-out}
build=${CUDA_BUILD_DIR:-/tmp/deltaserve-build-cuda-model}
fixtures=${FIXTURE_ROOT:-$root}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
start=$(date +%s)
cmake -S "$root/tools/cuda/model" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  ${DS_VENDOR_INCLUDE:+-DDS_VENDOR_INCLUDE=$DS_VENDOR_INCLUDE} >"$out/build.log" 2>&1
ninja -C "$build" -j"$(nproc)" cuda_model_check >>"$out/build.log" 2>&1 || { tail -60 "$out/build.log"; exit 1; }
echo "build: $(($(date +%s) - start)) s"
status=0
if [[ "${SKIP_CHECKS:-0}" != 1 ]]; then
  timeout "${CHECK_TIMEOUT:-240}" "$build/cuda_model_check" "$fixtures" --small-config \
    "$root/tests/cuda/flashnext-small-real-heads.json" 2>&1 | tee "$out/checks.log" || status=1
fi
if [[ -n "${BENCH_CONFIG:-}" ]]; then
  # GPU clocks and power once a second while the bench runs (the clocks were left as found).
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -l 1 \
    >"$out/clocks.csv" 2>&1 &
  smi=$!
  timeout "${BENCH_TIMEOUT:-300}" "$build/cuda_model_check" "$fixtures" --no-checks --bench "$BENCH_CONFIG" "$@" \
    2>&1 | tee "$out/bench.log" || status=1
  kill "$smi" 2>/dev/null
  awk -F', ' 'NR > 1 {print $2}' "$out/clocks.csv" | sort | uniq -c | sort -rn | head -5
fi
exit $status
