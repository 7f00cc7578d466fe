#!/usr/bin/env bash
# Sets up, builds, and runs the main job on the default model. Until the trained default model ships (issue 8)
# this is the tiny random-weight Flash Next fixture: it shows the engine loading a checkpoint and decoding.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
model=tests/fixtures/qwen4exp_base
./build/deltaserve info --model "$model"
./build/deltaserve generate --model "$model" --tokens 10,20,30,40,50 --max-tokens 16
