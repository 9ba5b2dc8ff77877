#!/usr/bin/env bash
# Bit-exact resume from a fresh process: 20 optimizer steps straight leave a checkpoint byte-
# identical to 10 steps, a save, a new process that resumes and trains 10 more; for every
# precision policy with SGD-momentum and AdamW, with accumulation, for a CNN with BatchNorm
# buffers and Dropout, and with stochastic rounding (with and without masters). The checkpoint holds parameters, fp32 masters, optimizer state,
# the loss scaler, buffers and counters, so `cmp` compares all of them at once.
# Usage: test_resume.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
run="$src/tests/cli/resume_run.lua"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
export OPENBLAS_NUM_THREADS=1

check() { # name, status
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}

resume_case() { # name, extra arguments...
  local name=$1
  shift
  local d="$tmp/$name"
  mkdir -p "$d"
  "$lamp" "$run" "$@" --steps=20 --save="$d/straight.lamp" >"$d/straight.log" 2>&1
  check "$name: 20 steps straight" $?
  "$lamp" "$run" "$@" --steps=10 --save="$d/half.lamp" >"$d/first.log" 2>&1
  check "$name: first 10 steps" $?
  "$lamp" "$run" "$@" --steps=10 --resume="$d/half.lamp" --save="$d/resumed.lamp" >"$d/second.log" 2>&1
  check "$name: resumed 10 steps" $?
  cmp -s "$d/straight.lamp" "$d/resumed.lamp"
  local same=$?
  check "$name: byte-identical after resume" $same
  if [[ $same -ne 0 ]]; then
    cat "$d/straight.log" "$d/second.log"
    cmp -l "$d/straight.lamp" "$d/resumed.lamp" | head -5
  fi
  tail -1 "$d/straight.log"
}

for p in fp32 fp16 bf16; do
  resume_case "$p-sgd" --precision=$p --optim=sgd
  resume_case "$p-adamw" --precision=$p --optim=adamw
done
resume_case "fp32-sgd-accum2" --precision=fp32 --accum=2
resume_case "fp16-adamw-accum2" --precision=fp16 --optim=adamw --accum=2
resume_case "bf16-sgd-cnn" --precision=bf16 --net=cnn --limit=256
resume_case "fp16-sgd-cnn-accum2" --precision=fp16 --net=cnn --limit=256 --accum=2
# Stochastic rounding: with masters, without them, and without them under fp16's scaler.
resume_case "bf16-sgd-sr" --precision=bf16 --stochastic_rounding
resume_case "bf16-adamw-nomasters-sr" --precision=bf16 --optim=adamw --master_weights=false --stochastic_rounding
resume_case "fp16-sgd-nomasters-sr-accum2" --precision=fp16 --master_weights=false --stochastic_rounding --accum=2
resume_case "bf16-sgd-cnn-nomasters-sr" --precision=bf16 --net=cnn --limit=256 --master_weights=false --stochastic_rounding

# fp16 must have seen its scale move inside the window: an overflow at 2^24, then growth.
grep -q "skipped [1-9]" "$tmp/fp16-sgd/straight.log"; check "fp16: the window holds a skipped step" $?
grep -q "skipped [1-9]" "$tmp/fp16-sgd/second.log"; check "fp16: the resumed run kept the skip count" $?

echo "resume: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
