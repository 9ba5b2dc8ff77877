#!/usr/bin/env bash
# Benchmark: lamp's three precision policies against PyTorch fp32 and PyTorch bf16 autocast on
# the CPU, on the reference MLP (784-1024-1024-10, batch 128, SGD, one epoch), side by side in one
# run. PyTorch runs with one thread and with as many as lamp's OpenBLAS uses; each of its figures
# is the better of the two. Prints samples/s for each and the ratios lamp fp16/fp32, lamp
# bf16/fp32, torch bf16/fp32, lamp fp32/torch fp32 and lamp bf16/torch bf16, each as best-of-N and
# as the median of the ratios inside each repeat (see common.sh).
#
#   scripts/bench/precision.sh [--repeat=N] [--epochs=E]
# Environment: LAMP_TORCH_REF, PYTHON (see common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
bench_args precision.sh "$@"
lamp_epochs
bench_torch precision.sh
[[ -x build/lamp ]] || scripts/build.sh
# PyTorch built on OpenBLAS links the same library: give it the kernel lamp picked.
core=$(bench_core build/lamp)
thread_counts=(1)
(( threads > 1 )) && thread_counts+=("$threads")

lamp_run() { # precision
  build/lamp scripts/fmnist_mlp.lua "${epoch_args[@]}" --precision="$1" 2>/dev/null | lamp_result
}
torch_run() { # precision threads
  env OPENBLAS_CORETYPE="$core" "$python" "$ref" --arch mlp --threads "$2" --precision "$1" --epochs "$epochs" \
    2>/dev/null | torch_result
}

printf "%-36s %10s %10s\n" "run (MLP, batch 128, sgd)" "samples/s" "accuracy"
for ((i = 1; i <= repeat; i++)); do
  declare -A acc_of=()
  for p in fp32 fp16 bf16; do
    read -r sps acc <<<"$(lamp_run $p)"
    keep "lamp $p" "$sps"
    acc_of["lamp $p"]=$acc
    printf "%-36s %10s %9s%%\n" "lamp $p" "$sps" "$acc"
  done
  for p in fp32 bf16; do
    top=0
    for t in "${thread_counts[@]}"; do
      read -r sps acc <<<"$(torch_run $p "$t")"
      keep "torch $p --threads $t" "$sps"
      printf "%-36s %10s %9s%%\n" "pytorch $p --threads $t" "$sps" "$acc"
      (( sps > top )) && { top=$sps; acc_of["torch $p"]=$acc; }
    done
    keep "torch $p" "$top"
  done
  pair_add fp16 "${cur[lamp fp16]}" "${cur[lamp fp32]}"
  pair_add bf16 "${cur[lamp bf16]}" "${cur[lamp fp32]}"
  pair_add torch "${cur[torch bf16]}" "${cur[torch fp32]}"
  pair_add vs32 "${cur[lamp fp32]}" "${cur[torch fp32]}"
  pair_add vs16 "${cur[lamp bf16]}" "${cur[torch bf16]}"
  bench_record row mlp-bf16 "${cur[lamp bf16]}" "${acc_of[lamp bf16]}" "${cur[torch bf16]}" "${acc_of[torch bf16]}"
  bench_record row mlp-fp16 "${cur[lamp fp16]}" "${acc_of[lamp fp16]}" - -
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
paired="median of $repeat paired repeat(s)"
echo "ratio lamp fp16 / lamp fp32:   $(ratio "${best[lamp fp16]}" "${best[lamp fp32]}")x best-of, $(pair_median fp16)x $paired"
echo "ratio lamp bf16 / lamp fp32:   $(ratio "${best[lamp bf16]}" "${best[lamp fp32]}")x best-of, $(pair_median bf16)x $paired"
echo "ratio torch bf16 / torch fp32: $(ratio "${best[torch bf16]}" "${best[torch fp32]}")x best-of, $(pair_median torch)x $paired"
echo "ratio lamp fp32 / torch fp32:  $(ratio "${best[lamp fp32]}" "${best[torch fp32]}")x best-of, $(pair_median vs32)x $paired"
echo "ratio lamp bf16 / torch bf16:  $(ratio "${best[lamp bf16]}" "${best[torch bf16]}")x best-of, $(pair_median vs16)x $paired"
