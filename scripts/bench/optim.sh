#!/usr/bin/env bash
# Benchmark: the fused optimizer steps (adamw and sgd with momentum, through the real plugins)
# against memcpy over the same 64 MiB fp32 slab, side by side in one run. Prints effective GB/s
# (bytes read + written per pass: memcpy 8, adamw 28, sgd momentum 20 per element) and each
# step's ratio to memcpy; the adamw target is >= 60 %.
#
#   scripts/bench/optim.sh [--repeat=N] [--elements=N]
# Builds build/ (scripts/build.sh) when build/bench/optim_bench is missing or older than its source.
set -euo pipefail
cd "$(dirname "$0")/../.."

args=()
for a in "$@"; do
  case "$a" in
    --repeat=* | --elements=*) args+=("$a") ;;
    *) echo "optim.sh: unknown argument $a (expected --repeat=N or --elements=N)" >&2; exit 2 ;;
  esac
done
scripts/install-deps.sh
bench=build/bench/optim_bench
if [[ ! -x $bench || scripts/bench/optim_bench.c -nt $bench || plugins/optim/adam.c -nt $bench ]]; then
  scripts/build.sh
fi
exec "$bench" "${args[@]}"
