#!/usr/bin/env bash
# Sets up, builds, and runs the main job on the embedded default model: models/flashnext-tiny, the project's
# own 21M-parameter Flash Next (trained on permissive Python sources, MTP head, MLX affine 4/8-bit; see its
# MODEL_CARD.md). It completes a Python function and prints tokens/s and draft statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
model=models/flashnext-tiny
./build/deltaserve info --model "$model"
./build/deltaserve run "$model" -p "def fibonacci(n):" --max-tokens 64 --temperature 0
