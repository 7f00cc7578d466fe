#!/usr/bin/env bash
# Installs the Debian packages and PyPI packages the build and the tests need (idempotent).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
PKGS="build-essential cmake ninja-build pkg-config git python3 python3-pip python3-venv \
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev \
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev"
missing=$(dpkg-query -W -f='${Package} ${Status}\n' $PKGS 2>/dev/null | awk '$4!="installed"{print $1}'; \
  for p in $PKGS; do dpkg-query -W "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$(echo $missing)" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $PKGS
fi
# The server end-to-end test (ctest server_openai_e2e) drives the server with the official OpenAI SDK.
if ! python3 -c "import openai" 2>/dev/null; then
  python3 -m pip install -q openai 2>/dev/null || python3 -m pip install -q --break-system-packages openai
fi
