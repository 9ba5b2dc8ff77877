#!/usr/bin/env bash
# scripts/lamp-run under failure: a rank killed mid-epoch, and a rank that cannot load a plugin.
# Either way every rank ends, the survivors name the missing rank, and lamp-run exits non-zero
# well within the (shortened) timeout. And ranks that end at once all have their exit status
# found. Usage: test_launcher.sh SOURCE_DIR LAMP_BINARY
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

# A job whose ranks are done the moment it starts: a stand-in mpirun writes both ranks' statuses
# and exits at once, so lamp-run's first nap is killed right after its fork. That subshell used to
# run lamp-run's EXIT trap and remove the status folder (1 real run in 40; 1 in 3 here), and the
# job ended "without an exit status".
fake=$(mktemp -d)
printf '#!/bin/sh\necho 0 >"$LAMP_RUN_STATUS_DIR/0"; echo 4 >"$LAMP_RUN_STATUS_DIR/1"\n' >"$fake/mpirun"
chmod +x "$fake/mpirun"
lost=0 wrong=0
for ((i = 0; i < 30; i++)); do
  out=$(PATH="$fake:$PATH" timeout 20 "$src/scripts/lamp-run" -n 2 unused.lua 2>&1)
  rc=$?
  [[ "$out" == *"without an exit status"* ]] && lost=$((lost + 1))
  [[ $rc -eq 4 ]] || wrong=$((wrong + 1))
done
rm -rf "$fake"
check "30 jobs that end at once: every rank's status found ($lost lost)" $lost
check "30 jobs that end at once: lamp-run exits with rank 1's status 4 ($wrong did not)" $wrong

echo "launcher: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
