# shellcheck shell=bash
# Shared by the benchmark scripts (sourced, not run): argument parsing, the PyTorch side, the
# OpenBLAS kernel lamp runs on (which PyTorch is given too when it links OpenBLAS), and the
# records scripts/bench/all.sh collects.
#
#   bench_args NAME "$@"   parses --repeat=N and --epochs=E into $repeat and $epochs
#   lamp_epochs            sets $epoch_args, lamp's arguments for $epochs: --epochs=E for whole
#                          epochs, and --epochs=1 --limit=N (the first N training samples) for a
#                          fraction below one, which trains as many steps as the twin's --epochs E
#   bench_torch NAME       sets $ref, the PyTorch twin of the recipe (LAMP_TORCH_REF, by default
#                          scripts/bench/torch_twin.py), $python (PYTHON, by default a virtual
#                          environment with PyTorch 2.x from PyPI that torch_python makes once),
#                          $torch_version, $torch_blas (torch's BLAS_INFO: "open" for OpenBLAS) and
#                          $threads (the cores lamp's OpenBLAS uses, which PyTorch is given too), and
#                          prints which PyTorch it found; or stops naming what is missing
#   lamp_result, torch_result  filter a run's output down to "samples/s accuracy%"
#   bench_core LAMP        prints the OpenBLAS core that `LAMP --version` reports
#   keep NAME SPS          records a run: best[NAME] the highest over the repeats, cur[NAME] this
#                          repeat's; a run that printed nothing stops the benchmark, naming it
#   bench_record FIELD...  appends one tab-separated line to LAMP_BENCH_RECORD, when set (all.sh)

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
  [[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "$name: --repeat must be a whole number >= 1, got $repeat" >&2; exit 2; }
  awk -v e="$epochs" 'BEGIN { exit !(e ~ /^([0-9]+|[0-9]*\.[0-9]+)$/ && e > 0 && (e < 1 || e == int(e))) }' ||
    { echo "$name: --epochs must be a whole number >= 1 or a fraction in (0, 1), got $epochs" >&2; exit 2; }
}

lamp_epochs() {
  if awk -v e="$epochs" 'BEGIN { exit !(e < 1) }'; then
    epoch_args=(--epochs=1 --limit="$(awk -v e="$epochs" 'BEGIN { printf "%d", 60000 * e }')")
  else
    epoch_args=(--epochs="$epochs")
  fi
}

# The interpreter the benchmarks run PyTorch with: PYTHON when set; else a virtual environment
# (LAMP_TORCH_VENV, by default build/torch-venv) holding PyTorch 2.x from PyPI, made on first use.
# The default wheel bundles CUDA libraries (about 5 GB): the benchmarks need it, the tests never do.
torch_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"; return; fi
  local venv=${LAMP_TORCH_VENV:-build/torch-venv}
  if ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
    echo "$1: installing PyTorch 2.x from PyPI into $venv (once; about 5 GB)" >&2
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q 'torch>=2' numpy >&2 ||
      { echo "$1: could not install PyTorch into $venv (pip needs PyPI; or set PYTHON to an interpreter with torch)" >&2; return 1; }
  fi
  echo "$venv/bin/python"
}

bench_torch() {
  ref=${LAMP_TORCH_REF:-scripts/bench/torch_twin.py}
  [[ -f "$ref" ]] || { echo "$1: the PyTorch twin of the recipe is not found: $ref (LAMP_TORCH_REF)" >&2; exit 1; }
  scripts/install-deps.sh --bench
  python=$(torch_python "$1") || exit 1
  local found
  found=$("$python" -c 'import re, torch
blas = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
print(torch.__version__, blas.group(1) if blas else "unknown")' 2>/dev/null) ||
    { echo "$1: $python cannot import torch (PYTHON names the interpreter; see docs/benchmarks.md)" >&2; exit 1; }
  read -r torch_version torch_blas <<<"$found"
  threads=$(nproc)
  echo "$1: PyTorch $torch_version (BLAS $torch_blas) from $python, twin $ref"
}

# A run's "samples/s accuracy%" from lamp's epoch lines (the last epoch's) and from the twin's line.
lamp_result() { sed -n 's/.*test accuracy \([0-9.]*\) %  *\([0-9]*\) samples\/s.*/\2 \1/p' | tail -1; }
torch_result() {
  sed -n 's/.*samples\/s=\([0-9]*\).*test_acc=\([0-9.]*\).*/\1 \2/p' | tail -1 |
    awk '{ printf "%s %.2f\n", $1, 100 * $2 }'
}

bench_core() {
  "$1" --version | sed -n 's/.*(core \(.*\))$/\1/p'
}

bench_record() {
  [[ -n "${LAMP_BENCH_RECORD:-}" ]] || return 0
  local IFS=$'\t'
  echo "$*" >>"$LAMP_BENCH_RECORD"
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
