#!/usr/bin/env bash
# On the GPU machine: the engine on the CUDA backend. Builds deltaserve and cuda_engine_contract there from this
# tree, with the CPU build's libraries from carried Debian packages (DS_DEBS: *.deb, `dpkg -x` into a prefix,
# not into /), unless DS_PREBUILT names a folder holding both programs (built elsewhere with
# -DDELTASERVE_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES=90a; their runtime libraries still come from DS_DEBS).
# Then: the exactness contract through the Engine API on $MODEL (cuda_engine_contract), a `run --backend cuda`
# smoke (drafts on == off, greedy and seeded), a `serve --backend cuda` smoke (the same completion twice: the
# second hits the prompt cache and must be equal), and `bench --backend cuda` on $BENCH_CONFIG (decode
# tokens/s of CudaModel alone and through the engine). Logs under $OUT; each part runs even when one fails.
# Usage: DS_DEBS=DIR [DS_PREBUILT=DIR] [MODEL=DIR] [BENCH_CONFIG=FILE] tools/device/cuda_engine.sh [bench args]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/build-cuda-engine-out}
model=${MODEL:-$root/models/flashnext-tiny}
prefix=${DS_PREFIX:-/tmp/ds-prefix}
build=${CUDA_BUILD_DIR:-/tmp/deltaserve-build-cuda-engine}
mkdir -p "$out" "$prefix"
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

# The packages' files under $prefix/usr; pkgconf, CMake and the loader are pointed there.
for deb in "${DS_DEBS:?DS_DEBS names the folder of .deb files}"/*.deb; do
  if command -v dpkg >/dev/null; then dpkg -x "$deb" "$prefix"; else
    (tmp=$(mktemp -d) && cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$prefix" && rm -rf "$tmp"); fi
done
arch=x86_64-linux-gnu
export LD_LIBRARY_PATH=$prefix/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_LIBDIR=$prefix/usr/lib/$arch/pkgconfig:$prefix/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$prefix

bin=${DS_PREBUILT:-}
# BUILD=1 builds here even with DS_PREBUILT given (which then stands in if the build fails).
if [[ -z "$bin" || "${BUILD:-0}" == 1 ]]; then
  start=$(date +%s)
  # No -Werror there: GCC 13 (the GPU machine's) warns where GCC 12 does not (false array-bounds and
  # stringop-overflow inside fmt, dangling-reference); the CPU machines' GCC 12 build keeps -Werror.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTASERVE_CUDA=ON -DDELTASERVE_WERROR=OFF \
    -DCMAKE_CXX_FLAGS="-Wno-array-bounds -Wno-stringop-overflow -Wno-dangling-reference" \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DDELTASERVE_TESTS=OFF -DDELTASERVE_BENCHES=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr" -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf" >"$out/build.log" 2>&1 &&
    timeout "${BUILD_TIMEOUT:-400}" ninja -C "$build" -j"$(nproc)" deltaserve cuda_engine_contract >>"$out/build.log" 2>&1
  rc=$?
  echo "build: rc $rc, $(($(date +%s) - start)) s" | tee -a "$out/summary.txt"
  if [[ $rc == 0 ]]; then
    bin=$build
  else
    tail -40 "$out/build.log"
    status=1
    [[ -n "$bin" ]] || exit 1
    echo "build failed: running the prebuilt programs in $bin" | tee -a "$out/summary.txt"
  fi
fi
echo "programs: $bin" | tee -a "$out/summary.txt"
# A prebuilt folder may carry the CUDA runtime it was linked with (lib/libcudart.so.13).
export LD_LIBRARY_PATH=$bin/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
ldd "$bin/deltaserve" | grep -i "not found" && status=1

echo "== contract ==" | tee -a "$out/summary.txt"
timeout "${CONTRACT_TIMEOUT:-200}" "$bin/cuda_engine_contract" "$model" --backend cuda 2>&1 | tee "$out/contract.log" ||
  status=1
grep -E "PASS|FAIL" "$out/contract.log" | tail -1 >>"$out/summary.txt"

echo "== run --backend cuda ==" | tee -a "$out/summary.txt"
prompt="The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick"
for args in "--temperature 0" "--temperature 0.8 --top-p 0.9 --seed 5"; do
  # shellcheck disable=SC2086
  a=$(timeout 60 "$bin/deltaserve" run "$model" -p "$prompt" -n 48 --backend cuda $args 2>"$out/run_err.txt")
  # shellcheck disable=SC2086
  b=$(timeout 60 "$bin/deltaserve" run "$model" -p "$prompt" -n 48 --backend cuda --no-drafts $args 2>>"$out/run_err.txt")
  same=$([[ "$a" == "$b" && -n "$a" ]] && echo yes || echo NO)
  [[ $same == yes ]] || status=1
  printf '%s: drafts == no drafts: %s\n  reply: %q\n' "$args" "$same" "$a" | tee -a "$out/summary.txt"
done
grep -E "tok/s" "$out/run_err.txt" | tee -a "$out/summary.txt"

echo "== serve --backend cuda ==" | tee -a "$out/summary.txt"
"$bin/deltaserve" serve "$model" --backend cuda --port 18123 --parallel 4 >"$out/serve.log" 2>&1 &
server=$!
env -u LD_LIBRARY_PATH python3 - <<'PY' 2>&1 | tee -a "$out/summary.txt" || status=1
import json, time, urllib.error, urllib.request
base = "http://127.0.0.1:18123"
for _ in range(300):
    try:
        urllib.request.urlopen(base + "/health", timeout=1); break
    except Exception:
        time.sleep(0.2)
def complete(seed):
    body = {"prompt": "Once upon a time " * 40, "max_tokens": 32, "temperature": 0.7, "seed": seed}
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        r = json.load(urllib.request.urlopen(req, timeout=120))
    except urllib.error.HTTPError as e:
        raise SystemExit(f"serve: HTTP {e.code}: {e.read().decode()[:300]}")
    return r["choices"][0]["text"], r.get("usage", {})
first, u1 = complete(11)
second, u2 = complete(11)
print("serve: same completion twice:", "yes" if first == second else "NO", "| usage 1:", u1, "| usage 2:", u2)
print("  text:", repr(first[:120]))
if first != second:
    raise SystemExit(1)
PY
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

if [[ -n "${BENCH_CONFIG:-}" ]]; then
  echo "== bench --backend cuda ==" | tee -a "$out/summary.txt"
  timeout "${BENCH_TIMEOUT:-240}" "$bin/deltaserve" bench --backend cuda --load-format dummy --config "$BENCH_CONFIG" \
    "$@" 2>&1 | tee "$out/bench.log" | tee -a "$out/summary.txt" || status=1
fi
exit $status
