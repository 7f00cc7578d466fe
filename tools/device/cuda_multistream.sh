#!/usr/bin/env bash
# On the GPU machine: cuda_model_check's checks with DS_CUDA_DECODE_PRODUCTS=tensor-tall-all (the tensor decode
# products on every matrix with at least as many outputs as columns), then the per-op tables at $STREAMS
# (default 8,32,64) for the fma, tensor and tensor-tall products on $BENCH_CONFIG (docs/receipts/cuda-decode-streams.md,
# "Several streams"). Logs under $OUT; each part runs even when the other fails. Same variables as
# cuda_model.sh (DS_VENDOR_INCLUDE, FIXTURE_ROOT, CUDA_BUILD_DIR, CHECK_TIMEOUT).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-multistream-out}
build=${CUDA_BUILD_DIR:-/tmp/deltaserve-build-cuda-model}
mkdir -p "$out"
status=0
echo "== checks, tensor-tall-all"
OUT="$out" DS_CUDA_DECODE_PRODUCTS=tensor-tall-all BENCH_CONFIG= bash "$root/tools/device/cuda_model.sh" |
  grep -E "^checks:|FAILED|^  [^ ]" | tail -40 || status=1
grep -q "^checks: .* 0 failed" "$out/checks.log" || status=1
if [[ -n "${BENCH_CONFIG:-}" ]]; then
  echo "== op tables ${STREAMS:-8,32,64}"
  timeout "${BENCH_TIMEOUT:-300}" "$build/cuda_model_check" "${FIXTURE_ROOT:-$root}" --no-checks \
    --bench "$BENCH_CONFIG" --encoding 4:32 --op-streams "${STREAMS:-8,32,64}" --rounds 8 --mtp-reps 0 \
    2>&1 | tee "$out/optables.log" || status=1
fi
exit $status
