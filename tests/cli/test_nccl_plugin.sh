#!/usr/bin/env bash
# The nccl communicator plugin as built here: where the toolkit has nccl.h it is built,
# linked to the CUDA runtime statically and to libnccl not at all (readelf: neither is NEEDED, nor
# libcuda), exports only its entry, and loads on this machine without a driver; `lamp plugins`
# shows it with probe 0 and the reason, under a launcher too; a script that asks for it on the CPU
# fails with CUDA's message. Where nccl.so is not built, it must be absent.
# Usage: test_nccl_plugin.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
build=$(dirname "$lamp")
so=$build/plugins/comm/nccl.so
passed=0
failed=0
check() { # name, condition result
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}

# Built where CUDA is (LAMP_CUDA not OFF, nvcc found) and nccl.h was found.
nccl=0
if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$build/CMakeCache.txt" &&
  ! grep -qi '^LAMP_CUDA:STRING=OFF$' "$build/CMakeCache.txt" &&
  grep -q '^LAMP_NCCL_INCLUDE_DIR:PATH=/' "$build/CMakeCache.txt"; then
  nccl=1
fi
if [[ $nccl == 0 ]]; then
  [[ ! -e $so ]]
  check "nccl.so is not built without CUDA and nccl.h" $?
  echo "nccl plugin: $passed passed, $failed failed (not built here)"
  [[ $failed -eq 0 ]]
  exit
fi

needed=$(readelf -d "$so" | grep NEEDED)
check "nccl.so has a dynamic section" $?
bad=$(grep -Ei 'libnccl|libcuda|libcudart' <<<"$needed")
[[ -z $bad ]]
check "nccl.so needs neither libnccl nor a CUDA library (got: $bad)" $?
exported=$(readelf --dyn-syms -W "$so" | awk '$7 != "UND" && $5 == "GLOBAL" {print $8}')
[[ $exported == lamp_plugin_entry_v1 ]]
check "nccl.so exports only its entry (got: $(echo $exported))" $?

info=$("$lamp" plugin-info "$so" 2>&1)
check "plugin-info loads nccl.so" $?
[[ $(grep '^devices ' <<<"$info") =~ ^devices\ +cpu,\ cuda$ ]]
check "nccl.so declares devices cpu, cuda (got: $(grep '^devices ' <<<"$info"))" $?

# The probe on this machine, outside and inside a launcher: the run device of `lamp plugins` is the CPU.
reason="0 (the run device is cpu: nccl moves cuda buffers (train with --device=cuda))"
row() { awk '$1 == "comm" && $2 == "nccl"' <<<"$1" | sed 's/  */ /g'; }
want="comm nccl 1.0 1.3 $reason $(realpath "$so")"
out=$(env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK "$lamp" plugins)
check "plugins exits 0" $?
[[ $(row "$out") == "$want" ]]
check "plugins shows nccl with probe 0 and the reason (got: $(row "$out"))" $?
out=$(env -u PMI_SIZE -u PMIX_RANK OMPI_COMM_WORLD_SIZE=2 "$lamp" plugins)
[[ $(row "$out") == "$want" ]]
check "under mpirun's variables too (got: $(row "$out"))" $?

# Asked for by name on the CPU: create tries the GPU and CUDA answers; the run fails with it.
script=$(mktemp --suffix=.lua)
trap 'rm -f "$script"' EXIT
echo 'local lamp = require "lamp" local c = lamp.comm("nccl") print("created", c:name())' >"$script"
out=$(cd "$src" && env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK "$lamp" "$script" 2>&1)
status=$?
[[ $status -ne 0 ]]
check "lamp.comm(\"nccl\") without a driver fails (status $status)" $?
grep -qF 'nccl: cannot use the GPU: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)' <<<"$out"
check "with CUDA's message (got: $out)" $?

echo "nccl plugin: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
