#!/usr/bin/env bash
# Benchmark: data-parallel scaling of lamp against PyTorch DDP (gloo), side by side in one run, on
# the reference MLP 784-1024-1024-10 (one epoch) and the small ResNet (a quarter epoch, as
# resnet.sh), global batch 128, fp32, SGD with momentum, Fashion-MNIST:
#
#   lamp     1 rank  x 1 thread   OPENBLAS_NUM_THREADS=1 build/lamp SCRIPT
#   lamp     2 ranks x 1 thread   OPENBLAS_NUM_THREADS=1 scripts/lamp-run -n 2 SCRIPT [--zero=1]
#   pytorch  1 process  x 1 thread    torch_twin.py --threads 1
#   pytorch  2 processes x 1 thread   torch_twin.py --threads 1, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
#
# The 2-rank lamp run goes twice, plain data parallel and with its optimizer state sharded (ZeRO-1).
# PyTorch's ResNet runs go in its default layout and in channels_last (--memory-format), and each
# of its ResNet figures is the better of the two.
# SCRIPT is scripts/fmnist_mlp.lua or scripts/fmnist_resnet.lua (the twin's --arch mlp or cnn).
# Prints samples/s (all ranks together) and test accuracy of each run, and each framework's
# scaling efficiency: 2-rank throughput / (2 x 1-rank throughput). PyTorch runs with the
# OpenBLAS kernel lamp reports in `lamp --version` (OPENBLAS_CORETYPE), so that a PyTorch built on
# OpenBLAS uses the same GEMM.
#
#   scripts/bench/ddp.sh [--repeat=N] [--epochs=E]
# --epochs sets both workloads' length.
# Environment: LAMP_BUILD_DIR (default build), LAMP_TORCH_REF, PYTHON (see common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
epochs_given=0
for a in "$@"; do [[ "$a" == --epochs=* ]] && epochs_given=1; done
bench_args ddp.sh "$@"
bench_torch ddp.sh

build=${LAMP_BUILD_DIR:-build}
[[ -x "$build/lamp" ]] || { echo "ddp.sh: $build/lamp not found (build first: scripts/build.sh)" >&2; exit 1; }
[[ -f "$build/plugins/comm/mpi.so" ]] || { echo "ddp.sh: $build/plugins/comm/mpi.so not found (MPI missing at build time?)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "ddp.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }

lamp_core=$(bench_core "$build/lamp")
export OPENBLAS_NUM_THREADS=1

# The workload of the runs below: its lamp script, the twin's --arch, its epochs and lamp's arguments.
workload() { # script arch default-epochs
  script=$1 arch=$2
  formats=(contiguous)
  [[ $arch == cnn ]] && formats+=(channels_last)
  ((epochs_given)) || epochs=$3
  lamp_epochs
}

lamp_1() { "$build/lamp" "$script" "${epoch_args[@]}" 2>/dev/null | lamp_result; }
lamp_2() { # [--zero=1]
  LAMP_BIN="$build/lamp" LAMP_LOG=warn scripts/lamp-run -n 2 "$script" "${epoch_args[@]}" "$@" 2>/dev/null |
    lamp_result
}
torch_1() { # memory-format
  env ${lamp_core:+OPENBLAS_CORETYPE=$lamp_core} "$python" "$ref" --arch "$arch" --epochs "$epochs" --threads 1 \
    --memory-format "$1" 2>/dev/null | torch_result
}
torch_2() { # memory-format
  local port=$((29500 + RANDOM % 2000)) out pids=()
  out=$(mktemp -d)
  for r in 0 1; do
    env ${lamp_core:+OPENBLAS_CORETYPE=$lamp_core} MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=$r \
      "$python" "$ref" --arch "$arch" --epochs "$epochs" --threads 1 --memory-format "$1" >"$out/rank$r" 2>&1 &
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

# One repeat of a workload's five runs; its records are KEY-1, KEY-2 and KEY-zero-2.
scaling() { # key title
  printf "%-46s %10s %10s\n" "run ($2)" "samples/s" "accuracy"
  report "lamp 1 rank x 1 thread (core $lamp_core)" "$(lamp_1)"; l1=$last l1_acc=$last_acc
  report "lamp 2 ranks x 1 thread (mpi)" "$(lamp_2)"; l2=$last l2_acc=$last_acc
  report "lamp 2 ranks x 1 thread (mpi, ZeRO-1)" "$(lamp_2 --zero=1)"; lz=$last lz_acc=$last_acc
  local f t1=0 t2=0
  for f in "${formats[@]}"; do
    report "pytorch 1 process x 1 thread${formats[1]:+ $f}" "$(torch_1 "$f")"
    if ((last > t1)); then t1=$last t1_acc=$last_acc; fi
    report "pytorch DDP 2 processes x 1 thread (gloo)${formats[1]:+ $f}" "$(torch_2 "$f")"
    if ((last > t2)); then t2=$last t2_acc=$last_acc; fi
  done
  bench_record row "$1-1" "$l1" "$l1_acc" "$t1" "$t1_acc"
  bench_record row "$1-2" "$l2" "$l2_acc" "$t2" "$t2_acc"
  bench_record row "$1-zero-2" "$lz" "$lz_acc" "$t2" "$t2_acc"
  efficiency "lamp scaling efficiency" "$l2" "$l1"
  efficiency "lamp scaling efficiency, ZeRO-1" "$lz" "$l1"
  efficiency "pytorch scaling efficiency" "$t2" "$t1"
  awk -v l="$l2" -v t="$t2" 'BEGIN { printf "%-46s %9.2fx\n", "lamp 2 ranks / pytorch DDP 2 processes", l / t }'
}

for ((i = 1; i <= repeat; i++)); do
  workload scripts/fmnist_mlp.lua mlp 1
  scaling ddp "784-1024-1024-10, global batch 128, fp32, $epochs epoch"
  workload scripts/fmnist_resnet.lua cnn 0.25
  scaling ddp-resnet "small ResNet, global batch 128, fp32, $epochs epoch"
done
