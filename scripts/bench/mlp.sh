#!/usr/bin/env bash
# Benchmark: lamp against PyTorch (Debian python3-torch) on the reference MLP, 784-1024-1024-10,
# batch 128, fp32, SGD, one epoch of Fashion-MNIST, run one after the other in this one run.
# Prints samples/s of each run and the ratio of lamp to PyTorch's best thread setting, as best-of-N
# and as the median of the ratios inside each repeat (see common.sh).
#
#   scripts/bench/mlp.sh [--repeat=N] [--epochs=E]
# Environment: LAMP_TORCH_REF (the PyTorch twin of the recipe; see common.sh), PYTHON (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
bench_args mlp.sh "$@"
bench_torch mlp.sh
scripts/install-deps.sh --bench
[[ -x build/lamp ]] || scripts/build.sh

# lamp picks OpenBLAS's fastest kernel itself (core/cli/blas_tuning.c); PyTorch links the same
# OpenBLAS, so it runs both with the default kernel and with the one lamp chose: the ratio is
# taken against PyTorch's best run of all, never against a handicapped one.
lamp_core=$(bench_core build/lamp)

lamp_run() {
  build/lamp scripts/fmnist_mlp.lua --epochs="$epochs" 2>/dev/null |
    sed -n 's/.*test accuracy \([0-9.]*\) %  *\([0-9]*\) samples\/s.*/\2 \1/p' | tail -1
}
torch_run() { # threads [OPENBLAS_CORETYPE]
  env ${2:+OPENBLAS_CORETYPE=$2} "$python" "$ref" --arch mlp --epochs "$epochs" --threads "$1" 2>/dev/null |
    sed -n 's/.*samples\/s=\([0-9]*\).*test_acc=\([0-9.]*\).*/\1 \2/p' | tail -1
}
report() { # label, "samples/s accuracy%"
  local sps acc
  read -r sps acc <<<"$2"
  [[ -n "$sps" ]] || { echo "mlp.sh: run '$1' printed no result" >&2; exit 1; }
  printf "%-44s %10s %9s%%\n" "$1" "$sps" "$acc"
  last_sps=$sps
}

best_lamp=0; best_torch=0; best_torch_setting=""; cur_torch=0
printf "%-44s %10s %10s\n" "run (784-1024-1024-10, batch 128, fp32, sgd)" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  report "lamp (OpenBLAS core $lamp_core)" "$(lamp_run)"
  (( last_sps > best_lamp )) && best_lamp=$last_sps
  cur_lamp=$last_sps
  cur_torch=0
  for core in "" "$lamp_core"; do
    [[ -n "$core" && "$core" == "Prescott" ]] && continue
    for threads in 1 2; do
      r=$(torch_run "$threads" "$core")
      read -r sps acc <<<"$r"
      acc=$(awk -v a="${acc:-0}" 'BEGIN { printf "%.2f", 100 * a }')
      setting="--threads $threads${core:+, OPENBLAS_CORETYPE=$core}"
      report "pytorch $setting" "$sps $acc"
      if (( last_sps > best_torch )); then best_torch=$last_sps; best_torch_setting=$setting; fi
      (( last_sps > cur_torch )) && cur_torch=$last_sps
    done
  done
  pair_add torch "$cur_lamp" "$cur_torch"
done
awk -v l="$best_lamp" -v t="$best_torch" -v s="$best_torch_setting" -v m="$(pair_median torch)" -v r="$repeat" \
  'BEGIN { printf "ratio lamp / pytorch best (%s): %.2fx best-of, %sx median of %d paired repeat(s)  (%d vs %d samples/s)\n", s, l / t, m, r, l, t }'
