#!/usr/bin/env bash
# Benchmark: lamp against PyTorch (Debian python3-torch) on the reference MLP, 784-1024-1024-10,
# batch 128, fp32, SGD, one epoch of Fashion-MNIST, run one after the other in this one run.
# Prints samples/s of each run and the ratio of lamp's best to PyTorch's best thread setting.
#
#   scripts/bench/mlp.sh [--repeat=N] [--epochs=E]
# Environment: LAMP_TORCH_REF (default ../shared/reference/torch/train_ref.py), PYTHON (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."

repeat=1
epochs=1
for a in "$@"; do
  case "$a" in
    --repeat=*) repeat=${a#--repeat=} ;;
    --epochs=*) epochs=${a#--epochs=} ;;
    *) echo "mlp.sh: unknown argument $a (expected --repeat=N or --epochs=E)" >&2; exit 2 ;;
  esac
done

ref=${LAMP_TORCH_REF:-../shared/reference/torch/train_ref.py}
python=${PYTHON:-/usr/bin/python3}
[[ -f "$ref" ]] || { echo "mlp.sh: PyTorch reference script not found: $ref (set LAMP_TORCH_REF)" >&2; exit 1; }
scripts/install-deps.sh --bench
[[ -x build/lamp ]] || scripts/build.sh

lamp_run() {
  build/lamp scripts/fmnist_mlp.lua --epochs="$epochs" 2>/dev/null |
    sed -n 's/.*test accuracy \([0-9.]*\) %  *\([0-9]*\) samples\/s.*/\2 \1/p' | tail -1
}
torch_run() {
  "$python" "$ref" --arch mlp --epochs "$epochs" --threads "$1" 2>/dev/null |
    sed -n 's/.*samples\/s=\([0-9]*\).*test_acc=\([0-9.]*\).*/\1 \2/p' | tail -1
}

best_lamp=0; best_torch=0; best_torch_setting=""
printf "%-28s %12s %10s\n" "run" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  read -r sps acc < <(lamp_run)
  printf "%-28s %12s %9s%%\n" "lamp (fp32, sgd)" "$sps" "$acc"
  (( sps > best_lamp )) && best_lamp=$sps
  for threads in 1 2; do
    read -r sps acc < <(torch_run "$threads")
    acc=$(awk -v a="$acc" 'BEGIN { printf "%.2f", 100 * a }')
    printf "%-28s %12s %9s%%\n" "pytorch --threads $threads" "$sps" "$acc"
    if (( sps > best_torch )); then best_torch=$sps; best_torch_setting="--threads $threads"; fi
  done
done
awk -v l="$best_lamp" -v t="$best_torch" -v s="$best_torch_setting" \
  'BEGIN { printf "ratio lamp / pytorch best (%s): %.2fx  (%d vs %d samples/s)\n", s, l / t, l, t }'
