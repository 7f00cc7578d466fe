#!/usr/bin/env bash
# On the GPU machine, in one call: the prompt path's checks and receipts (docs/receipts/cuda-prompt.md). Builds
# cuda_wx_check and cuda_model_check side by side (sm_90a), then: the tiled-product checks and their bench
# against cuBLAS (cuda_wx_check --only tiled); the whole-model checks (fixtures through the decode and the
# prompt path, the real head shapes); the prompt bench at the real shape ($BENCH_CONFIG, lengths $PROMPTS).
# Logs under $OUT; each part runs even when another fails.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-prompt-out}
fixtures=${FIXTURE_ROOT:-$root}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
start=$(date +%s)
(cmake -S "$root/tools/cuda" -B /tmp/ds-prompt-kernels -G Ninja -DCMAKE_BUILD_TYPE=Release \
   -DCMAKE_CUDA_ARCHITECTURES=90a && ninja -C /tmp/ds-prompt-kernels -j8 cuda_wx_check) >"$out/build_kernels.log" 2>&1 &
k=$!
(cmake -S "$root/tools/cuda/model" -B /tmp/ds-prompt-model -G Ninja -DCMAKE_BUILD_TYPE=Release \
   -DCMAKE_CUDA_ARCHITECTURES=90a ${DS_VENDOR_INCLUDE:+-DDS_VENDOR_INCLUDE=$DS_VENDOR_INCLUDE} &&
   ninja -C /tmp/ds-prompt-model -j8 cuda_model_check) >"$out/build_model.log" 2>&1 &
m=$!
wait $k; kb=$?
wait $m; mb=$?
echo "builds: kernels rc $kb, model rc $mb, $(($(date +%s) - start)) s"
[[ $kb == 0 ]] || tail -40 "$out/build_kernels.log"
[[ $mb == 0 ]] || tail -40 "$out/build_model.log"
status=0
echo "== tiled products: checks and bench"
timeout "${KERNEL_TIMEOUT:-90}" /tmp/ds-prompt-kernels/cuda_wx_check --only tiled --reps 20 >"$out/tiled.log" 2>&1 ||
  status=1
grep -v "^ *$" "$out/tiled.log" | tail -45
echo "== whole model checks ($(($(date +%s) - start)) s)"
timeout "${CHECK_TIMEOUT:-150}" /tmp/ds-prompt-model/cuda_model_check "$fixtures" --small-config \
  "$root/tests/cuda/flashnext-small-real-heads.json" >"$out/model_checks.log" 2>&1 || status=1
grep -E "prompt|FAIL|checks:|threw|real heads|passes" "$out/model_checks.log" | tail -60
if [[ -n "${BENCH_CONFIG:-}" ]]; then
  echo "== prompt bench ($(($(date +%s) - start)) s)"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -l 1 \
    >"$out/clocks.csv" 2>&1 &
  smi=$!
  timeout "${BENCH_TIMEOUT:-200}" /tmp/ds-prompt-model/cuda_model_check "$fixtures" --no-checks \
    --bench "$BENCH_CONFIG" --prompt "${PROMPTS:-2048,8192,32768}" >"$out/prompt_bench.log" 2>&1 || status=1
  kill "$smi" 2>/dev/null
  tail -40 "$out/prompt_bench.log"
  awk -F', ' 'NR > 1 {print $2}' "$out/clocks.csv" | sort | uniq -c | sort -rn | head -3
fi
echo "whole call: $(($(date +%s) - start)) s, status $status"
exit $status
