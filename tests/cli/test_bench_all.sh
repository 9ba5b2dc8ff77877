#!/usr/bin/env bash
# scripts/bench/all.sh without running a benchmark (no PyTorch needed): the results section it
# writes from canned records (medians over the repeats, the median of each repeat's ratio, rows
# without a PyTorch side, the scaling line, the optimizer passes, the command), in a new file and
# between the markers of an existing one, leaving the rest of it alone, the same bytes when
# rewritten; and its refusals: a file without markers, records of something else, a wrong command
# line, an interpreter without torch; the twin's own command-line check; peak_bench's rows and
# its refusal of a bad argument.
# Usage: test_bench_all.sh LAMP_BINARY SOURCE_DIR
set -u
src=$2
all="$src/scripts/bench/all.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

check() { # name, status
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
equals() { # name, got, expected
  [[ "$2" == "$3" ]]
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected: %s\n  got:      %s\n' "$3" "$2"
  check "$1" $r
}
contains() { # name, haystack, needle
  [[ "$2" == *"$3"* ]]
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected to contain: %s\n  got: %s\n' "$3" "$2"
  check "$1" $r
}

begin='<!-- results: written by scripts/bench/all.sh from here to the end marker; do not edit by hand -->'
end='<!-- end of results -->'

# Three repeats. mlp: lamp 9000 11000 12000 -> 11,000; PyTorch 10000 8000 12000 -> 10,000; the
# ratios inside the repeats 0.90 1.50 0.92 -> 0.92x (not 11000 / 10000). ddp: lamp scales
# 0.625 0.60 0.60 -> 60.0 %, PyTorch 0.40 0.50 0.40 -> 40.0 %; its 1-process ratios 1.00 1.11 1.00 -> 1.00x.
t=$'\t'
cat >"$tmp/records.tsv" <<EOF
meta${t}cpu${t}Test CPU 9000
meta${t}cores${t}4
meta${t}features${t}AVX2, AVX-512
meta${t}memory${t}16 GiB
meta${t}os${t}Debian GNU/Linux 12 (bookworm)
meta${t}lamp${t}lamp 0.1.0
meta${t}blas${t}OpenBLAS 0.3.21 with its SkylakeX kernels
meta${t}gemm${t}dnnl; bf16: dnnl
meta${t}torch${t}PyTorch 2.5.1 from a virtual environment (BLAS mkl, oneDNN)
meta${t}repeat${t}3
meta${t}epochs${t}0.1
meta${t}command${t}PYTHON=/path/to/venv/bin/python scripts/bench/all.sh --repeat=3 --epochs=0.1
row${t}mlp${t}9000${t}86.59${t}10000${t}86.32
row${t}mlp-fp16${t}8000${t}86.60${t}-${t}-
row${t}ddp-1${t}8000${t}86.62${t}8000${t}86.37
row${t}ddp-2${t}10000${t}86.72${t}6400${t}86.37
row${t}ddp-zero-2${t}10400${t}86.70${t}6400${t}86.37
row${t}ddp-resnet-1${t}1000${t}80.10${t}800${t}80.00
row${t}ddp-resnet-2${t}1900${t}80.20${t}1200${t}80.00
row${t}mlp${t}12000${t}86.59${t}8000${t}86.40
row${t}mlp-fp16${t}8200${t}86.60${t}-${t}-
row${t}ddp-1${t}8400${t}86.62${t}7600${t}86.37
row${t}ddp-2${t}10080${t}86.72${t}7600${t}86.37
row${t}ddp-zero-2${t}10500${t}86.70${t}7600${t}86.37
row${t}ddp-resnet-1${t}1100${t}80.10${t}800${t}80.00
row${t}ddp-resnet-2${t}2068${t}80.20${t}1280${t}80.00
row${t}mlp${t}11000${t}86.59${t}12000${t}86.37
row${t}mlp-fp16${t}8100${t}86.60${t}-${t}-
row${t}ddp-1${t}8200${t}86.62${t}8200${t}86.37
row${t}ddp-2${t}9840${t}86.72${t}6560${t}86.37
row${t}ddp-zero-2${t}10000${t}86.70${t}6560${t}86.37
row${t}ddp-resnet-1${t}1000${t}80.10${t}900${t}80.00
row${t}ddp-resnet-2${t}1940${t}80.20${t}1170${t}80.00
optim${t}memcpy (8 B/element)${t}5.45${t}24.63${t}100
optim${t}adamw step (28 B/element)${t}20.52${t}22.89${t}93.0
EOF

section=$(cat <<'EOF'
- Machine: Test CPU 9000, 4 cores (AVX2, AVX-512), 16 GiB of memory, Debian GNU/Linux 12 (bookworm)
- lamp 0.1.0, OpenBLAS 0.3.21 with its SkylakeX kernels; GEMMs: dnnl; bf16: dnnl
- PyTorch 2.5.1 from a virtual environment (BLAS mkl, oneDNN)
- Repeats: 3; epochs per run: 0.1

| benchmark | lamp samples/s | PyTorch samples/s | lamp / PyTorch | test accuracy, lamp / PyTorch |
|---|--:|--:|--:|---|
| MLP fp32 (`mlp.sh`) | 11,000 | 10,000 | 0.92× | 86.59 % / 86.37 % |
| MLP fp16 (`precision.sh`) | 8,100 | — | — | 86.60 % / — |
| MLP fp32, 1 process × 1 thread (`ddp.sh`) | 8,200 | 8,000 | 1.00× | 86.62 % / 86.37 % |
| MLP fp32, 2 processes × 1 thread (`ddp.sh`) | 10,000 | 6,560 | 1.50× | 86.72 % / 86.37 % |
| MLP fp32, 2 processes × 1 thread, lamp with ZeRO-1 (`ddp.sh`) | 10,400 | 6,560 | 1.52× | 86.70 % / 86.37 % |
| small ResNet fp32, 1 process × 1 thread (`ddp.sh`) | 1,000 | 800 | 1.25× | 80.10 % / 80.00 % |
| small ResNet fp32, 2 processes × 1 thread (`ddp.sh`) | 1,940 | 1,200 | 1.62× | 80.20 % / 80.00 % |

Scaling of the MLP from 1 to 2 processes (2-process samples/s over twice the 1-process): lamp 60.0 % (62.5 % with ZeRO-1), PyTorch 40.0 %.

Scaling of the small ResNet from 1 to 2 processes (2-process samples/s over twice the 1-process): lamp 95.0 %, PyTorch 75.0 %.

| optimizer pass (`optim.sh`, best of 10) | ms | GB/s | of memcpy |
|---|--:|--:|--:|
| memcpy (8 B/element) | 5.45 | 24.6 | 100 % |
| adamw step (28 B/element) | 20.52 | 22.9 | 93 % |

Regenerate with:

```sh
PYTHON=/path/to/venv/bin/python scripts/bench/all.sh --repeat=3 --epochs=0.1
```
EOF
)

# A new file: a heading, the markers and the section.
out=$("$all" --from="$tmp/records.tsv" --out="$tmp/new.md" 2>&1); check "--from into a new file exits 0" $?
equals "says what it wrote" "$out" "all.sh: wrote $tmp/new.md"
equals "a new file holds the heading and the section between the markers" "$(cat "$tmp/new.md")" \
  "$(printf '# Benchmarks\n\n%s\n\n%s\n\n%s' "$begin" "$section" "$end")"

# An existing page: only the part between the markers changes, and a second run changes nothing.
printf '# Page\n\nprose before\n\n%s\nstale table\n%s\n\nprose after\n' "$begin" "$end" >"$tmp/page.md"
"$all" --from="$tmp/records.tsv" --out="$tmp/page.md" >/dev/null 2>&1; check "--from into a page exits 0" $?
equals "the page keeps its prose and gets the section between its markers" "$(cat "$tmp/page.md")" \
  "$(printf '# Page\n\nprose before\n\n%s\n\n%s\n\n%s\n\nprose after' "$begin" "$section" "$end")"
cp "$tmp/page.md" "$tmp/page-first.md"
"$all" --from="$tmp/records.tsv" --out="$tmp/page.md" >/dev/null 2>&1
cmp -s "$tmp/page.md" "$tmp/page-first.md"; check "rewriting from the same records gives the same bytes" $?

# Records that carry the arithmetic peak: one more line about the machine, after lamp's.
cp "$tmp/records.tsv" "$tmp/peak.tsv"
printf 'meta\tpeak\tfp32 231 GFLOP/s, bf16 461 GFLOP/s\n' >>"$tmp/peak.tsv"
"$all" --from="$tmp/peak.tsv" --out="$tmp/peak.md" >/dev/null 2>&1; check "--from with the peak exits 0" $?
equals "the peak follows lamp's line, with the products of a sample" "$(grep -A1 '^- lamp' "$tmp/peak.md")" \
  "- lamp 0.1.0, OpenBLAS 0.3.21 with its SkylakeX kernels; GEMMs: dnnl; bf16: dnnl
- Arithmetic peak of all cores (\`build/bench/peak_bench\`): fp32 231 GFLOP/s, bf16 461 GFLOP/s; the products of one training sample are 9.56 MFLOP in the MLP, 49.2 MFLOP in the small ResNet"

# peak_bench: a row per kernel, "-" for those the CPU (here capped to the x86-64 baseline) lacks.
peak="$(dirname "$1")/bench/peak_bench"
out=$(LAMP_CPU_ISA=sse "$peak" --ms=5 2>&1); equals "peak_bench on the baseline exits 0" $? 0
equals "and has no kernel to run" "$(echo "$out" | awk 'NR > 1 && NR < 5 { print $NF }' | tr '\n' ' ')" "- - - "
out=$("$peak" --ms=5 2>&1); equals "peak_bench exits 0" $? 0
equals "names the three kernels" "$(echo "$out" | awk 'NR > 1 && NR < 5 { print $1 }' | tr '\n' ' ')" "fma512 fma256 dpbf16 "
if grep -qw fma /proc/cpuinfo && grep -qw avx2 /proc/cpuinfo; then
  echo "$out" | awk '$1 == "fma256" { exit !($NF + 0 > 0) }'; check "and rates the AVX2 kernel on this CPU" $?
fi
out=$("$peak" --ms=0 2>&1); equals "peak_bench --ms=0 exits 2" $? 2
equals "and says what it expects" "$out" "peak_bench: unknown argument --ms=0 (expected --ms=T, T > 0)"

# A relative --out is the caller's, not the repository's.
(cd "$tmp" && "$all" --from=records.tsv --out=relative.md >/dev/null 2>&1); check "relative paths exit 0" $?
[[ -f "$tmp/relative.md" ]]; check "a relative --out is written beside the caller" $?

# Refusals.
printf '# Notes\n\nno markers here\n' >"$tmp/plain.md"
out=$("$all" --from="$tmp/records.tsv" --out="$tmp/plain.md" 2>&1); equals "a file without markers exits 1" $? 1
contains "and is named, with the markers it lacks" "$out" \
  "all.sh: $tmp/plain.md has no results markers (the lines '$begin' and '$end'); refusing to overwrite it"
equals "and is left alone" "$(cat "$tmp/plain.md")" $'# Notes\n\nno markers here'

printf 'row\tmlp\t1\t2\t3\t4\n' >"$tmp/other.tsv"
out=$("$all" --from="$tmp/other.tsv" --out="$tmp/x.md" 2>&1); equals "records without a command exit 1" $? 1
equals "and say what they lack" "$out" "all.sh: $tmp/other.tsv holds no records of an all.sh run (no meta command line)"
out=$("$all" --from="$tmp/missing.tsv" --out="$tmp/x.md" 2>&1); equals "missing records exit 1" $? 1
equals "and are named" "$out" "all.sh: cannot read the records $tmp/missing.tsv"
[[ ! -e "$tmp/x.md" ]]; check "a refused run writes nothing" $?

out=$("$all" --bogus 2>&1); equals "an unknown argument exits 2" $? 2
equals "and is named with the valid ones" "$out" \
  "all.sh: unknown argument --bogus (expected --repeat=N, --epochs=E, --out=FILE, --check or --from=RECORDS)"
out=$("$all" --epochs=1.5 2>&1); equals "--epochs=1.5 exits 2" $? 2
equals "whole epochs or a fraction below one" "$out" \
  "all.sh: --epochs must be a whole number >= 1 or a fraction in (0, 1), got 1.5"
out=$("$all" --repeat=0 2>&1); equals "--repeat=0 exits 2" $? 2
equals "--repeat must be a count" "$out" "all.sh: --repeat must be a whole number >= 1, got 0"

printf '#!/bin/sh\necho "ModuleNotFoundError: No module named torch" >&2\nexit 1\n' >"$tmp/python"
chmod +x "$tmp/python"
out=$(PYTHON="$tmp/python" "$all" --check --out="$tmp/x.md" 2>&1); equals "--check without torch exits 1" $? 1
# On a machine without the benchmarks' packages, all.sh installs them first (apt's lines come
# before): the message is its last line.
equals "and names the interpreter and the ways to get PyTorch" "${out##*$'\n'}" \
  "all.sh: $tmp/python cannot import torch; set PYTHON to an interpreter with PyTorch 2.x (docs/benchmarks.md)"

# The twin checks its command line before it imports torch.
out=$(python3 "$src/scripts/bench/torch_twin.py" --epochs 0 2>&1); equals "the twin's --epochs 0 exits 2" $? 2
contains "and says why" "$out" "error: --epochs must be a number > 0, got 0.0"
out=$(python3 "$src/scripts/bench/torch_twin.py" --memory-format channels_last 2>&1)
equals "the twin's channels_last for the MLP exits 2" $? 2
contains "and names the architecture it applies to" "$out" \
  "error: --memory-format channels_last applies to --arch cnn only, got --arch mlp"

echo "bench all.sh: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
