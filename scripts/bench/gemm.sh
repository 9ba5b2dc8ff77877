#!/usr/bin/env bash
# Benchmark: GFLOP/s of each CPU GEMM provider lamp can use (OpenBLAS, and oneDNN and BLIS where
# their libraries are installed: core/backend/cpu/gemm_provider.h) on the eight GEMMs of one step of
# the reference MLP (784-1024-1024-10, batch 128) as lamp calls them, for 1 and 2 threads, fp32
# and bf16 operands. Repeats alternate the providers (each repeat runs every configuration once,
# starting one later each time), so a machine's load hits them alike; figures are medians.
#
#   scripts/bench/gemm.sh [--repeat=N] [--min-ms=T] [--threads=1,2] [--providers=openblas,dnnl,blis]
#                         [--clock=wall|cpu]
# --clock=cpu times the 1-thread runs by their thread's CPU time, which preemption on a loaded
# machine does not inflate. Builds build/ (scripts/build.sh) when build/bench/gemm_bench is missing
# or older than its sources. OpenBLAS gets the kernel lamp would run. Prints the load average
# before and after.
set -euo pipefail
cd "$(dirname "$0")/../.."

args=()
for a in "$@"; do
  case "$a" in
    --repeat=* | --min-ms=* | --threads=* | --providers=* | --clock=*) args+=("$a") ;;
    *) echo "gemm.sh: unknown argument $a (expected --repeat=N, --min-ms=T, --threads=L, --providers=L or --clock=C)" >&2
       exit 2 ;;
  esac
done
bench=build/bench/gemm_bench
if [[ ! -x $bench || scripts/bench/gemm_bench.c -nt $bench || core/backend/cpu/gemm_run.c -nt $bench ||
      core/backend/cpu/gemm_provider.c -nt $bench ]]; then
  scripts/build.sh
fi
# OpenBLAS runs the kernel lamp runs (core/cli/blas_tuning.c re-executes lamp with a better one
# where OpenBLAS falls back to its generic Prescott kernels); a user's OPENBLAS_CORETYPE wins.
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  source scripts/bench/common.sh
  [[ -x build/lamp ]] || scripts/build.sh
  core=$(bench_core build/lamp)
  [[ -n $core && $core != Prescott ]] && export OPENBLAS_CORETYPE=$core
fi
echo "gemm.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; OpenBLAS core ${OPENBLAS_CORETYPE:-its own}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" "${args[@]}"
echo "gemm.sh: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
