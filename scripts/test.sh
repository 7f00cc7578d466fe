#!/usr/bin/env bash
# Sets up (packages), builds (warnings as errors) and runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/setup-test-data.sh
# Tests that need generated data fail, rather than skip, when it is missing.
export DELTASERVE_REQUIRE_TEST_DATA=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTASERVE_WERROR=ON
cmake --build build -j"$(nproc)"
cd build && ctest --output-on-failure -j"$(nproc)"
