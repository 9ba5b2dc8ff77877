#!/usr/bin/env bash
# lamp.comm("nccl") on two ranks under scripts/lamp-run, through the core: the core builds the
# bootstrap over mpi, rank 0's NCCL unique id travels over it, and both ranks then fail with CUDA's
# own message (this machine has no driver), exit non-zero, and end well within the timeout.
# (mpi/test_nccl_bootstrap checks the id itself with a bootstrap of its own.)
# Usage: test_nccl_core.sh SOURCE_DIR LAMP_BINARY
set -u
src=$1
export LAMP_BIN=$2
passed=0
failed=0
check() { if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi; }
count() { grep -cF -- "$2" <<<"$1"; }

start=$SECONDS
out=$(timeout 120 "$src/scripts/lamp-run" -n 2 --timeout 20 "$src/tests/mpi/lua/nccl_create.lua" 2>&1)
rc=$?
seconds=$((SECONDS - start))
printf '%s\n' "$out" | tail -n 12

check "both ranks fail: lamp-run exits non-zero (rc $rc)" $(( rc != 0 && rc != 124 ? 0 : 1 ))
# (only rank 0 logs at info level)
check "the core builds the bootstrap over mpi" \
  $(( $(count "$out" "bootstrap: rank 0 of 2 (local 0 of 2) over mpi") == 1 ? 0 : 1 ))
check "and each rank closes it after the failure" $(( $(count "$out" \
  "error: nccl: create failed, closing the bootstrap over mpi (this waits for the other ranks): nccl: cannot use the GPU") == 2 ? 0 : 1 ))
check "both ranks name CUDA's reason" $(( $(count "$out" \
  "nccl: cannot use the GPU: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)") >= 2 ? 0 : 1 ))
check "no rank went on" $(( $(count "$out" "the communicator was created") == 0 ? 0 : 1 ))
check "the job ends well within the 20 s timeout (took $seconds s)" $(( seconds < 20 ? 0 : 1 ))

echo "nccl through the core: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
