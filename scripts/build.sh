#!/usr/bin/env bash
# Configures and builds lamp into build/ (warnings are errors). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLAMP_WERROR=ON "$@" >/dev/null
cmake --build build -j "$(nproc)"
