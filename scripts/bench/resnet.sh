#!/usr/bin/env bash
# Benchmark: the small ResNet (scripts/lib/resnet.lua; torch_twin.py --arch cnn) in lamp fp32, bf16
# and fp16 against PyTorch fp32 and bf16 autocast, side by side in one run, batch 128, SGD, on a
# quarter of Fashion-MNIST (--epochs=E changes the fraction; accuracy after so little training is
# only a sanity check). PyTorch runs with one thread and with as many as lamp's OpenBLAS uses, each
# in its default layout and in channels_last (NHWC, which its CPU convolutions run fastest on); each
# of its figures is the best of the four. Prints samples/s and the ratios lamp fp32 / PyTorch
# fp32, lamp bf16 / PyTorch bf16, lamp bf16 / lamp fp32 and lamp fp16 / lamp fp32, each as
# best-of-N and as the median of the ratios inside each repeat (see common.sh).
#
#   scripts/bench/resnet.sh [--repeat=N] [--epochs=E]
# Environment: LAMP_TORCH_REF, PYTHON (see common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
fraction_given=0
for a in "$@"; do [[ "$a" == --epochs=* ]] && fraction_given=1; done
bench_args resnet.sh "$@"
(( fraction_given )) || epochs=0.25
lamp_epochs
bench_torch resnet.sh
[[ -x build/lamp ]] || scripts/build.sh
core=$(bench_core build/lamp)
thread_counts=(1)
(( threads > 1 )) && thread_counts+=("$threads")

lamp_run() { # precision
  build/lamp scripts/fmnist_resnet.lua "${epoch_args[@]}" --precision="$1" 2>/dev/null | lamp_result
}
torch_run() { # precision threads memory-format
  env OPENBLAS_CORETYPE="$core" "$python" "$ref" --arch cnn --threads "$2" --precision "$1" --memory-format "$3" \
    --epochs "$epochs" 2>/dev/null | torch_result
}

printf "%-40s %10s %10s\n" "run (small ResNet, batch 128, sgd, $epochs epoch)" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  declare -A acc_of=()
  for p in fp32 bf16 fp16; do
    read -r sps acc <<<"$(lamp_run $p)"
    keep "lamp $p" "$sps"
    acc_of["lamp $p"]=$acc
    printf "%-40s %10s %9s%%\n" "lamp $p" "$sps" "$acc"
  done
  for p in fp32 bf16; do
    top=0
    for t in "${thread_counts[@]}"; do
      for f in contiguous channels_last; do
        read -r sps acc <<<"$(torch_run $p "$t" $f)"
        keep "torch $p --threads $t $f" "$sps"
        printf "%-40s %10s %9s%%\n" "pytorch $p --threads $t $f" "$sps" "$acc"
        (( sps > top )) && { top=$sps; acc_of["torch $p"]=$acc; }
      done
    done
    keep "torch $p" "$top"
  done
  pair_add vs32 "${cur[lamp fp32]}" "${cur[torch fp32]}"
  pair_add vs16 "${cur[lamp bf16]}" "${cur[torch bf16]}"
  pair_add bf16 "${cur[lamp bf16]}" "${cur[lamp fp32]}"
  pair_add fp16 "${cur[lamp fp16]}" "${cur[lamp fp32]}"
  for p in fp32 bf16; do
    bench_record row "resnet-$p" "${cur[lamp $p]}" "${acc_of[lamp $p]}" "${cur[torch $p]}" "${acc_of[torch $p]}"
  done
  bench_record row resnet-fp16 "${cur[lamp fp16]}" "${acc_of[lamp fp16]}" - -
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
paired="median of $repeat paired repeat(s)"
echo "ratio lamp fp32 / pytorch fp32:  $(ratio "${best[lamp fp32]}" "${best[torch fp32]}")x best-of, $(pair_median vs32)x $paired"
echo "ratio lamp bf16 / pytorch bf16:  $(ratio "${best[lamp bf16]}" "${best[torch bf16]}")x best-of, $(pair_median vs16)x $paired"
echo "ratio lamp bf16 / lamp fp32:     $(ratio "${best[lamp bf16]}" "${best[lamp fp32]}")x best-of, $(pair_median bf16)x $paired"
echo "ratio lamp fp16 / lamp fp32:     $(ratio "${best[lamp fp16]}" "${best[lamp fp32]}")x best-of, $(pair_median fp16)x $paired"
