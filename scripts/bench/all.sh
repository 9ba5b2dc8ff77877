#!/usr/bin/env bash
# Runs every benchmark of scripts/bench/ (mlp, precision, resnet, ddp, optim), each side by side
# with PyTorch where PyTorch has a counterpart, and rewrites the results in docs/benchmarks.md:
# one table of lamp's and PyTorch's samples/s, their ratio and the test accuracies, the optimizer
# passes' bandwidth, the machine, its arithmetic peak (build/bench/peak_bench), the OpenBLAS kernel
# and the PyTorch they ran on, and the command that regenerates them. Nothing is written unless
# every benchmark finished.
#
#   scripts/bench/all.sh [--repeat=N] [--epochs=E] [--out=FILE] [--check] [--from=RECORDS]
#
# --repeat=N  runs each configuration N times (default 3; optim.sh keeps its best of 10 passes).
#             The table gives the median samples/s over the repeats and the median of the ratios
#             taken inside each repeat (see common.sh).
# --epochs=E  trains every run E epochs (a fraction below 1, e.g. 0.1, for a quick check) instead
#             of each benchmark's own length.
# --out=FILE  the file to rewrite (default docs/benchmarks.md): the part between its two markers
#             below, or, for a file that does not exist yet, the whole of it.
# --check     checks what the benchmarks need and says which PyTorch it found, runs nothing.
# --from=RECORDS  writes FILE from the records of an earlier run (build/bench-all/records.tsv),
#             running nothing.
# Each benchmark's output and the records are kept in build/bench-all/.
# Environment: PYTHON (the interpreter with PyTorch; by default a virtual environment with PyTorch 2.x
# from PyPI, made on first use: LAMP_TORCH_VENV, see common.sh), LAMP_TORCH_REF.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/../.."
source scripts/bench/common.sh

BEGIN_MARK='<!-- results: written by scripts/bench/all.sh from here to the end marker; do not edit by hand -->'
END_MARK='<!-- end of results -->'
logs=build/bench-all

repeat=3 epochs="" out=docs/benchmarks.md from="" check=0 given=()
given_python=${PYTHON:-} # the caller's interpreter, if any (run_benchmarks exports the one found)
for a in "$@"; do
  case "$a" in
    --repeat=*) repeat=${a#--repeat=}; given+=("$a") ;;
    --epochs=*) epochs=${a#--epochs=}; given+=("$a") ;;
    --out=*) out=${a#--out=}; [[ "$out" == docs/benchmarks.md ]] || given+=("$a") ;;
    --from=*) from=${a#--from=} ;;
    --check) check=1 ;;
    *) echo "all.sh: unknown argument $a (expected --repeat=N, --epochs=E, --out=FILE, --check or --from=RECORDS)" >&2
       exit 2 ;;
  esac
