#!/usr/bin/env bash
# Neither the lamp executable nor lampcore links CUDA: the CUDA backend is a module the
# core opens on first use (build/backends/cuda.so), so lamp starts on a machine without CUDA's
# libraries. No CUDA library among lamp's NEEDED entries, and no CUDA symbol, defined or wanted, in
# lamp or in liblampcore.a. Where the module was built, the same symbol check finds CUDA in it: the
# check can see what it looks for.
# Usage: test_no_cuda_link.sh LAMP SOURCE_DIR
set -u
lamp=$1
build=$(dirname "$lamp")
passed=0
failed=0
check() { # name, condition result
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
cuda_libraries='lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc)\.so'
cuda_symbols=' (cuda|cublas|cudnn|nccl|cu[A-Z])[A-Za-z0-9_]*$'

needed=$(readelf -d "$lamp" | grep NEEDED)
check "readelf reads lamp's NEEDED entries" $(( $(grep -c NEEDED <<<"$needed") > 0 ? 0 : 1 ))
found=$(grep -E "$cuda_libraries" <<<"$needed")
[[ -z "$found" ]]; check "lamp needs no CUDA library (found: $found)" $?

found=$(nm "$lamp" 2>/dev/null | grep -E "$cuda_symbols"; nm -D "$lamp" | grep -E "$cuda_symbols")
[[ -z "$found" ]]; r=$?; check "lamp has no CUDA symbol (found: $(head -n 3 <<<"$found"))" $r

core="$build/liblampcore.a"
[[ -f "$core" ]]; check "liblampcore.a is at $core" $?
found=$(nm "$core" 2>/dev/null | grep -E "$cuda_symbols")
[[ -z "$found" ]]; r=$?; check "lampcore has no CUDA symbol (found: $(head -n 3 <<<"$found"))" $r

module="$build/backends/cuda.so"
if [[ -f "$module" ]]; then
  nm "$module" | grep -qE ' [Tt] cudaGetDeviceCount$'; check "the check sees CUDA in the module itself" $?
  exported=$(nm -D --defined-only "$module" | grep -E ' [TD] ' | awk '{print $3}')
  [[ "$exported" == "lamp_backend_module_open" ]]; check "the module exports its entry only (got: $exported)" $?
fi

echo "no CUDA link: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
