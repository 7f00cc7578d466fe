#!/usr/bin/env bash
# On the GPU machine, one call for the tensor-core decode products (docs/backend-cuda.md, "Decode products on
# the tensor cores"): builds cuda_wx_check and cuda_model_check side by side (as cuda_check.sh and
# cuda_model.sh do), then (a) cuda_wx_check --only decode-tc (checks, then the product bench against the FMA
# products), (b) the prompt products' checks (--only tiled --no-bench: they share tc_common.cuh), (c)
# cuda_model_check's checks on the fixtures with DS_CUDA_DECODE_PRODUCTS=tensor-all (every matrix the tensor
# products take), (d) the real-shape bench on $BENCH_CONFIG with DS_CUDA_DECODE_PRODUCTS=tensor, then fma. Each
# part under its own timeout, each run even when another fails; logs under $OUT. MODES: the bench's
# DS_CUDA_DECODE_PRODUCTS values (default "tensor fma"; e.g. "tensor:8192" for the wide matrices alone).
# Usage: DS_VENDOR_INCLUDE=DIR [FIXTURE_ROOT=DIR] BENCH_CONFIG=FILE tools/device/cuda_tcdecode.sh [bench args]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-tcdecode-out}
fixtures=${FIXTURE_ROOT:-$root}
bw=/tmp/tcd-wx bm=/tmp/tcd-model
mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
status=0
half=$(($(nproc) / 2))
(cmake -S "$root/tools/cuda" -B "$bw" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a &&
  ninja -C "$bw" -j"$half" cuda_wx_check) >"$out/build-wx.log" 2>&1 &
wx=$!
(cmake -S "$root/tools/cuda/model" -B "$bm" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  ${DS_VENDOR_INCLUDE:+-DDS_VENDOR_INCLUDE=$DS_VENDOR_INCLUDE} && ninja -C "$bm" -j"$half" cuda_model_check) \
  >"$out/build-model.log" 2>&1 &
mc=$!
wait "$wx" || { status=1; tail -40 "$out/build-wx.log"; }
wait "$mc" || { status=1; tail -40 "$out/build-model.log"; }
stamp "built"

stamp "== (a) decode tc checks + bench =="
timeout "${TC_TIMEOUT:-110}" "$bw/cuda_wx_check" --only decode-tc --reps 10 >"$out/decode_tc.log" 2>&1 || status=1
grep -E "FAIL|checks:|worst|all .* passed" "$out/decode_tc.log" | tee -a "$out/summary.txt"

stamp "== (b) prompt tiled checks =="
timeout "${TILED_TIMEOUT:-40}" "$bw/cuda_wx_check" --only tiled --no-bench >"$out/tiled.log" 2>&1 || status=1
tail -2 "$out/tiled.log" | tee -a "$out/summary.txt"

stamp "== (c) model checks, tensor-all =="
DS_CUDA_DECODE_PRODUCTS=tensor-all timeout "${CHECK_TIMEOUT:-90}" "$bm/cuda_model_check" "$fixtures" \
  --small-config "$root/tests/cuda/flashnext-small-real-heads.json" >"$out/checks_tensor.log" 2>&1 || status=1
grep -ciE "\bFAIL" "$out/checks_tensor.log" | sed 's/^/failing lines: /' | tee -a "$out/summary.txt"
tail -3 "$out/checks_tensor.log" | tee -a "$out/summary.txt"

if [[ -n "${BENCH_CONFIG:-}" ]]; then
  for mode in ${MODES:-tensor fma}; do
    stamp "== (d) model bench, $mode =="
    log="$out/bench_${mode//:/-}.log"  # tensor:8192 -> bench_tensor-8192.log
    DS_CUDA_DECODE_PRODUCTS=$mode timeout "${BENCH_TIMEOUT:-75}" "$bm/cuda_model_check" "$fixtures" --no-checks \
      --bench "$BENCH_CONFIG" "$@" >"$log" 2>&1 || status=1
    grep -E "^ +[0-9]+ +[0-9]+ " "$log" | tee -a "$out/summary.txt"
  done
fi
stamp "done (status $status)"
exit $status
