#!/usr/bin/env bash
# Benchmark: activation recomputation. The small ResNet (scripts/fmnist_resnet.lua, batch 128, fp32,
# SGD) on a fraction of an epoch of Fashion-MNIST (--epochs=E, 0.1 by default: 46 steps), plain and
# with --recompute (each of its two stages in nn.Recompute), the two alternating inside each repeat
# (3 by default) so that a shared machine's drift falls on both. Prints, per run, the activation
# peak while training (the memory ledger before the first evaluation, in bytes) and the time per
# optimizer step; then the ratios recompute / plain of both, as the median of the ratios inside
# each repeat, beside the targets (activation peak at least 40 % lower, a step at most 35 % longer).
#
#   scripts/bench/recompute.sh [--repeat=N] [--epochs=E]
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/bench/common.sh
repeat_given=0
fraction_given=0
for a in "$@"; do
  [[ "$a" == --repeat=* ]] && repeat_given=1
  [[ "$a" == --epochs=* ]] && fraction_given=1
done
bench_args recompute.sh "$@"
(( repeat_given )) || repeat=3
(( fraction_given )) || epochs=0.1
lamp_epochs
[[ -x build/lamp ]] || scripts/build.sh

# "peak_bytes ms_per_step" of one run (its arguments after the script's); nothing if it failed.
lamp_run() {
  build/lamp scripts/fmnist_resnet.lua "${epoch_args[@]}" --batch=128 "$@" 2>/dev/null |
    awk '/^activation peak while training/ { peak = $(NF - 1) }
         /^epoch 1  train loss/ { for (i = 1; i < NF; i++) if ($(i + 1) == "samples/s") sps = $i }
         END { if (peak != "" && sps > 0) printf "%d %.2f\n", peak, 1000 * 128 / sps }'
}

printf "%-28s %22s %14s\n" "run (small ResNet, $epochs epoch)" "activation peak (B)" "ms per step"
for ((i = 1; i <= repeat; i++)); do
  declare -A peak=() ms=()
  for variant in plain recompute; do
    flags=()
    [[ $variant == recompute ]] && flags=(--recompute)
    read -r p t <<<"$(lamp_run "${flags[@]}")"
    [[ -n "${t:-}" ]] || { echo "recompute.sh: the $variant run printed no result" >&2; exit 1; }
    peak[$variant]=$p
    ms[$variant]=$t
    printf "%-28s %22s %14s\n" "$variant (repeat $i)" "$p" "$t"
  done
  pair_add peak "${peak[recompute]}" "${peak[plain]}"
  pair_add time "${ms[recompute]}" "${ms[plain]}"
done
echo "ratio recompute / plain, activation peak: $(pair_median peak)x (target <= 0.60), median of $repeat paired repeat(s)"
echo "ratio recompute / plain, time per step:   $(pair_median time)x (target <= 1.35), median of $repeat paired repeat(s)"
