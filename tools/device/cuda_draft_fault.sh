#!/usr/bin/env bash
# On the GPU machine: the check for the illegal address that CudaBackend's parked-graph draft forms once hit with
# prompt passes (docs/cuda-engine.md "Drafts and prompt passes"; fixed by the capture mutex). Runs
# `cuda_engine_contract MODEL --backend cuda --prompt-path` RUNS times under each setting (the parked forms, the
# default; then without window graphs; then without merged re-runs; the earlier forms as the control), then once
# under compute-sanitizer memcheck (its first report names the kernel). One log, $OUT/draft_fault.txt.
# Programs: DS_PREBUILT (a folder or .tar.xz holding cuda_engine_contract and lib/), runtime libraries from
# the Debian packages in DS_DEBS (as cuda_final.sh). Usage: DS_DEBS=DIR DS_PREBUILT=DIR|FILE [RUNS=4]
#   [MODEL=DIR] [SANITIZE_TIMEOUT=300] tools/device/cuda_draft_fault.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-draft-fault-out}
model=${MODEL:-$root/models/flashnext-tiny}
runs=${RUNS:-4}
mkdir -p "$out" /tmp/ds-prefix
for deb in "${DS_DEBS:?DS_DEBS names the folder of .deb files}"/*.deb; do dpkg -x "$deb" /tmp/ds-prefix; done
bin=${DS_PREBUILT:?DS_PREBUILT names the programs}
if [[ "$bin" == *.tar.xz ]]; then mkdir -p /tmp/ds-prebuilt && tar -xJf "$bin" -C /tmp/ds-prebuilt && bin=/tmp/ds-prebuilt; fi
export LD_LIBRARY_PATH=$bin/lib:/tmp/ds-prefix/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
contract() { timeout 60 "$bin/cuda_engine_contract" "$model" --backend cuda --prompt-path 2>&1 | grep -E "FAIL|PASS:" | head -2; }
{
  for setting in "DS_CUDA_DRAFTS_LEGACY=0" "DS_CUDA_WINDOW_GRAPHS=0" "DS_CUDA_MERGED_RERUNS=0" \
    "DS_CUDA_DRAFTS_LEGACY=1"; do
    for ((i = 1; i <= runs; ++i)); do
      echo "== $setting, run $i"
      read -ra pairs <<<"$setting"
      (export "${pairs[@]}" && contract)
    done
  done
  echo "== compute-sanitizer memcheck, parked forms"
  timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool memcheck \
    --print-limit 5 "$bin/cuda_engine_contract" "$model" --backend cuda --prompt-path 2>&1 | grep -vE "PASS" | head -60
} 2>&1 | tee "$out/draft_fault.txt"
