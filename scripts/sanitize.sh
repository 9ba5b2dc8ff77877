#!/usr/bin/env bash
# Builds lamp with AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/ and runs the
# unit tests under them (ctest -L unit; the multi-rank mpirun tests are not unit tests). Extra
# arguments go to ctest. The last line reports the counts: "sanitize: N passed, N failed".
# OpenBLAS and Lua stay uninstrumented shared libraries, which ASan handles.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || exit 1
jobs=${LAMP_JOBS:-$(nproc)}
# No -Werror here: the normal build already gates warnings, and optimising around the
# instrumentation makes GCC warn where it otherwise would not. No CUDA either: the sanitizers
# instrument C only, and the normal build already compiles the CUDA sources.
if ! cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DLAMP_SANITIZE=address,undefined \
       -DLAMP_CUDA=OFF >/dev/null ||
   ! cmake --build build-asan -j "$jobs"; then
  echo "sanitize: 0 passed, 1 failed (the sanitizer build failed)"
  exit 1
fi
# halt_on_error: a report fails its test; the stack traces go to the ctest output.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# OpenBLAS and lamp's own convolutions only: the leak check crashes at exit scanning the dynamic
# TLS of a dlopen'ed oneDNN or BLIS (core/backend/cpu/gemm_provider.c, conv_dnnl.c). oneDNN's
# convolutions then run once more under ASan and UBSan without the leak check.
export LAMP_GEMM=openblas LAMP_CONV_BF16=widen
log=$(mktemp)
(cd build-asan && ctest -L unit --output-on-failure -j "$jobs" "$@") 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
(cd build-asan && LAMP_CONV_BF16=auto ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0} \
   ctest -R '^unit/test_conv_dnnl$' --output-on-failure) 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
counts=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1 \2/p' "$log")
rm -f "$log"
if [[ $(wc -l <<<"$counts") -ne 2 ]]; then
  echo "sanitize: 0 passed, 1 failed (ctest printed no summary)"
  exit 1
fi
failed=$(awk '{s += $1} END {print s}' <<<"$counts")
total=$(awk '{s += $2} END {print s}' <<<"$counts")
echo "sanitize: $((total - failed)) passed, $failed failed"
exit "$status"
