#!/usr/bin/env bash
# On the GPU machine, one call: (a) cuda_model_check's checks on the fixtures (no bench: the merged decode,
# prompt and MTP paths), (b) cuda_engine_contract on $MODEL (drafted == plain with the MTP head drafting, greedy
# and seeded, with rollbacks; resumed == fresh), (c) issue 6's receipt: `deltaserve run --backend cuda` with and
# without drafts on the prompts of docs/receipts/speculative.md, (d) `deltaserve bench --backend cuda` on
# $BENCH_CONFIG (dummy weights), drafts off and on through the engine. Each part under its own `timeout`, each
# run even when another fails; logs under $OUT. Programs: DS_PREBUILT (a folder, or a .tar.xz of one, holding
# deltaserve, cuda_engine_contract, cuda_model_check and lib/), else built here from this tree (as
# cuda_engine.sh does). Runtime libraries from the carried Debian packages in DS_DEBS (as cuda_engine.sh).
# PROMPT_PATH=1 also runs the contract with --prompt-path (CudaBackend's prompt passes; not yet run on the H200).
# (c) runs each case's VARIANTS (default "on off"; "legacy": the earlier draft path, DS_CUDA_DRAFTS_LEGACY=1;
# "host": drafts with the head's hidden rows through the host, DS_CUDA_HOST_HIDDEN=1; "guard": drafts with
# --draft-guard) with DS_CUDA_PHASES=1, each run's phase table into phases.log; ON_FLAGS: run's flags for every
# variant but "off".
# Usage: DS_DEBS=DIR [DS_PREBUILT=DIR|FILE] [MODEL=DIR] [BENCH_CONFIG=FILE] [RUNS=3] [PROMPT_PATH=1]
#   [VARIANTS="on legacy off"] [ON_FLAGS=...] tools/device/cuda_final.sh [bench args]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repo=${REPO:-$root}  # the fixtures, tests/cuda configs and models
out=${OUT:-$root/build-cuda-final-out}
model=${MODEL:-$repo/models/flashnext-tiny}
prefix=${DS_PREFIX:-/tmp/ds-prefix}
runs=${RUNS:-3}
mkdir -p "$out" "$prefix"
status=0
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

