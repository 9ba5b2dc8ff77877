#!/usr/bin/env bash
# A script run under scripts/lamp-run writes its own exit status where the launcher reads it
# (LAMP_RUN_STATUS_DIR/<rank>), so a rank whose shell Open MPI ends after the run still counts as
# finished. Usage: test_run_status.sh LAMP SOURCE_DIR
set -u
lamp=$1
passed=0
failed=0
check() { if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo 'print("fine")' >"$tmp/ok.lua"
echo 'error("stop here", 0)' >"$tmp/fails.lua"
mkdir -p "$tmp/status" "$tmp/none"

env OMPI_COMM_WORLD_RANK=1 LAMP_RUN_STATUS_DIR="$tmp/status" "$lamp" "$tmp/ok.lua" >/dev/null 2>&1
rc=$?
check "a finished run exits 0 (got $rc)" $((rc != 0))
check "and leaves 0 in STATUS_DIR/1 (got '$(cat "$tmp/status/1" 2>/dev/null)')" \
  "$([[ $(cat "$tmp/status/1" 2>/dev/null) == 0 ]]; echo $?)"

env OMPI_COMM_WORLD_RANK=0 LAMP_RUN_STATUS_DIR="$tmp/status" "$lamp" "$tmp/fails.lua" >/dev/null 2>&1
rc=$?
check "a failed run exits 1 (got $rc)" $((rc != 1))
check "and leaves 1 in STATUS_DIR/0 (got '$(cat "$tmp/status/0" 2>/dev/null)')" \
  "$([[ $(cat "$tmp/status/0" 2>/dev/null) == 1 ]]; echo $?)"
check "no temporary file is left" "$(compgen -G "$tmp/status/*.lamp-tmp" >/dev/null; echo $((1 - $?)))"

env -u LAMP_RUN_STATUS_DIR OMPI_COMM_WORLD_RANK=0 "$lamp" "$tmp/ok.lua" >/dev/null 2>&1
(cd "$tmp/none" && env -u LAMP_RUN_STATUS_DIR "$lamp" "$tmp/ok.lua" >/dev/null 2>&1)
check "outside lamp-run nothing is written" "$(compgen -G "$tmp/none/*" >/dev/null; echo $((1 - $?)))"

echo "run status: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
