#!/usr/bin/env bash
# Benchmark: lamp against PyTorch on the reference MLP, 784-1024-1024-10, batch 128, fp32, SGD, one
# epoch of Fashion-MNIST, run one after the other in this one run. PyTorch runs with one thread and
# with as many as lamp's OpenBLAS uses, and, when it links OpenBLAS too, both with OpenBLAS's
# default kernel and with the one lamp chose (core/cli/blas_tuning.c): the ratio is taken against
# PyTorch's best run of all, never against a handicapped one. Prints samples/s of each run and the
# ratio of lamp to PyTorch's best, as best-of-N and as the median of the ratios inside each repeat
# (see common.sh).
#
#   scripts/bench/mlp.sh [--repeat=N] [--epochs=E]
# Environment: LAMP_TORCH_REF, PYTHON (see common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
bench_args mlp.sh "$@"
lamp_epochs
bench_torch mlp.sh
[[ -x build/lamp ]] || scripts/build.sh

lamp_core=$(bench_core build/lamp)
cores=("")
[[ $torch_blas == open && -n $lamp_core && $lamp_core != Prescott ]] && cores+=("$lamp_core")
thread_counts=(1)
(( threads > 1 )) && thread_counts+=("$threads")

lamp_run() { build/lamp scripts/fmnist_mlp.lua "${epoch_args[@]}" 2>/dev/null | lamp_result; }
torch_run() { # threads [OPENBLAS_CORETYPE]
  env ${2:+OPENBLAS_CORETYPE=$2} "$python" "$ref" --arch mlp --epochs "$epochs" --threads "$1" 2>/dev/null |
    torch_result
}

best_setting=""
printf "%-44s %10s %10s\n" "run (784-1024-1024-10, batch 128, fp32, sgd)" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  read -r sps lamp_acc <<<"$(lamp_run)"
  keep lamp "$sps"
  printf "%-44s %10s %9s%%\n" "lamp (OpenBLAS core $lamp_core)" "$sps" "$lamp_acc"
  torch_sps=0 torch_acc=""
  for core in "${cores[@]}"; do
    for t in "${thread_counts[@]}"; do
      setting="--threads $t${core:+, OPENBLAS_CORETYPE=$core}"
      read -r sps acc <<<"$(torch_run "$t" "$core")"
      keep "pytorch $setting" "$sps"
      printf "%-44s %10s %9s%%\n" "pytorch $setting" "$sps" "$acc"
      (( sps > torch_sps )) && { torch_sps=$sps; torch_acc=$acc; }
      (( sps >= ${best[pytorch]:-0} )) && best_setting=$setting
      keep pytorch "$sps"
    done
  done
  pair_add torch "${cur[lamp]}" "$torch_sps"
  bench_record row mlp "${cur[lamp]}" "$lamp_acc" "$torch_sps" "$torch_acc"
done
awk -v l="${best[lamp]}" -v t="${best[pytorch]}" -v s="$best_setting" -v m="$(pair_median torch)" -v r="$repeat" \
  'BEGIN { printf "ratio lamp / pytorch best (%s): %.2fx best-of, %sx median of %d paired repeat(s)  (%d vs %d samples/s)\n", s, l / t, m, r, l, t }'
