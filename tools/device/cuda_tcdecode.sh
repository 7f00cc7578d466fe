#!/usr/bin/env bash
# On the GPU machine, one call for the tensor-core decode products (docs/cuda-products.md, "Decode products on
# the tensor cores"): builds cuda_wx_check and cuda_model_check side by side (as cuda_check.sh and
# cuda_model.sh do), then (a) cuda_wx_check --only decode-tc's checks, (b) the prompt products' checks (--only
# tiled --no-bench: they share tc_common.cuh and the expert grouping), (c) cuda_model_check's checks on the
# fixtures with DS_CUDA_DECODE_PRODUCTS=tensor-all (every matrix the tensor products take), (d) on
# $BENCH_CONFIG: with OP_STREAMS (e.g. 1,8,32,64) the op tables of the fma, tensor and tensor-tall products
# (one model, untimed rounds and per-op events at each count), else the real-shape bench per MODES (default
# "tensor fma"; a mode MODE/PLANES, e.g. tensor/chained, sets DS_CUDA_TC_PLANES too), (e) the decode-tc product
# bench (--no-checks). Checks first, so a short call still checks.
# Each part under its own timeout (0 skips it), each run even when another fails; logs under $OUT.
# Usage: DS_VENDOR_INCLUDE=DIR [FIXTURE_ROOT=DIR] BENCH_CONFIG=FILE tools/device/cuda_tcdecode.sh [bench args]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-tcdecode-out}
fixtures=${FIXTURE_ROOT:-$root}
bw=/tmp/tcd-wx bm=/tmp/tcd-model
mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
on() { [[ "$1" != 0 ]]; }  # whether a part with this timeout runs (0 skips it)
# At most 8 files come back from the device tool: the GPU line goes into the summary, build logs stay in /tmp.
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv |
  tee -a "$out/summary.txt"
status=0
half=$(($(nproc) / 2))
(cmake -S "$root/tools/cuda" -B "$bw" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a &&
  ninja -C "$bw" -j"$half" cuda_wx_check) >/tmp/tcd-build-wx.log 2>&1 &
wx=$!
(cmake -S "$root/tools/cuda/model" -B "$bm" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  ${DS_VENDOR_INCLUDE:+-DDS_VENDOR_INCLUDE=$DS_VENDOR_INCLUDE} && ninja -C "$bm" -j"$half" cuda_model_check) \
  >/tmp/tcd-build-model.log 2>&1 &
mc=$!
wait "$wx" || { status=1; tail -40 /tmp/tcd-build-wx.log | tee -a "$out/summary.txt"; }
wait "$mc" || { status=1; tail -40 /tmp/tcd-build-model.log | tee -a "$out/summary.txt"; }
stamp "built"

if on "${TC_TIMEOUT:-60}"; then
  stamp "== (a) decode tc checks =="
  timeout "${TC_TIMEOUT:-60}" "$bw/cuda_wx_check" --only decode-tc --no-bench >"$out/decode_tc.log" 2>&1 ||
    status=1
  grep -E "FAIL|checks|worst" "$out/decode_tc.log" | tail -20 | tee -a "$out/summary.txt"
fi

if on "${TILED_TIMEOUT:-40}"; then
  stamp "== (b) prompt tiled checks =="
  timeout "${TILED_TIMEOUT:-40}" "$bw/cuda_wx_check" --only tiled --no-bench >"$out/tiled.log" 2>&1 || status=1
  tail -2 "$out/tiled.log" | tee -a "$out/summary.txt"
fi

if on "${CHECK_TIMEOUT:-90}"; then
  stamp "== (c) model checks, tensor-all =="
  DS_CUDA_DECODE_PRODUCTS=tensor-all timeout "${CHECK_TIMEOUT:-90}" "$bm/cuda_model_check" "$fixtures" \
    --small-config "$root/tests/cuda/flashnext-small-real-heads.json" >"$out/checks_tensor.log" 2>&1 || status=1
  grep -cE "^ *FAIL " "$out/checks_tensor.log" | sed 's/^/failing lines: /' | tee -a "$out/summary.txt"
  grep -A12 "FAILED checks" "$out/checks_tensor.log" | tee -a "$out/summary.txt"
  tail -3 "$out/checks_tensor.log" | tee -a "$out/summary.txt"
fi

if [[ -n "${BENCH_CONFIG:-}" && -n "${OP_STREAMS:-}" ]]; then
  stamp "== (d) op tables $OP_STREAMS =="
  timeout "${BENCH_TIMEOUT:-120}" "$bm/cuda_model_check" "$fixtures" --no-checks --bench "$BENCH_CONFIG" \
    --op-streams "$OP_STREAMS" --rounds 8 --mtp-reps 0 "$@" >"$out/optables.log" 2>&1 || status=1
  grep -E "streams.*tok/s" "$out/optables.log" | tee -a "$out/summary.txt"
elif [[ -n "${BENCH_CONFIG:-}" ]]; then
  for mode in ${MODES:-tensor fma}; do
    stamp "== (d) model bench, $mode =="
    # MODE/PLANES (tensor/chained) also sets DS_CUDA_TC_PLANES (the tensor products' layout of x's planes).
    products=${mode%%/*} planes=${mode#"$products"} planes=${planes#/}
    log="$out/bench_${mode//[:\/]/-}.log"  # tensor:8192 -> bench_tensor-8192.log
    DS_CUDA_DECODE_PRODUCTS=$products DS_CUDA_TC_PLANES=$planes timeout "${BENCH_TIMEOUT:-75}" \
      "$bm/cuda_model_check" "$fixtures" --no-checks --bench "$BENCH_CONFIG" "$@" >"$log" 2>&1 || status=1
    grep -E "^ +[0-9]+ +[0-9]+ " "$log" | tee -a "$out/summary.txt"
  done
fi

if on "${TC_BENCH_TIMEOUT:-60}"; then
  stamp "== (e) decode tc product bench =="
  timeout "${TC_BENCH_TIMEOUT:-60}" "$bw/cuda_wx_check" --only decode-tc --no-checks --reps "${TC_REPS:-10}" \
    >"$out/decode_tc_bench.log" 2>&1 || status=1
fi
stamp "done (status $status)"
exit $status
