#!/usr/bin/env bash
# Benchmark: the small ResNet (scripts/lib/resnet.lua, = train_ref.py --arch cnn) in lamp fp32,
# bf16 and fp16 against PyTorch fp32 with 1 and 2 threads, side by side in one run, batch 128,
# SGD, on a quarter of Fashion-MNIST (--epochs=E changes the fraction; accuracy after so little
# training is only a sanity check). Prints samples/s and the ratios
#   lamp fp32 / PyTorch's best setting (target >= 1.0), lamp bf16 / lamp fp32 (target >= 0.8),
# each as best-of-N and as the median of the ratios inside each repeat (see common.sh).
#
#   scripts/bench/resnet.sh [--repeat=N] [--epochs=E]
# Environment: LAMP_TORCH_REF, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
fraction_given=0
for a in "$@"; do [[ "$a" == --epochs=* ]] && fraction_given=1; done
bench_args resnet.sh "$@"
(( fraction_given )) || epochs=0.25
bench_torch resnet.sh
scripts/install-deps.sh --bench
[[ -x build/lamp ]] || scripts/build.sh
core=$(bench_core build/lamp)
limit=$(awk -v e="$epochs" 'BEGIN { printf "%d", 60000 * e }')

lamp_sps() { # precision
  build/lamp scripts/fmnist_resnet.lua --epochs=1 --limit="$limit" --precision="$1" 2>/dev/null |
    sed -n 's/^epoch 1 .*test accuracy \([0-9.]*\) %  *\([0-9]*\) samples\/s.*/\2 \1/p'
}
torch_sps() { # threads
  env OPENBLAS_CORETYPE="$core" "$python" "$ref" --arch cnn --threads "$1" --epochs "$epochs" 2>/dev/null |
    sed -n 's/.*samples\/s=\([0-9]*\).*test_acc=\([0-9.]*\).*/\1 \2/p'
}

printf "%-40s %10s %10s\n" "run (small ResNet, batch 128, sgd, $limit samples)" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  for p in fp32 bf16 fp16; do
    read -r sps acc <<<"$(lamp_sps $p)"
    keep "lamp $p" "$sps"
    printf "%-40s %10s %9s%%\n" "lamp $p" "$sps" "$acc"
  done
  for threads in 1 2; do
    read -r sps acc <<<"$(torch_sps $threads)"
    keep "torch" "$sps"
    keep "torch $threads" "$sps"
    printf "%-40s %10s %9s%%\n" "pytorch fp32 --threads $threads" "$sps" \
      "$(awk -v a="${acc:-0}" 'BEGIN { printf "%.2f", 100 * a }')"
  done
  t1=${cur[torch 1]} t2=${cur[torch 2]}
  torch_best=$(( t1 > t2 ? t1 : t2 ))
  pair_add torch "${cur[lamp fp32]}" "$torch_best"
  pair_add bf16 "${cur[lamp bf16]}" "${cur[lamp fp32]}"
  pair_add fp16 "${cur[lamp fp16]}" "${cur[lamp fp32]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
paired="median of $repeat paired repeat(s)"
echo "ratio lamp fp32 / pytorch best:  $(ratio "${best[lamp fp32]}" "${best[torch]}")x best-of, $(pair_median torch)x $paired (target >= 1.0)"
echo "ratio lamp bf16 / lamp fp32:     $(ratio "${best[lamp bf16]}" "${best[lamp fp32]}")x best-of, $(pair_median bf16)x $paired (target >= 0.8)"
echo "ratio lamp fp16 / lamp fp32:     $(ratio "${best[lamp fp16]}" "${best[lamp fp32]}")x best-of, $(pair_median fp16)x $paired"
