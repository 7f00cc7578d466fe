#!/usr/bin/env bash
# On the GPU machine, one call for the GPU sampler (docs/receipts/cuda-engine.md, "GPU sampler" and "GPU
# sampler filters"), each part run even when another fails, logs under $OUT:
# (1) cuda_sampling_check: DeviceSampler == KeyedSampler on random and adversarial rows, draw times against
#     the host path; (2) with check_before in DS_BIN, an earlier sampler's draw times (--bench-only);
# (3) cuda_sampling_engine on $BENCH_CONFIG: decode tok/s greedy vs T 0.6 top-k 20 top-p 0.95 drawn on the
#     device and on the host, replies equal; (4) cuda_engine_contract on models/flashnext-tiny;
# (5) while less than $SANITIZE_BEFORE s have passed, compute-sanitizer memcheck and racecheck on a few rows.
# Programs prebuilt here (-DDELTASERVE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a) in DS_BIN, with lib/ holding
# libcudart.so.13 and libfmt.so.9. Run from the repository root.
# Usage: DS_BIN=DIR BENCH_CONFIG=FILE [ROWS=4096] [STREAMS=1,8,32,64] [TOKENS=16] device_call.sh
set -uo pipefail
out=${OUT:-/tmp/sampling-out}
bin=${DS_BIN:?DS_BIN names the folder of programs}
mkdir -p "$out"
export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
t0=$(date +%s)
step() { echo "[$(($(date +%s) - t0)) s] == $1 ==" | tee -a "$out/summary.txt"; }
part() {  # part NAME TIMEOUT COMMAND...: runs it, its log and exit status into NAME.log and the summary
  local name=$1 limit=$2
  shift 2
  step "$name: $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "exit $?" >>"$out/$name.log"
  tail -n 40 "$out/$name.log" | tee -a "$out/summary.txt"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
part sampling "${SAMPLING_TIMEOUT:-60}" "$bin/cuda_sampling_check" --rows "${ROWS:-4096}"
[ -x "$bin/check_before" ] && part before "${BEFORE_TIMEOUT:-30}" "$bin/check_before" --bench-only
part engine "${ENGINE_TIMEOUT:-50}" "$bin/cuda_sampling_engine" "${BENCH_CONFIG:?}" --streams "${STREAMS:-1,8,32,64}" \
  --tokens "${TOKENS:-16}"
part contract "${CONTRACT_TIMEOUT:-40}" "$bin/cuda_engine_contract" models/flashnext-tiny --backend cuda
if [ $(($(date +%s) - t0)) -lt "${SANITIZE_BEFORE:-100}" ]; then
  part memcheck 20 compute-sanitizer --tool memcheck "$bin/cuda_sampling_check" --rows 64 --no-bench --seed 3
  part racecheck 25 compute-sanitizer --tool racecheck "$bin/cuda_sampling_check" --rows 64 --no-bench --seed 3
fi
step done
