#!/usr/bin/env bash
# On the GPU machine, in one call: the prompt path's checks and receipts (docs/receipts/cuda-prompt.md).
# Programs: DS_PREBUILT (a folder, or a .tar.xz of one, holding cuda_wx_check, cuda_model_check and, for the
# engine parts, deltaserve and cuda_engine_contract, with lib/; runtime libraries from the Debian packages in
# DS_DEBS, as cuda_final.sh), else cuda_wx_check and cuda_model_check built here side by side (sm_90a). Then:
# the kernel checks and bench of $KERNELS (cuda_wx_check --only; default tiled); the whole-model checks
# (fixtures through the decode and the prompt path, the real head shapes, the selected-blocks attention); the
# prompt bench at the real shape ($BENCH_CONFIG, lengths $PROMPTS); with deltaserve: the engine contract with
# --prompt-path on $MODEL, and `deltaserve bench --backend cuda` prompts ($ENGINE_PROMPTS) through the engine
# with prompt passes off, then on. Logs under $OUT; each part runs even when another fails.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-prompt-out}
fixtures=${FIXTURE_ROOT:-$root}
model=${MODEL:-$fixtures/models/flashnext-tiny}
mkdir -p "$out"
summary=$out/summary.txt
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$summary"
status=0
bin=${DS_PREBUILT:-}
if [[ -n "$bin" ]]; then
  prefix=/tmp/ds-prefix
  mkdir -p "$prefix"
  for deb in "${DS_DEBS:?DS_DEBS names the folder of .deb files}"/*.deb; do dpkg -x "$deb" "$prefix"; done
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [[ "$bin" == *.tar.xz ]]; then mkdir -p /tmp/ds-prebuilt && tar -xJf "$bin" -C /tmp/ds-prebuilt && bin=/tmp/ds-prebuilt; fi
  export LD_LIBRARY_PATH=$bin/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
  wx=$bin/cuda_wx_check mc=$bin/cuda_model_check
else
  (cmake -S "$root/tools/cuda" -B /tmp/ds-prompt-kernels -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CUDA_ARCHITECTURES=90a && ninja -C /tmp/ds-prompt-kernels -j8 cuda_wx_check) >"$out/build_kernels.log" 2>&1 &
  k=$!
  (cmake -S "$root/tools/cuda/model" -B /tmp/ds-prompt-model -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CUDA_ARCHITECTURES=90a ${DS_VENDOR_INCLUDE:+-DDS_VENDOR_INCLUDE=$DS_VENDOR_INCLUDE} &&
     ninja -C /tmp/ds-prompt-model -j8 cuda_model_check) >"$out/build_model.log" 2>&1 &
  m=$!
  wait $k; kb=$?
  wait $m; mb=$?
  stamp "builds: kernels rc $kb, model rc $mb"
  [[ $kb == 0 ]] || tail -40 "$out/build_kernels.log"
  [[ $mb == 0 ]] || tail -40 "$out/build_model.log"
  wx=/tmp/ds-prompt-kernels/cuda_wx_check mc=/tmp/ds-prompt-model/cuda_model_check
fi

stamp "== kernels: cuda_wx_check --only ${KERNELS:-tiled}"
timeout "${KERNEL_TIMEOUT:-90}" "$wx" --only "${KERNELS:-tiled}" --reps "${REPS:-20}" >"$out/kernels.log" 2>&1 ||
  status=1
grep -E "chunked|FAIL|checks:|speed-up|^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" "$out/kernels.log" | tee -a "$summary"

stamp "== whole model checks"
timeout "${CHECK_TIMEOUT:-150}" "$mc" "$fixtures" --small-config \
  "$fixtures/tests/cuda/flashnext-small-real-heads.json" >"$out/model_checks.log" 2>&1 || status=1
grep -E "prompt|FAIL|checks:|threw|real heads|passes|selected" "$out/model_checks.log" | tail -70 | tee -a "$summary"

if [[ -n "${BENCH_CONFIG:-}" ]]; then
  stamp "== prompt bench (cuda_model_check)"
  timeout "${BENCH_TIMEOUT:-200}" "$mc" "$fixtures" --no-checks --bench "$BENCH_CONFIG" \
    --prompt "${PROMPTS:-2048,8192,32768}" >"$out/prompt_bench.log" 2>&1 || status=1
  tail -80 "$out/prompt_bench.log" >>"$summary"
fi

if [[ -n "$bin" && -x "$bin/deltaserve" ]]; then
  stamp "== engine contract --prompt-path on $model"
  timeout "${CONTRACT_TIMEOUT:-80}" "$bin/cuda_engine_contract" "$model" --backend cuda --prompt-path \
    >"$out/contract_prompt.log" 2>&1 || status=1
  tail -20 "$out/contract_prompt.log" >>"$summary"
  if [[ -n "${BENCH_CONFIG:-}" && -n "${ENGINE_PROMPTS:-}" ]]; then
    for passes in off on; do
      stamp "== engine prompt bench, prompt passes $passes"
      flag=--cuda-prompt-passes=false
      [[ $passes == on ]] && flag=--cuda-prompt-passes=true
      timeout "${ENGINE_TIMEOUT:-90}" "$bin/deltaserve" bench --backend cuda --load-format dummy \
        --config "$BENCH_CONFIG" --streams 1 --decode-tokens 4 --prompt-lengths "$ENGINE_PROMPTS" "$flag" \
        >"$out/engine_$passes.log" 2>&1 || status=1
      cat "$out/engine_$passes.log" >>"$summary"
    done
  fi
fi
stamp "whole call done, status $status"
exit $status