for deb in "${DS_DEBS:?DS_DEBS names the folder of .deb files}"/*.deb; do dpkg -x "$deb" "$prefix"; done
arch=x86_64-linux-gnu
export LD_LIBRARY_PATH=$prefix/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_LIBDIR=$prefix/usr/lib/$arch/pkgconfig:$prefix/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$prefix

bin=${DS_PREBUILT:-}
if [[ "$bin" == *.tar.xz ]]; then
  mkdir -p /tmp/ds-prebuilt && tar -xJf "$bin" -C /tmp/ds-prebuilt && bin=/tmp/ds-prebuilt
fi
export LD_LIBRARY_PATH=${bin:+$bin/lib:}/usr/local/cuda/lib64:$LD_LIBRARY_PATH
if [[ -z "$bin" ]] || ! "$bin/deltaserve" --help >/dev/null 2>&1; then
  stamp "building here (prebuilt: '${DS_PREBUILT:-}' missing or not runnable)"
  build=/tmp/deltaserve-build-final
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTASERVE_CUDA=ON -DDELTASERVE_WERROR=OFF \
    -DCMAKE_CXX_FLAGS="-Wno-array-bounds -Wno-stringop-overflow -Wno-dangling-reference" \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DDELTASERVE_TESTS=OFF -DDELTASERVE_BENCHES=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr" -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf" >"$out/build.log" 2>&1 &&
    timeout "${BUILD_TIMEOUT:-200}" ninja -C "$build" -j"$(nproc)" deltaserve cuda_engine_contract cuda_model_check \
      >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; status=1; }
  bin=$build
fi
stamp "programs: $bin"

stamp "== (a) cuda_model_check (checks only) =="
timeout "${CHECK_TIMEOUT:-80}" "$bin/cuda_model_check" "$repo" --small-config \
  "$repo/tests/cuda/flashnext-small-real-heads.json" >"$out/checks.log" 2>&1 || status=1
grep -cE "^ *FAIL " "$out/checks.log" | sed 's/^/failing lines: /' | tee -a "$out/summary.txt"
tail -3 "$out/checks.log" | tee -a "$out/summary.txt"

stamp "== (b) engine contract, MTP drafts =="
timeout "${CONTRACT_TIMEOUT:-100}" "$bin/cuda_engine_contract" "$model" --backend cuda >"$out/contract.log" 2>&1 ||
  status=1
cat "$out/contract.log" >>"$out/summary.txt"
if [[ "${PROMPT_PATH:-0}" == 1 ]]; then  # CudaBackend's prompt path (prompts as CudaModel prompt passes)
  stamp "== (b2) engine contract, --prompt-path =="
  timeout "${CONTRACT_TIMEOUT:-100}" "$bin/cuda_engine_contract" "$model" --backend cuda --prompt-path \
    >"$out/contract_prompt.log" 2>&1 || status=1
  cat "$out/contract_prompt.log" >>"$out/summary.txt"
fi

stamp "== (c) issue 6 receipt: run --backend cuda, drafts on / off =="
code=$(head -c 1200 "$repo/tools/fixtures/compare_engine.py")
receipt() {  # name, max tokens, then run's arguments
  local name=$1 n=$2
  shift 2
  for ((i = 1; i <= runs; ++i)); do
    for d in $variants; do
      # on: drafts (the default; ON_FLAGS, e.g. --cuda-drafts for a build before 2026-12-01 04:00 UTC that
      # gated them); legacy: the earlier draft path
      # (DS_CUDA_DRAFTS_LEGACY=1: one graph a kind, windows without graphs, re-runs as a pass); off: none.
      local extra=($on_flags) legacy=0 host=0
      [[ $d == off ]] && extra=(--no-drafts)
      [[ $d == legacy ]] && legacy=1
      [[ $d == host ]] && host=1
      [[ $d == guard ]] && extra+=(--draft-guard)
      local reply err=/tmp/ds-run-err.txt
      reply=$(DS_CUDA_DRAFTS_LEGACY=$legacy DS_CUDA_HOST_HIDDEN=$host DS_CUDA_PHASES=1 timeout 30 \
        "$bin/deltaserve" run "$model" --backend cuda --max-tokens "$n" "$@" "${extra[@]}" 2>"$err" |
        md5sum | cut -c1-8)
      local stats
      stats=$(grep -E 'tok/s' "$err" | tr -d '[]')
      echo "$name n=$n drafts $d run $i: reply md5 $reply ${stats:-$(tail -1 "$err")}" |
        tee -a "$out/receipt.log"
      { echo "== $name n=$n drafts $d run $i"; grep -v '^$' "$err" | grep -vE 'tok/s' || true; } >>"$out/phases.log"
    done
  done
}
variants=${VARIANTS:-on off}
on_flags=${ON_FLAGS:-}
(
  receipt fib 256 -p "def fibonacci(n):" --temperature 0
  receipt chat 256 --chat -p "Write a Python function that returns the n-th Fibonacci number." --temperature 0
  receipt heldout 128 -p "$code" --temperature 0
  receipt heldout-T0.6 128 -p "$code" --temperature 0.6 --top-p 0.95 --top-k 20 --seed 7
) &
pid=$!
(sleep "${RECEIPT_TIMEOUT:-80}" && kill "$pid" 2>/dev/null) &
wait "$pid" || status=1
cat "$out/receipt.log" >>"$out/summary.txt" 2>/dev/null

if [[ -n "${BENCH_CONFIG:-}" ]]; then
  stamp "== (d) bench --backend cuda (dummy weights), engine drafts off / on =="
  timeout "${BENCH_TIMEOUT:-70}" "$bin/deltaserve" bench --backend cuda --load-format dummy --config "$BENCH_CONFIG" \
    "$@" >"$out/bench.log" 2>&1 || status=1
  cat "$out/bench.log" >>"$out/summary.txt"
fi
stamp "done, status $status"
exit $status
