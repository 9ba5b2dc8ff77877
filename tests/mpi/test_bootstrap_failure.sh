#!/usr/bin/env bash
# A peer missing from a bootstrap exchange under scripts/lamp-run (tests/mpi/lua/bootstrap_skip_rank0.lua):
# rank 1's all_gather over the mpi bootstrap fails at the timeout, naming the operation and rank 0;
# lamp-run exits non-zero, well within 60 s. Usage: test_bootstrap_failure.sh SOURCE_DIR LAMP_BINARY BOOTCOMM_SO
set -u
src=$1
export LAMP_BIN=$2 LAMP_BOOTCOMM=$3
passed=0
failed=0
check() { if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi; }
contains() { [[ "$2" == *"$3"* ]]; local r=$?; [[ $r -ne 0 ]] && printf '  expected to contain: %s\n  got: %s\n' "$3" "$2"; check "$1" $r; }

start=$SECONDS
out=$(timeout 120 "$src/scripts/lamp-run" -n 2 --timeout 4 "$src/tests/mpi/lua/bootstrap_skip_rank0.lua" 2>&1)
rc=$?
seconds=$((SECONDS - start))

check "a missing peer makes lamp-run exit non-zero (rc $rc)" $(( rc != 0 && rc != 124 ? 0 : 1 ))
contains "rank 1 names the operation and rank 0" "$out" \
  "lamp: $src/tests/mpi/lua/bootstrap_skip_rank0.lua:5: bootcomm: bootstrap: all_gather 1 over mpi failed (rank 1 of 2): mpi: rank 1: all_gather (collective #2) timed out after 4."
contains "and says rank 0 never came" "$out" "rank 0 did not reach collective #2"
contains "the reason is logged before the bootstrap closes" "$out" \
  "error: bootcomm: create failed, closing the bootstrap over mpi (this waits for the other ranks): bootcomm: bootstrap: all_gather 1 over mpi failed"
check "the job ends within 60 s (took $seconds s)" $(( seconds < 60 ? 0 : 1 ))

echo "bootstrap failure: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
