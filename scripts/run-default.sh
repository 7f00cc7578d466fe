#!/usr/bin/env bash
# Sets up, builds, and runs the main job on the default model. Until the trained default model ships (issue 8)
# this is the tiny random-weight Flash Next fixture with the project's 320-token test tokenizer: it shows the
# engine loading a checkpoint, templating, sampling and streaming, not meaningful text.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
model=build/default-model
mkdir -p "$model"
for f in tests/fixtures/qwen4exp_base/*.json tests/fixtures/qwen4exp_base/*.safetensors \
         tests/data/server_model/tokenizer.json tests/data/server_model/tokenizer_config.json; do
  ln -sf "$(pwd)/$f" "$model/"
done
./build/deltaserve info --model "$model"
./build/deltaserve run "$model" -p "def fibonacci(n):" --max-tokens 64 --temperature 0.7 --seed 1
