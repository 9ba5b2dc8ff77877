#!/usr/bin/env bash
# Installs the Debian packages lamp needs, if any are missing. Usage: scripts/install-deps.sh [--bench]
# (--bench adds python3-venv, for the virtual environment the benchmarks install PyTorch 2.x from
# PyPI into: scripts/bench/common.sh, and libblis4 for scripts/bench/gemm.sh). Safe to run repeatedly.
set -euo pipefail

# clang and libclang-rt-14-dev (libFuzzer and clang's sanitizer runtimes) build the fuzz harnesses
# (scripts/fuzz.sh); GCC's ASan/UBSan runtimes (scripts/sanitize.sh) come with build-essential.
# procps (ps, pkill) and util-linux (setsid) let scripts/lamp-run end a job it started.
# libjansson-dev writes and reads the metrics files; gnuplot-nox draws them (lamp plot); jq reads
# them in the tests (tests/cli/test_metrics.sh). libdnnl-dev brings oneDNN (libdnnl2, opened at run
# time for its bf16 GEMM, twice OpenBLAS's fp32 rate on CPUs with AVX512_BF16) and the headers of
# its C API, which the build needs for oneDNN's AMX convolutions (core/backend/cpu/conv_dnnl.c);
# libblis4 is only compared against the others by scripts/bench/gemm.sh.
packages=(build-essential cmake pkg-config liblua5.4-dev libcmocka-dev libopenblas-dev zlib1g-dev
          dataset-fashion-mnist libopenmpi-dev openmpi-bin clang libclang-rt-14-dev procps util-linux
          libjansson-dev gnuplot-nox jq libdnnl-dev)
if [[ "${1:-}" == "--bench" ]]; then packages+=(python3-venv libblis4); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
