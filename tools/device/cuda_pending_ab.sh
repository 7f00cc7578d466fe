#!/usr/bin/env bash
# On the GPU machine, one call: the A/Bs session 13 left compiled but not run, each switch off by default and
# in the graphs' key (docs/backend-cuda.md "What is next"):
#   DS_CUDA_LOADS_FIRST=1 (sass13): hc_head, the DeltaNet conv and rule + norm kernels and the paired-staged
#     one-row products issue their post-wait loads together (docs/receipts/cuda-decode-batch1.md);
#   DS_CUDA_DOWN_PAIRS_EARLY=1 (lead): the FMA expert down reads its pairs and first weights before its wait.
# First the checks (memcmp against the default kernels, negative controls; review13's new hc/moe checks among
# them), the whole model with each switch on, then the lean bench with each switch 0,1,0,1 in one process
# (1 and 8 streams; fma, and tensor for LOADS_FIRST). Make a switch the default if every check passes and the
# one-stream round is faster. Logs under $OUT, one archive.
# Usage: DS_PREBUILT=.dev/X/prebuilt.tar.xz BENCH_CONFIG=.dev/X/flashnext-large-config.json \
#   tools/device/cuda_pending_ab.sh          (tools/device/bundle_prebuilt.sh build-cuda .dev/X; carry .dev/X)
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
t0=$(date +%s); say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
b=/tmp/pb; mkdir -p $b && tar -xJf "${DS_PREBUILT:?DS_PREBUILT names the .tar.xz of the programs}" -C $b
export LD_LIBRARY_PATH=$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cfg=${BENCH_CONFIG:?BENCH_CONFIG names the real-shape config}
small=tests/cuda/flashnext-small-real-heads.json
run_check() {  # tag timeout program args... (env before the call)
  local tag=$1 t=$2; shift 2
  timeout "$t" "$@" > "$out/$tag.log" 2>&1
  say "$tag rc=$? FAIL lines: $(grep -cE '^ *FAIL ' "$out/$tag.log"); $(tail -1 "$out/$tag.log")"
}
run_check hc 60 $b/cuda_model_check . --hc-only
run_check moe 90 $b/cuda_model_check . --moe-only
run_check deltanet 60 $b/cuda_wx_check --only deltanet --no-bench
run_check weight 90 $b/cuda_wx_check --only weight --no-bench --quick
for fam in fma tensor-all; do
  DS_CUDA_LOADS_FIRST=1 DS_CUDA_DECODE_PRODUCTS=$fam run_check "model-loads-first-$fam" 100 \
    $b/cuda_model_check . --small-config $small
done
DS_CUDA_DOWN_PAIRS_EARLY=1 DS_CUDA_DECODE_PRODUCTS=fma run_check model-down-early-fma 100 \
  $b/cuda_model_check . --small-config $small
lean() {  # switch family
  DS_LEAN_ENV=$1=0,1,0,1 DS_LEAN_ENV_OPS=${OPS:-0} DS_CUDA_DECODE_PRODUCTS=$2 timeout ${BENCH_T:-100} \
    $b/cuda_model_check . --no-checks --lean-bench --bench $cfg --encoding 4:32 --streams 1,8 --rounds 8 \
    --mtp-reps 0 > "$out/lean-$1-$2.log" 2>&1
  say "lean $1 $2 rc=$?"
  grep -E "$1=" "$out/lean-$1-$2.log" | tee -a "$out/summary.txt"
}
lean DS_CUDA_LOADS_FIRST fma
lean DS_CUDA_LOADS_FIRST tensor
lean DS_CUDA_DOWN_PAIRS_EARLY fma
say done
(cd "$out" && tar -czf logs.tgz --remove-files *.log)
