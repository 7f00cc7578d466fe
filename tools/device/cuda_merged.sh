#!/usr/bin/env bash
# On the GPU machine, one call: the merged tree's whole-model checks (fma and tensor-all), the engine contract
# (plain and --prompt-path), the lean decode bench (tensor at 1/8/64 streams, fma at 1/8; 4-bit g32) and the
# prompt bench (PROMPTS, default 2048,8192), each part under its own timeout, logs under $OUT, a summary.
# Programs: DS_PREBUILT, a .tar.xz of cuda_model_check, cuda_engine_contract, cuda_wx_check and lib/ (their
# non-system libraries: libcudart.so.13, libfmt.so.9), built here with -DDELTASERVE_CUDA=ON for sm_90a and
# carried (docs/receipts/cuda-decode-merged.md "session 10"). SKIP_6=0 adds 6-bit g64 at one stream;
# WX_ONLY=NAME adds `cuda_wx_check --only NAME --no-bench` after the contract. ENGINE_STREAMS=1,8 adds
# `deltaserve bench --backend cuda` (the engine on the real shape; the prebuilt then also holds deltaserve and its
# libraries: libpcre2-8, libutf8proc, libcpp-httplib, brotli). CONTRACT_DUMMY=0 skips the contract on random
# weights at the real hc and expert shapes under `tensor`. TC_PAIR=1 adds tools/device/cuda_tc_pair.sh
# (PAIR_ROUNDS rounds, default 1) at the end. TENSOR_STREAMS (default 1,8,64): the tensor bench's stream counts.
# Programs bundled by tools/device/bundle_prebuilt.sh build-cuda .dev/X (run here, then carry .dev/X).
# Usage: DS_PREBUILT=.dev/X/prebuilt.tar.xz BENCH_CONFIG=.dev/X/flashnext-large-config.json tools/device/cuda_merged.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
t0=$(date +%s); stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$out/summary.txt"
b=/tmp/pb; mkdir -p $b && tar -xJf "${DS_PREBUILT:?DS_PREBUILT names the .tar.xz of the programs}" -C $b
export LD_LIBRARY_PATH=$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cfg=${BENCH_CONFIG:?BENCH_CONFIG names the real-shape config (a copy of flashnext-large-config.json)}
small=tests/cuda/flashnext-small-real-heads.json
checks() {
  for fam in $1; do
    stamp "== checks $fam =="
    DS_CUDA_DECODE_PRODUCTS=$fam timeout ${CHECK_T:-100} $b/cuda_model_check . --small-config $small > "$out/checks-$fam.log" 2>&1
    echo "rc=$? FAIL lines: $(grep -cE '^ *FAIL ' "$out/checks-$fam.log")" | tee -a "$out/summary.txt"; tail -2 "$out/checks-$fam.log" | tee -a "$out/summary.txt"
  done
}
# The contract on a model (the arguments), plain and with --prompt-path; FAM: the products (default: the
# process's), logs $out/TAG.log and $out/TAG--prompt-path.log.
contract_runs() {  # TAG FAM MODEL-ARGS...
  local tag=$1 fam=$2; shift 2
  for pp in "" --prompt-path; do
    stamp "== $tag $pp =="
    env ${fam:+DS_CUDA_DECODE_PRODUCTS=$fam} timeout ${CONTRACT_T:-100} $b/cuda_engine_contract "$@" --backend cuda \
      $pp > "$out/$tag$pp.log" 2>&1
    echo "rc=$?" | tee -a "$out/summary.txt"; tail -4 "$out/$tag$pp.log" | tee -a "$out/summary.txt"
  done
}
contract() { contract_runs contract "" models/flashnext-tiny; }
# The contract at the real hc and expert shapes (random weights for the small real-heads config) under
# `tensor`, where the fused hc tail and the expert folds are taken (the tiny checkpoint's shapes take neither).
contract_real_shapes() {
  [[ "${CONTRACT_DUMMY:-1}" == 1 ]] || return 0
  contract_runs contract-dummy tensor --dummy-config $small
}
wx() {
  if [[ -n "${WX_ONLY:-}" ]]; then
    stamp "== cuda_wx_check --only $WX_ONLY =="
    timeout ${WX_T:-90} $b/cuda_wx_check --only "$WX_ONLY" --no-bench > "$out/wx.log" 2>&1; echo "rc=$?" | tee -a "$out/summary.txt"; tail -3 "$out/wx.log" | tee -a "$out/summary.txt"
  fi
}
# The lean bench's plain lines (streams, rounds, ms/round, tok/s; not the variants in parentheses).
plain_rounds() { grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+( +[0-9.]+%.*)?$" "$1" | head -8 | tee -a "$out/summary.txt"; }
bench() {  # family streams
  local fam=$1 STREAMS=$2
  stamp "== lean bench $fam 4:32 streams ${STREAMS:-1,8,32,64} =="
  DS_CUDA_DECODE_PRODUCTS=$fam timeout ${BENCH_T:-150} $b/cuda_model_check . --no-checks --lean-bench --bench $cfg \
    --encoding 4:32 --streams ${STREAMS:-1,8,32,64} --rounds ${ROUNDS:-8} > "$out/bench-$fam-${STREAMS//,/_}.log" 2>&1
  echo "rc=$?" | tee -a "$out/summary.txt"; plain_rounds "$out/bench-$fam-${STREAMS//,/_}.log"
}
six() {
  stamp "== lean bench fma 6:64 1 stream =="
  timeout ${BENCH_T:-150} $b/cuda_model_check . --no-checks --lean-bench --bench $cfg --encoding 6:64 --streams 1 --rounds ${ROUNDS:-8} > "$out/bench-6.log" 2>&1
  echo "rc=$?" | tee -a "$out/summary.txt"; plain_rounds "$out/bench-6.log"
}
prompts() {
  stamp "== prompts ${PROMPTS-2048,8192} =="
  timeout ${PROMPT_T:-150} $b/cuda_model_check . --no-checks --bench $cfg --prompt ${PROMPTS-2048,8192} > "$out/prompt.log" 2>&1
  echo "rc=$?" | tee -a "$out/summary.txt"
  grep -E "^prompt tiles|^ +[0-9]+ +[0-9.]+ +[0-9.]+$" "$out/prompt.log" | head -12 | tee -a "$out/summary.txt"
}
engine() {
  [[ -n "${ENGINE_STREAMS:-}" ]] || return 0
  stamp "== deltaserve bench --backend cuda, streams $ENGINE_STREAMS =="
  timeout ${ENGINE_T:-120} $b/deltaserve bench --backend cuda --load-format dummy --config $cfg \
    --prompt-lengths ${ENGINE_PROMPTS:-2048} --streams $ENGINE_STREAMS --decode-tokens 16 --repeats 1 --no-drafts \
    > "$out/engine-bench.log" 2>&1
  echo "rc=$?" | tee -a "$out/summary.txt"; tail -12 "$out/engine-bench.log" | tee -a "$out/summary.txt"
}
checks fma
contract
contract_real_shapes
wx
bench tensor ${TENSOR_STREAMS:-1,8,64}
bench fma 1,8
checks tensor-all
prompts
[[ "${SKIP_6:-1}" == 1 ]] || six
engine
if [[ "${TC_PAIR:-0}" == 1 ]]; then  # the decode-tc checks as two processes sharing the GPU (cuda_tc_pair.sh)
  stamp "== decode-tc checks, chained and columns sharing the GPU =="
  OUT="$out/pair" ROUNDS=${PAIR_ROUNDS:-1} DS_PREBUILT="$DS_PREBUILT" tools/device/cuda_tc_pair.sh | tail -6 |
    tee -a "$out/summary.txt"
  mv "$out/pair/logs.tgz" "$out/pair-logs.tgz" 2>/dev/null; rm -rf "$out/pair"
fi
stamp done
# Two files come back (the device returns a few files only): the summary and every log in one archive.
(cd "$out" && tar -czf logs.tgz --remove-files *.log)
