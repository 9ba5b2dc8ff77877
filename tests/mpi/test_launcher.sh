#!/usr/bin/env bash
# scripts/lamp-run under failure: a rank killed mid-epoch, and a rank that cannot load a plugin.
# Either way every rank ends, the survivors name the missing rank, and lamp-run exits non-zero
# well within the (shortened) timeout. Usage: test_launcher.sh SOURCE_DIR LAMP_BINARY
set -u
src=$1
export LAMP_BIN=$2
passed=0
failed=0
check() { if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi; }
contains() { [[ "$2" == *"$3"* ]]; local r=$?; [[ $r -ne 0 ]] && printf '  expected to contain: %s\n  got: %s\n' "$3" "$2"; check "$1" $r; }

run() { # script -> sets out, rc, seconds
  local start=$SECONDS
  out=$(timeout 120 "$src/scripts/lamp-run" -n 2 --timeout 5 "$src/tests/mpi/lua/$1" 2>&1)
  rc=$?
  seconds=$((SECONDS - start))
}

run die_rank1.lua
check "a killed rank makes lamp-run exit non-zero (rc $rc)" $(( rc != 0 && rc != 124 ? 0 : 1 ))
contains "the survivor names the dead rank" "$out" "rank 1 did not reach collective"
check "the job ends within 60 s (took $seconds s)" $(( seconds < 60 ? 0 : 1 ))
[[ "$out" == *"rank 0 finished"* ]]; check "rank 0 did not pretend to finish" $(( $? == 0 ? 1 : 0 ))

run bad_plugin_rank1.lua
check "a missing plugin on one rank makes lamp-run exit non-zero (rc $rc)" $(( rc != 0 && rc != 124 ? 0 : 1 ))
contains "rank 1 reports the plugin it could not find" "$out" "precision plugin 'nosuch16' not found"
contains "rank 0 names rank 1" "$out" "rank 1 did not reach collective"
check "the job ends within 60 s (took $seconds s)" $(( seconds < 60 ? 0 : 1 ))

echo "launcher: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
