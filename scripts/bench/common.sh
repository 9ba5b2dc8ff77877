# Shared by the benchmark scripts (sourced, not run): argument parsing, the PyTorch reference,
# and the OpenBLAS kernel lamp runs on, which PyTorch is given too so neither is handicapped.
#
#   bench_args NAME "$@"   parses --repeat=N and --epochs=E into $repeat and $epochs
#   bench_torch NAME       sets $ref, the PyTorch twin of the recipe given by LAMP_TORCH_REF (a
#                          script outside this repository, which must be named), and $python
#                          (PYTHON), or stops naming what is missing
#   bench_core LAMP        prints the OpenBLAS core that `LAMP --version` reports
#   keep NAME SPS          records a run: best[NAME] the highest over the repeats, cur[NAME] this
#                          repeat's; a run that printed nothing stops the benchmark, naming it

bench_args() {
  local name=$1 a
  bench_name=$name
  shift
  repeat=1
  epochs=1
  for a in "$@"; do
    case "$a" in
      --repeat=*) repeat=${a#--repeat=} ;;
      --epochs=*) epochs=${a#--epochs=} ;;
      *) echo "$name: unknown argument $a (expected --repeat=N or --epochs=E)" >&2; exit 2 ;;
    esac
  done
}

bench_torch() {
  ref=${LAMP_TORCH_REF:-}
  python=${PYTHON:-/usr/bin/python3}
  [[ -n "$ref" ]] || { echo "$1: LAMP_TORCH_REF is not set (the PyTorch twin of the recipe to compare with)" >&2; exit 1; }
  [[ -f "$ref" ]] || { echo "$1: PyTorch reference script not found: $ref (set LAMP_TORCH_REF)" >&2; exit 1; }
}

bench_core() {
  "$1" --version | sed -n 's/.*(core \(.*\))$/\1/p'
}

# Paired ratios. The runs of one repeat are adjacent in time, so a ratio taken inside a repeat
# cancels most of a shared machine's drift, which best-of-N figures do not (one lucky run of the
# denominator moves them). The benchmarks print the median over repeats beside best-of.
#   pair_add KEY A B   records A / B for this repeat
#   pair_median KEY    prints the median of KEY's ratios, two decimals
declare -A pairs
pair_add() {
  pairs[$1]+="$(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.6f ", a / b }')"
}
pair_median() {
  tr ' ' '\n' <<<"${pairs[$1]}" | sed '/^$/d' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.2f", v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A best cur
keep() {
  [[ -n "$2" ]] || { echo "$bench_name: run '$1' printed no result" >&2; exit 1; }
  (( ${best[$1]:-0} < $2 )) && best[$1]=$2
  cur[$1]=$2
  return 0
}
