#!/usr/bin/env bash
# On the GPU machine, one call for the GPU sampler (docs/receipts/cuda-engine.md, "GPU sampler"):
# (1) cuda_sampling_check: DeviceSampler == KeyedSampler on random and adversarial rows, and draw times;
# (2) tools/device/cuda_final.sh: the engine contract (device draws on, plus device == host draws), issue 6's
# drafts on/off runs, `bench --backend cuda` (engine with device draws and with host draws) on $BENCH_CONFIG.
# Programs: DS_PREBUILT (a .tar.xz of deltaserve, cuda_engine_contract, cuda_sampling_check, lib/); runtime
# libraries from the Debian packages in DS_DEBS. Logs under $OUT.
# Usage: DS_DEBS=DIR DS_PREBUILT=FILE [BENCH_CONFIG=FILE] [ROWS=4096] device_call.sh [bench args]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-/tmp/gpusample-out}
mkdir -p "$out" /tmp/ds-prebuilt
tar -xJf "${DS_PREBUILT:?}" -C /tmp/ds-prebuilt
bin=/tmp/ds-prebuilt
prefix=${DS_PREFIX:-/tmp/ds-prefix}
for deb in "${DS_DEBS:?DS_DEBS names the folder of .deb files}"/*.deb; do dpkg -x "$deb" "$prefix"; done
export LD_LIBRARY_PATH=$bin/lib:$prefix/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
t0=$(date +%s)
echo "[0 s] == (1) cuda_sampling_check ==" | tee -a "$out/summary.txt"
timeout "${SAMPLING_TIMEOUT:-90}" "$bin/cuda_sampling_check" --rows "${ROWS:-4096}" >"$out/sampling.log" 2>&1
echo "exit $?" >>"$out/sampling.log"
tee -a "$out/summary.txt" <"$out/sampling.log"
echo "[$(($(date +%s) - t0)) s] == (2) cuda_final.sh ==" | tee -a "$out/summary.txt"
OUT=$out DS_PREBUILT=$bin bash "$here/../../device/cuda_final.sh" "$@"
