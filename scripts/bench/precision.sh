#!/usr/bin/env bash
# Benchmark: lamp's three precision policies against PyTorch fp32 and PyTorch bf16 autocast on
# the CPU, on the reference MLP (784-1024-1024-10, batch 128, SGD), side by side in one run.
# Prints samples/s for each and the ratios lamp fp16/fp32, lamp bf16/fp32, torch bf16/fp32, each as
# best-of-N and as the median of the ratios inside each repeat (see common.sh).
#
#   scripts/bench/precision.sh [--repeat=N]
# PyTorch's bf16 autocast runs at a few hundred samples/s here, so it trains a tenth of an
# epoch (--epochs 0.1); samples/s stays comparable. Environment: LAMP_TORCH_REF, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
bench_args precision.sh "$@"
bench_torch precision.sh
scripts/install-deps.sh --bench
[[ -x build/lamp ]] || scripts/build.sh
# PyTorch links the same OpenBLAS: give it the kernel lamp picked, so neither is handicapped.
core=$(bench_core build/lamp)

lamp_sps() {
  build/lamp scripts/fmnist_mlp.lua --precision="$1" 2>/dev/null |
    sed -n 's/^epoch 1 .*test accuracy \([0-9.]*\) %  *\([0-9]*\) samples\/s.*/\2 \1/p'
}
torch_sps() { # precision epochs
  env OPENBLAS_CORETYPE="$core" "$python" "$ref" --arch mlp --threads 1 --precision "$1" --epochs "$2" 2>/dev/null |
    sed -n 's/.*samples\/s=\([0-9]*\).*test_acc=\([0-9.]*\).*/\1 \2/p'
}

printf "%-36s %10s %10s\n" "run (MLP, batch 128, sgd)" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  for p in fp32 fp16 bf16; do
    read -r sps acc <<<"$(lamp_sps $p)"
    keep "lamp $p" "$sps"
    printf "%-36s %10s %9s%%\n" "lamp $p (1 epoch)" "$sps" "$acc"
  done
  for p in fp32:1 bf16:0.1; do
    read -r sps acc <<<"$(torch_sps "${p%%:*}" "${p##*:}")"
    keep "torch ${p%%:*}" "$sps"
    printf "%-36s %10s %9s%%\n" "pytorch ${p%%:*} (${p##*:} epoch, core $core)" "$sps" \
      "$(awk -v a="${acc:-0}" 'BEGIN { printf "%.2f", 100 * a }')"
  done
  pair_add fp16 "${cur[lamp fp16]}" "${cur[lamp fp32]}"
  pair_add bf16 "${cur[lamp bf16]}" "${cur[lamp fp32]}"
  pair_add torch "${cur[torch bf16]}" "${cur[torch fp32]}"
  pair_add vs "${cur[lamp bf16]}" "${cur[torch bf16]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
paired="median of $repeat paired repeat(s)"
echo "ratio lamp fp16 / lamp fp32:   $(ratio "${best[lamp fp16]}" "${best[lamp fp32]}")x best-of, $(pair_median fp16)x $paired (target >= 0.8)"
echo "ratio lamp bf16 / lamp fp32:   $(ratio "${best[lamp bf16]}" "${best[lamp fp32]}")x best-of, $(pair_median bf16)x $paired (target >= 0.8)"
echo "ratio torch bf16 / torch fp32: $(ratio "${best[torch bf16]}" "${best[torch fp32]}")x best-of, $(pair_median torch)x $paired"
echo "ratio lamp bf16 / torch bf16:  $(ratio "${best[lamp bf16]}" "${best[torch bf16]}")x best-of, $(pair_median vs)x $paired"
