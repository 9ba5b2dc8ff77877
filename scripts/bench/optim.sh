#!/usr/bin/env bash
# Benchmark: the fused optimizer steps (adamw and sgd with momentum, through the real plugins)
# against memcpy over the same 64 MiB fp32 slab, side by side in one run. Prints effective GB/s
# (bytes read + written per pass: memcpy 8, adamw 28, sgd momentum 20 per element) and each
# step's ratio to memcpy.
#
#   scripts/bench/optim.sh [--repeat=N] [--elements=N]
# Builds build/ (scripts/build.sh) when build/bench/optim_bench is missing or older than its source.
# With LAMP_BENCH_RECORD set, appends each pass's figures there for scripts/bench/all.sh.
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
out=$("$bench" "${args[@]}")
echo "$out"
[[ -n "${LAMP_BENCH_RECORD:-}" ]] || exit 0
# "adamw step (28 B/element)   20.52 ms    22.90 GB/s   93.0 % of memcpy" -> optim, pass, ms, GB/s, %
awk '/ ms .* GB\/s/ {
  pass = $0; sub(/ *\).*/, ")", pass)
  for (i = 1; i <= NF; i++) { if ($(i + 1) == "ms") ms = $i; if ($(i + 1) == "GB/s") gbs = $i; if ($(i + 1) == "%") pct = $i }
  if (pass ~ /^memcpy/) pct = 100
  printf "optim\t%s\t%s\t%s\t%s\n", pass, ms, gbs, pct
}' <<<"$out" >>"$LAMP_BENCH_RECORD"