done
# Paths given on the command line are the caller's; the default is the repository's.
[[ "$out" == /* || "$out" == docs/benchmarks.md ]] || out=$caller/$out
[[ -z "$from" || "$from" == /* ]] || from=$caller/$from
# The same rules as each benchmark's, checked before anything runs.
(bench_args all.sh --repeat="$repeat" ${epochs:+--epochs="$epochs"})
run_args=(--repeat="$repeat" ${epochs:+--epochs="$epochs"})

# Where the results go: an existing file must have both markers, so that nothing else in it is lost.
check_out() {
  [[ -e "$out" ]] || return 0
  if ! grep -qxF "$BEGIN_MARK" "$out" || ! grep -qxF "$END_MARK" "$out"; then
    echo "all.sh: $out has no results markers (the lines '$BEGIN_MARK' and '$END_MARK'); refusing to overwrite it" >&2
    exit 1
  fi
}

# PyTorch as the benchmarks will see it: version, where it comes from, its BLAS and oneDNN.
describe_torch() {
  "$python" -c '
import re, sys, torch
if sys.prefix != sys.base_prefix:
    origin = "a virtual environment"
elif torch.__file__.startswith("/usr/lib/python3/dist-packages/"):
    origin = "Debian'"'"'s python3-torch"
else:
    origin = sys.prefix
found = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
blas = found.group(1) if found else "unknown"
dnn = ", oneDNN" if torch.backends.mkldnn.is_available() else ""
print(f"{torch.__version__}\t{origin}\tBLAS {blas}{dnn}")' 2>/dev/null
}

prerequisites() {
  scripts/install-deps.sh --bench
  python=$(torch_python all.sh) || exit 1
  torch=$(describe_torch) || {
    echo "all.sh: $python cannot import torch; set PYTHON to an interpreter with PyTorch 2.x (docs/benchmarks.md)" >&2
    exit 1
  }
  IFS=$'\t' read -r torch_version torch_origin torch_libs <<<"$torch"
  echo "all.sh: PyTorch $torch_version from $python ($torch_origin; $torch_libs)"
  local missing=()
  [[ -x build/lamp ]] || missing+=("build/lamp (scripts/build.sh)")
  [[ -x build/bench/peak_bench ]] || missing+=("build/bench/peak_bench (scripts/build.sh)")
  [[ -f build/plugins/comm/mpi.so ]] || missing+=("build/plugins/comm/mpi.so (MPI missing at build time? scripts/install-deps.sh)")
  command -v mpirun >/dev/null || missing+=("mpirun (scripts/install-deps.sh)")
  [[ -f "${LAMP_TORCH_REF:-scripts/bench/torch_twin.py}" ]] || missing+=("the PyTorch twin ${LAMP_TORCH_REF:-scripts/bench/torch_twin.py} (LAMP_TORCH_REF)")
  if ((${#missing[@]})); then
    printf 'all.sh: missing %s\n' "${missing[@]}" >&2
    exit 1
  fi
}

# The arithmetic peak of all cores at once, from peak_bench's "all threads" column: the fastest
# fp32 kernel, and bf16 pairs where the CPU has them ("fp32 231 GFLOP/s, bf16 461 GFLOP/s").
arithmetic_peak() {
  build/bench/peak_bench --ms=200 | awk '
    $1 ~ /^fma/ && $NF != "-" && $NF + 0 > fp32 { fp32 = $NF + 0 }
    $1 == "dpbf16" && $NF != "-" { bf16 = $NF + 0 }
    END {
      if (fp32) printf "fp32 %.0f GFLOP/s", fp32
      if (bf16) printf ", bf16 %.0f GFLOP/s", bf16
    }'
}

# The machine and software, as "meta" records: written into the records so that --from
# reproduces the page without this machine.
machine_records() {
  local flags shown="" f
  flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
  for f in avx2:AVX2 avx512f:AVX-512 avx512_bf16:AVX-512-BF16 avx512_fp16:AVX-512-FP16 amx_bf16:AMX-BF16; do
    [[ "$flags" == *" ${f%%:*} "* ]] && shown+="${shown:+, }${f#*:}"
  done
  bench_record meta cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  bench_record meta cores "$(nproc)"
  bench_record meta features "${shown:-no AVX2 or AVX-512}"
  bench_record meta memory "$(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  bench_record meta os "$(. /etc/os-release && echo "$PRETTY_NAME")"
  bench_record meta lamp "$(build/lamp --version | head -1 | sed 's/ (.*//')"
  bench_record meta blas "$(build/lamp --version | sed -n 's/^blas \(OpenBLAS [^ ]*\).*(core \(.*\))$/\1 with its \2 kernels/p')"
  bench_record meta gemm "$(build/lamp devices | sed -n 's/^    gemm: //p' | head -1)"
  bench_record meta peak "$(arithmetic_peak)"
  bench_record meta torch "PyTorch $torch_version from $torch_origin ($torch_libs)"
  bench_record meta repeat "$repeat"
  local own="each benchmark's own (one epoch, a quarter for the ResNet)"
  bench_record meta epochs "${epochs:-$own}"
  local cmd="scripts/bench/all.sh${given[*]:+ ${given[*]}}"
  if [[ -n "$given_python" ]]; then
    [[ $torch_origin == "a virtual environment" ]] && cmd="PYTHON=/path/to/venv/bin/python $cmd" || cmd="PYTHON=$PYTHON $cmd"
  fi
  bench_record meta command "$cmd"
}

run_benchmarks() {
  mkdir -p "$logs"
  rm -f "$logs"/*.log "$logs"/records.tsv
  export LAMP_BENCH_RECORD=$PWD/$logs/records.tsv PYTHON=$python
  machine_records
  local b t0 started=$SECONDS
  for b in mlp precision resnet ddp optim; do
    echo "== scripts/bench/$b.sh"
    t0=$SECONDS
    if [[ $b == optim ]]; then scripts/bench/optim.sh; else scripts/bench/$b.sh "${run_args[@]}"; fi 2>&1 |
      tee "$logs/$b.log"
    echo "== $b.sh: $((SECONDS - t0)) s"
  done
  echo "all.sh: the benchmarks took $((SECONDS - started)) s; records in $logs/records.tsv"
}

# The results section from RECORDS: meta, row (per repeat: key, lamp samples/s and accuracy,
# PyTorch's, "-" where it has none) and optim (pass, ms, GB/s, % of memcpy) lines.
render() { # records
  awk -F'\t' '
    function median(list,   n, v, i, j, t) {
      n = split(list, v, " ")
      for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    # Scaling from 1 to 2 processes: the median over the repeats of the paired runs of each.
    function scaling(k, what,   a, b, z, le, te, ze, r) {
      a = k "-1"; b = k "-2"; z = k "-zero-2"
      if (!((a in n) && (b in n) && (a in torch) && (b in torch))) return
      le = te = ze = ""
      for (r = 1; r <= n[a] && r <= n[b]; r++) {
        le = le " " sps[b, r] / (2 * sps[a, r]); te = te " " tsps[b, r] / (2 * tsps[a, r])
        if (z in n && r <= n[z]) ze = ze " " sps[z, r] / (2 * sps[a, r])
      }
      printf "\nScaling of %s from 1 to 2 processes (2-process samples/s over twice the 1-process): lamp %.1f %%%s, PyTorch %.1f %%.\n",
        what, 100 * median(le), ze == "" ? "" : sprintf(" (%.1f %% with ZeRO-1)", 100 * median(ze)), 100 * median(te)
    }
    function grouped(x,   s, r) {
      s = sprintf("%.0f", x); r = ""
      while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
      return s r
    }
    $1 == "meta" { meta[$2] = $3 }
    $1 == "row" {
      n[$2]++; lamp[$2] = lamp[$2] " " $3; lacc[$2] = lacc[$2] " " $4
      if ($5 != "-") { torch[$2] = torch[$2] " " $5; tacc[$2] = tacc[$2] " " $6; ratio[$2] = ratio[$2] " " $3 / $5 }
      sps[$2, n[$2]] = $3; tsps[$2, n[$2]] = $5
    }
    $1 == "optim" { passes[++np] = $2; ms[np] = $3; gbs[np] = $4; pct[np] = $5 }
    END {
      split("mlp mlp-bf16 mlp-fp16 resnet-fp32 resnet-bf16 resnet-fp16 ddp-1 ddp-2 ddp-zero-2 ddp-resnet-1 ddp-resnet-2 ddp-resnet-zero-2", order, " ")
      label["mlp"] = "MLP fp32 (`mlp.sh`)"
      label["mlp-bf16"] = "MLP bf16 (`precision.sh`)"
      label["mlp-fp16"] = "MLP fp16 (`precision.sh`)"
      label["resnet-fp32"] = "small ResNet fp32 (`resnet.sh`)"
      label["resnet-bf16"] = "small ResNet bf16 (`resnet.sh`)"
      label["resnet-fp16"] = "small ResNet fp16 (`resnet.sh`)"
      label["ddp-1"] = "MLP fp32, 1 process × 1 thread (`ddp.sh`)"
      label["ddp-2"] = "MLP fp32, 2 processes × 1 thread (`ddp.sh`)"
      label["ddp-resnet-1"] = "small ResNet fp32, 1 process × 1 thread (`ddp.sh`)"
      label["ddp-resnet-2"] = "small ResNet fp32, 2 processes × 1 thread (`ddp.sh`)"
      label["ddp-zero-2"] = "MLP fp32, 2 processes × 1 thread, lamp with ZeRO-1 (`ddp.sh`)"
      label["ddp-resnet-zero-2"] = "small ResNet fp32, 2 processes × 1 thread, lamp with ZeRO-1 (`ddp.sh`)"
      printf "- Machine: %s, %s cores (%s), %s of memory, %s\n", meta["cpu"], meta["cores"], meta["features"],
        meta["memory"], meta["os"]
      printf "- %s, %s; GEMMs: %s\n", meta["lamp"], meta["blas"], meta["gemm"]
      if (meta["peak"] != "")
        printf "- Arithmetic peak of all cores (`build/bench/peak_bench`): %s; the products of one training sample are 9.56 MFLOP in the MLP, 49.2 MFLOP in the small ResNet\n", meta["peak"]
      printf "- %s\n", meta["torch"]
      printf "- Repeats: %s; epochs per run: %s\n\n", meta["repeat"], meta["epochs"]
      print "| benchmark | lamp samples/s | PyTorch samples/s | lamp / PyTorch | test accuracy, lamp / PyTorch |"
      print "|---|--:|--:|--:|---|"
      for (i = 1; i in order; i++) {
        k = order[i]
        if (!(k in n)) continue
        t = k in torch
        printf "| %s | %s | %s | %s | %.2f %% / %s |\n", label[k], grouped(median(lamp[k])),
          t ? grouped(median(torch[k])) : "—", t ? sprintf("%.2f×", median(ratio[k])) : "—",
          median(lacc[k]), t ? sprintf("%.2f %%", median(tacc[k])) : "—"
      }
      scaling("ddp", "the MLP"); scaling("ddp-resnet", "the small ResNet")
      if (np) {
        print "\n| optimizer pass (`optim.sh`, best of 10) | ms | GB/s | of memcpy |"
        print "|---|--:|--:|--:|"
        for (i = 1; i <= np; i++) printf "| %s | %.2f | %.1f | %.0f %% |\n", passes[i], ms[i], gbs[i], pct[i]
      }
      printf "\nRegenerate with:\n\n```sh\n%s\n```\n", meta["command"]
    }' "$1"
}

# Replaces the part of $out between the markers (or writes a new file) with the section.
write_out() { # records
  local section tmp
  section=$(render "$1")
  tmp=$(mktemp "${out}.XXXXXX")
  if [[ -e "$out" ]]; then
    # The section through the environment: awk -v would read backslashes in it as escapes.
    SECTION=$section awk -v b="$BEGIN_MARK" -v e="$END_MARK" '
      $0 == b { print; print ""; print ENVIRON["SECTION"]; print ""; skip = 1; next }
      $0 == e { skip = 0 }
      !skip' "$out" >"$tmp"
  else
    printf '# Benchmarks\n\n%s\n\n%s\n\n%s\n' "$BEGIN_MARK" "$section" "$END_MARK" >"$tmp"
  fi
  mv "$tmp" "$out"
  echo "all.sh: wrote $out"
}

check_out
if [[ -n "$from" ]]; then
  [[ -r "$from" ]] || { echo "all.sh: cannot read the records $from" >&2; exit 1; }
  grep -q "^meta	command	" "$from" || { echo "all.sh: $from holds no records of an all.sh run (no meta command line)" >&2; exit 1; }
  write_out "$from"
  exit 0
fi
[[ -x build/lamp && -x build/bench/peak_bench ]] || ((check)) || scripts/build.sh
prerequisites
((check)) && { echo "all.sh: ready to run mlp, precision, resnet, ddp and optim.sh"; exit 0; }
run_benchmarks
write_out "$logs/records.tsv"
