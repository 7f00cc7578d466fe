#!/usr/bin/env bash
# On the GPU machine: `cuda_wx_check --only decode-tc --no-bench` under each planes layout, alone and as two
# processes sharing the GPU at once, ROUNDS times (default 2). Session 12 saw checks fail only in the shared
# runs (2 of 2; 0 of 2 alone): the checks' inputs and poison went through the legacy stream
# (DeviceBuffer::upload / fill_bytes) while the kernels run on non-blocking streams; those calls now wait
# for the legacy stream. This script is the check that the race is gone.
# Usage: DS_PREBUILT=.dev/X/prebuilt.tar.xz tools/device/cuda_tc_pair.sh   (tools/device/bundle_prebuilt.sh)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
b=/tmp/pb; mkdir -p $b && tar -xJf "${DS_PREBUILT:?DS_PREBUILT names the .tar.xz of the programs}" -C $b
export LD_LIBRARY_PATH=$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
one() {  # tag planes
  DS_TC_CHECK_ONE_LAYOUT=1 DS_CUDA_TC_PLANES=$2 timeout ${CK_T:-90} $b/cuda_wx_check --only decode-tc --no-bench \
    > "$out/$1.log" 2>&1
  local rc=$?
  echo "[$(($(date +%s) - t0)) s] $1 rc=$rc FAIL lines: $(grep -cE '^ *FAIL ' "$out/$1.log"); $(tail -1 "$out/$1.log")" |
    tee -a "$out/summary.txt"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  one "alone-chained-$r" chained
  one "shared-chained-$r" chained & one "shared-columns-$r" columns & wait
done
grep -hE "^ *FAIL " "$out"/*.log | sort | uniq -c | tee -a "$out/summary.txt"
(cd "$out" && tar -czf logs.tgz --remove-files *.log)
