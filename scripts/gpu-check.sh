#!/usr/bin/env bash
# The one prepared script for a lent GPU machine: builds (CUDA parts where the toolkit is found),
# runs the whole test suite (GPU tests run there instead of skipping), times the precision
# benchmarks, and prints a short table last. Writes its log to $OUT/gpu-check.log when OUT is set.
#
#   scripts/gpu-check.sh            (on the device: run via the device tool with a timeout)
set -uo pipefail
cd "$(dirname "$0")/.."
log=${OUT:-/tmp}/gpu-check.log
exec > >(tee "$log") 2>&1

rows=()
row() { rows+=("$(printf '%-34s %s' "$1" "$2")"); }

echo "== device"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  row "gpu" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
else
  echo "no nvidia-smi: CPU only"
  row "gpu" "none"
fi

echo "== build"
start=$SECONDS
if scripts/install-deps.sh && scripts/build.sh; then row "build" "ok ($((SECONDS - start)) s)"; else row "build" "FAILED"; fi
grep -q "CMAKE_CUDA_COMPILER:FILEPATH=/" build/CMakeCache.txt 2>/dev/null && row "cuda toolkit" "found" || row "cuda toolkit" "not found"

echo "== tests"
start=$SECONDS
summary=$(cd build && ctest --output-on-failure -j "$(nproc)" 2>&1 | tee /dev/stderr | grep "tests passed")
row "tests" "${summary:-no summary} ($((SECONDS - start)) s)"

echo "== precision benchmarks (one epoch of the reference MLP)"
for p in fp32 fp16 bf16; do
  if [[ ! -f build/plugins/precision/$p.so ]]; then row "mlp $p" "plugin not built"; continue; fi
  line=$(build/lamp scripts/fmnist_mlp.lua --precision=$p 2>/dev/null | grep "^epoch 1 ")
  sps=$(sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p' <<<"$line")
  acc=$(sed -n 's/.*test accuracy \([0-9.]*\) %.*/\1/p' <<<"$line")
  row "mlp $p" "${sps:-?} samples/s, ${acc:-?} % test accuracy"
done

echo
echo "== summary"
printf '%s\n' "${rows[@]}"
