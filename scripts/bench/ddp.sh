#!/usr/bin/env bash
# Benchmark: data-parallel scaling of lamp against PyTorch DDP (gloo), side by side in one run.
# The reference MLP 784-1024-1024-10, global batch 128, fp32, SGD, one epoch of Fashion-MNIST:
#
#   lamp     1 rank  x 1 thread   OPENBLAS_NUM_THREADS=1 build/lamp scripts/fmnist_mlp.lua
#   lamp     2 ranks x 1 thread   OPENBLAS_NUM_THREADS=1 scripts/lamp-run -n 2 scripts/fmnist_mlp.lua
#   pytorch  1 process  x 1 thread    torch_twin.py --threads 1
#   pytorch  2 processes x 1 thread   torch_twin.py --threads 1, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
#
# Prints samples/s (all ranks together) and test accuracy of each run, and each framework's
# scaling efficiency: 2-rank throughput / (2 x 1-rank throughput). PyTorch runs with the
# OpenBLAS kernel lamp reports in `lamp --version` (OPENBLAS_CORETYPE), so that a PyTorch built on
# OpenBLAS uses the same GEMM.
#
#   scripts/bench/ddp.sh [--repeat=N] [--epochs=E]
# Environment: LAMP_BUILD_DIR (default build), LAMP_TORCH_REF, PYTHON (see common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
bench_args ddp.sh "$@"
lamp_epochs
bench_torch ddp.sh

build=${LAMP_BUILD_DIR:-build}
[[ -x "$build/lamp" ]] || { echo "ddp.sh: $build/lamp not found (build first: scripts/build.sh)" >&2; exit 1; }
[[ -f "$build/plugins/comm/mpi.so" ]] || { echo "ddp.sh: $build/plugins/comm/mpi.so not found (MPI missing at build time?)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "ddp.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }

lamp_core=$(bench_core "$build/lamp")
export OPENBLAS_NUM_THREADS=1

lamp_1() { "$build/lamp" scripts/fmnist_mlp.lua "${epoch_args[@]}" 2>/dev/null | lamp_result; }
lamp_2() {
  LAMP_BIN="$build/lamp" LAMP_LOG=warn scripts/lamp-run -n 2 scripts/fmnist_mlp.lua "${epoch_args[@]}" 2>/dev/null |
    lamp_result
}
torch_1() {
  env ${lamp_core:+OPENBLAS_CORETYPE=$lamp_core} "$python" "$ref" --arch mlp --epochs "$epochs" --threads 1 \
    2>/dev/null | torch_result
}
torch_2() {
  local port=$((29500 + RANDOM % 2000)) out pids=()
  out=$(mktemp -d)
  for r in 0 1; do
    env ${lamp_core:+OPENBLAS_CORETYPE=$lamp_core} MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=$r \
      "$python" "$ref" --arch mlp --epochs "$epochs" --threads 1 >"$out/rank$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  torch_result <"$out/rank0"
  rm -rf "$out"
}

report() { # label, "samples/s accuracy%" -> sets last and last_acc
  local sps acc
  read -r sps acc <<<"$2"
  [[ -n "$sps" ]] || { echo "ddp.sh: run '$1' printed no result" >&2; exit 1; }
  printf "%-46s %10s %9s%%\n" "$1" "$sps" "$acc"
  last=$sps last_acc=$acc
}
efficiency() { awk -v two="$2" -v one="$3" -v l="$1" 'BEGIN { printf "%-46s %9.1f%%  (%d / (2 x %d))\n", l, 100 * two / (2 * one), two, one }'; }

printf "%-46s %10s %10s\n" "run (784-1024-1024-10, global batch 128, fp32)" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  report "lamp 1 rank x 1 thread (core $lamp_core)" "$(lamp_1)"; l1=$last l1_acc=$last_acc
  report "lamp 2 ranks x 1 thread (mpi)" "$(lamp_2)"; l2=$last l2_acc=$last_acc
  report "pytorch 1 process x 1 thread" "$(torch_1)"; t1=$last t1_acc=$last_acc
  report "pytorch DDP 2 processes x 1 thread (gloo)" "$(torch_2)"; t2=$last t2_acc=$last_acc
  bench_record row ddp-1 "$l1" "$l1_acc" "$t1" "$t1_acc"
  bench_record row ddp-2 "$l2" "$l2_acc" "$t2" "$t2_acc"
  efficiency "lamp scaling efficiency" "$l2" "$l1"
  efficiency "pytorch scaling efficiency" "$t2" "$t1"
  awk -v l="$l2" -v t="$t2" 'BEGIN { printf "%-46s %9.2fx\n", "lamp 2 ranks / pytorch DDP 2 processes", l / t }'
done
