#!/usr/bin/env bash
# The optimizer plugins as built here: where the toolkit was found they carry
# a CUDA step, linked to the CUDA runtime statically, and must neither need libcudart nor libcuda
# (readelf) nor stop loading or training on the CPU of a machine without a driver.
# Usage: test_optim_cuda_plugins.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
build=$(dirname "$lamp")
passed=0
failed=0
check() { # name, condition result
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}

# The CUDA steps are built where CMake found nvcc and LAMP_CUDA is not OFF.
cuda=0
if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$build/CMakeCache.txt" &&
  ! grep -qi '^LAMP_CUDA:STRING=OFF$' "$build/CMakeCache.txt"; then
  cuda=1
fi
want_devices=$([[ $cuda == 1 ]] && echo "cpu, cuda" || echo "cpu")

for name in sgd adam adamw; do
  so=$build/plugins/optim/$name.so
  needed=$(readelf -d "$so" | grep NEEDED)
  check "$name.so has a dynamic section" $?
  bad=$(grep -Ei 'libcuda|libcudart|libcublas|libnvrtc' <<<"$needed")
  [[ -z $bad ]]
  check "$name.so needs no CUDA library (got: $bad)" $?
  readelf -S -W "$so" | grep -q '\.nv_fatbin'
  has_device_code=$(( $? == 0 ))
  [[ $has_device_code == "$cuda" ]]
  check "$name.so carries device code exactly where CUDA is built (cuda=$cuda)" $?
  exported=$(readelf --dyn-syms -W "$so" | awk '$7 != "UND" && $5 == "GLOBAL" {print $8}')
  [[ $exported == lamp_plugin_entry_v1 ]]
  check "$name.so exports only its entry (got: $(echo $exported))" $?
  info=$("$lamp" plugin-info "$so" 2>&1)
  check "plugin-info loads $name.so" $?
  [[ $(grep '^devices ' <<<"$info") =~ ^devices\ +$want_devices$ ]]
  check "$name.so declares devices $want_devices (got: $(grep '^devices ' <<<"$info"))" $?
done

out=$(cd "$src" && "$lamp" tests/cli/optim_steps.lua "$build/tests/bad_plugins/optim11.so" 2>&1)
check "sgd, adam, adamw and a plugin built against ABI 1.1 train on the cpu" $?
for name in sgd adam adamw optim11; do
  for precision in fp32 bf16; do
    grep -q "^$name $precision: loss " <<<"$out"
    check "$name trains under $precision" $?
  done
done
# Creating the CPU steps must not ask for the CUDA device: that loads the cuda backend module and
# the cuBLAS it links (about 150 MB of peak memory a CPU run does not need). Linux only (/proc/self/maps).
if [[ -r /proc/self/maps ]]; then
  mapped=$(grep '^cuda files mapped: ' <<<"$out")
  [[ $mapped == "cuda files mapped: none" ]]
  check "a CPU run maps no cuda backend or cuBLAS (got: $mapped)" $?
fi
[[ $failed -eq 0 ]] || echo "$out"

echo "optim cuda plugins: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
