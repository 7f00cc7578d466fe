#!/usr/bin/env bash
# Here (the CPU machine with the CUDA toolkit): packs the programs the device scripts run from a build with
# -DDELTASERVE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a into OUT_DIR/prebuilt.tar.xz (stripped cuda_model_check,
# cuda_engine_contract, cuda_wx_check, deltaserve + lib/: libcudart and the CPU libraries the device lacks)
# and copies the real-shape config beside it; carry OUT_DIR (tools/device/cuda_merged.sh names both).
# One xz dictionary over all four: they share ~30 MB of device code each, so ~12 MB instead of 40 (the
# working tree plus what is carried must stay under 64 MiB).
# Usage: tools/device/bundle_prebuilt.sh build-cuda .dev/X
set -euo pipefail
b=${1:?build directory}; o=${2:?output directory}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT; mkdir -p "$t/lib" "$o"
for p in cuda_model_check cuda_engine_contract cuda_wx_check deltaserve; do
  [[ -x "$b/$p" ]] || { echo "bundle: $b/$p is not built" >&2; exit 1; }
  cp "$b/$p" "$t/"; strip "$t/$p"
done
cp -L /usr/local/cuda/lib64/libcudart.so.13 "$t/lib/"
for l in libfmt.so.9 libpcre2-8.so.0 libutf8proc.so.2 libcpp-httplib.so.0.11 libbrotlidec.so.1 \
  libbrotlienc.so.1 libbrotlicommon.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$t/lib/"
done
XZ_OPT="--lzma2=preset=9,dict=192MiB" tar -cJf "$o/prebuilt.tar.xz" -C "$t" .
here=$(cd "$(dirname "$0")/../.." && pwd)
# ../shared beside the checkout, or beside the main checkout when this is a git worktree.
common=$(cd "$here" && cd "$(git rev-parse --git-common-dir)/.." 2>/dev/null && pwd || echo "$here")
cp "$here/../shared/design/flashnext-large-config.json" "$o/" 2>/dev/null ||
  cp "$common/../shared/design/flashnext-large-config.json" "$o/" 2>/dev/null ||
  echo "bundle: ../shared/design/flashnext-large-config.json not found; copy the real-shape config into $o" >&2
ls -la "$o"
