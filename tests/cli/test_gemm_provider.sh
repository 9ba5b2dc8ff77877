#!/usr/bin/env bash
# The CPU's GEMM providers as the user meets them (core/backend/cpu/gemm_provider.h): `lamp devices`
# names them; without LAMP_GEMM, OpenBLAS for fp32 and oneDNN's bf16 GEMM where libdnnl.so.2 is
# installed and the CPU has AVX512_BF16; LAMP_GEMM forces one, and a name it cannot open stops a run
# at its first GEMM with the reason. bf16 training through oneDNN reaches the accuracy of OpenBLAS's.
# Usage: test_gemm_provider.sh LAMP SOURCE_DIR
set -u
lamp=$1
src=$2
passed=0
failed=0

check() { # name, condition result
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
equal() { # name, got, expected
  [[ "$2" == "$3" ]]
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected: %s\n  got:      %s\n' "$3" "$2"
  check "$1" $r
}
gemm_line() { env -u LAMP_GEMM "$@" "$lamp" devices | sed -n 3p; }
train() { # accuracy line of a short bf16 run; env assignments as arguments
  env -u LAMP_GEMM "$@" OPENBLAS_NUM_THREADS=1 timeout 120 "$lamp" "$src/scripts/fmnist_mlp.lua" --limit=2048 \
    --batch=64 --hidden=64 --precision=bf16 2>&1 | grep '^final test accuracy'
}

# What this machine should get without LAMP_GEMM: oneDNN for both where it has the bf16 GEMM.
bf16="" chosen="openblas"
if grep -qw avx512_bf16 /proc/cpuinfo && /sbin/ldconfig -p | grep -q 'libdnnl\.so\.2 '; then
  bf16="; bf16: dnnl" chosen="dnnl; bf16: dnnl"
fi

equal "devices names the providers chosen" "$(gemm_line)" "    gemm: $chosen"
equal "LAMP_GEMM=openblas" "$(gemm_line LAMP_GEMM=openblas)" "    gemm: openblas"
equal "an unknown LAMP_GEMM" "$(gemm_line LAMP_GEMM=mkl)" \
  "    gemm: unavailable (gemm: LAMP_GEMM names an unknown provider 'mkl' (expected openblas, dnnl or blis))"

out=$(env LAMP_GEMM=mkl timeout 120 "$lamp" "$src/scripts/fmnist_mlp.lua" --limit=256 --batch=32 --hidden=16 2>&1)
check "a run with an unknown LAMP_GEMM exits 1" $(( $? == 1 ? 0 : 1 ))
grep -qF "gemm: LAMP_GEMM names an unknown provider 'mkl' (expected openblas, dnnl or blis)" <<<"$out"
check "and says why (got: $(tail -n 1 <<<"$out"))" $?

if /sbin/ldconfig -p | grep -q 'libdnnl\.so\.2 '; then
  equal "LAMP_GEMM=dnnl" "$(gemm_line LAMP_GEMM=dnnl)" "    gemm: dnnl$([[ -n $bf16 ]] && echo "; bf16: dnnl")"
  # Both train the same recipe; their sums differ in order only, so the accuracies are close.
  a=$(train LAMP_GEMM=openblas | grep -oE '[0-9.]+ %' | cut -d' ' -f1)
  b=$(train | grep -oE '[0-9.]+ %' | cut -d' ' -f1)
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 50 && b > 50 && (a - b < 2) && (b - a < 2)) }'
  check "bf16 accuracy with the default providers ($b %) within 2 points of OpenBLAS's ($a %)" $?
else
  out=$(gemm_line LAMP_GEMM=dnnl)
  [[ $out == "    gemm: unavailable (gemm: provider 'dnnl' is not available: libdnnl.so.2: cannot open shared object file"* ]]
  check "LAMP_GEMM=dnnl without libdnnl says so (got: $out)" $?
fi

echo "gemm providers: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
