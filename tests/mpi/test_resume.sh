#!/usr/bin/env bash
# Bit-exact resume under scripts/lamp-run -n 2: 20 optimizer steps straight leave the same
# checkpoint, byte for byte, as 10 steps, a save, a new job that resumes and trains 10 more.
# Rank 0 writes; the other rank waits for it and, on resume, receives rank 0's state. Then a
# checkpoint written by 2 ranks resumes on 1 (unsharded optimizer state: allowed, and said).
# Usage: test_resume.sh SOURCE_DIR LAMP_BINARY
set -u
src=$1
export LAMP_BIN=$2
run="$src/tests/cli/resume_run.lua"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() { if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi; }
two() { timeout 200 "$src/scripts/lamp-run" -n 2 --timeout 60 "$run" "$@"; }

resume_case() { # name, arguments...
  local name=$1
  shift
  local d="$tmp/$name"
  mkdir -p "$d"
  two "$@" --steps=20 --save="$d/straight.lamp" >"$d/straight.log" 2>&1; check "$name: 20 steps straight" $?
  two "$@" --steps=10 --save="$d/half.lamp" >"$d/first.log" 2>&1; check "$name: first 10 steps" $?
  two "$@" --steps=10 --resume="$d/half.lamp" --save="$d/resumed.lamp" >"$d/second.log" 2>&1
  check "$name: resumed 10 steps" $?
  cmp -s "$d/straight.lamp" "$d/resumed.lamp"; local same=$?
  check "$name: byte-identical after resume on 2 ranks" $same
  [[ $same -ne 0 ]] && tail -5 "$d/straight.log" "$d/second.log"
}

resume_case fp32-sgd --precision=fp32 --optim=sgd
resume_case fp16-adamw-accum2 --precision=fp16 --optim=adamw --accum=2
resume_case bf16-sgd-cnn --precision=bf16 --net=cnn --limit=256

# 2 ranks -> 1 rank: allowed (the optimizer state is not sharded), with a warning that says so.
out=$(OPENBLAS_NUM_THREADS=1 "$LAMP_BIN" "$run" --steps=4 --resume="$tmp/fp32-sgd/half.lamp" 2>&1)
check "a 2-rank checkpoint resumes on 1 rank" $?
[[ "$out" == *"written by 2 ranks, resuming on 1: allowed because the optimizer state is not sharded"* ]]
check "the world-size change is reported" $?

echo "resume under mpirun: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
