#!/usr/bin/env bash
# README command 2: install what is missing, build, and run the whole test suite.
# The last line reports the counts: "tests: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || exit 1
scripts/build.sh || exit 1
log=$(mktemp)
(cd build && ctest --output-on-failure -j "$(nproc)" "$@") 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$log" | tail -1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
rm -f "$log"
if [[ -z "$total" ]]; then
  echo "tests: 0 passed, 1 failed (ctest printed no summary)"
  exit 1
fi
echo "tests: $((total - failed)) passed, $failed failed"
exit "$status"
