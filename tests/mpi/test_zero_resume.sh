#!/usr/bin/env bash
# ZeRO-1 checkpoints under scripts/lamp-run -n 2 (tests/cli/resume_run.lua --zero=1): a sharded
# run writes the whole state in the unsharded format, so
#   - 10 sharded steps leave the same checkpoint, byte for byte, as 10 unsharded steps;
#   - 20 sharded steps straight == 10 sharded + save + resume sharded + 10 (byte-identical);
#   - the sharded checkpoint resumed unsharded on 2 ranks, and an unsharded one resumed sharded,
#     also end byte-identical to the straight run (2 ranks sum the same two numbers either way);
#   - the sharded checkpoint resumes on 1 rank (a sum in another order: it trains on, and ends
#     byte-identical to 1 rank resuming the unsharded checkpoint);
#   - with two buckets, and on 3 ranks with a padded slab and a bucket cut inside a parameter.
# The cases: fp32, bf16 and fp16; sgd and adamw; accumulation, clipping; the MLP, the ResNet and
# the CNN (BatchNorm, Dropout).
# Usage: test_zero_resume.sh SOURCE_DIR LAMP_BINARY
set -u
src=$1
export LAMP_BIN=$2
run="$src/tests/cli/resume_run.lua"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() { if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi; }
ran() { # name, status, log: a run that failed shows why
  check "$1" "$2"
  [[ $2 -eq 0 ]] || tail -n 15 "$3"
}
launch() { # ranks, arguments...
  local n=$1
  shift
  timeout 200 "$src/scripts/lamp-run" -n "$n" --timeout 60 "$run" "$@" 2>&1
}
two() { launch 2 "$@"; }
one() { OPENBLAS_NUM_THREADS=1 timeout 200 "$LAMP_BIN" "$run" "$@"; }
same() { # name, a, b, logs...
  local name=$1 a=$2 b=$3
  shift 3
  cmp -s "$a" "$b"
  local st=$?
  check "$name" $st
  [[ $st -ne 0 ]] && tail -5 "$@"
}

zero_case() { # name, arguments...
  local name=$1
  shift
  local d="$tmp/$name"
  mkdir -p "$d"
  two "$@" --zero=1 --steps=20 --save="$d/straight.lamp" >"$d/straight.log" 2>&1; ran "$name: 20 sharded steps" $? "$d/straight.log"
  grep -q "shard_optimizer: the optimizer state.* sharded over 2 ranks" "$d/straight.log"
  check "$name: the run was sharded" $?
  two "$@" --zero=1 --steps=10 --save="$d/half.lamp" >"$d/first.log" 2>&1; ran "$name: 10 sharded steps" $? "$d/first.log"
  two "$@" --steps=10 --save="$d/plain-half.lamp" >"$d/plain.log" 2>&1; ran "$name: 10 unsharded steps" $? "$d/plain.log"
  same "$name: the sharded checkpoint is the unsharded one" "$d/half.lamp" "$d/plain-half.lamp" "$d/first.log" "$d/plain.log"
  two "$@" --zero=1 --steps=10 --resume="$d/half.lamp" --save="$d/resumed.lamp" >"$d/second.log" 2>&1
  ran "$name: resumed sharded" $? "$d/second.log"
  same "$name: sharded -> sharded byte-identical to 20 straight" "$d/straight.lamp" "$d/resumed.lamp" "$d/second.log"
  two "$@" --steps=10 --resume="$d/half.lamp" --save="$d/unsharded.lamp" >"$d/unsharded.log" 2>&1
  ran "$name: resumed unsharded" $? "$d/unsharded.log"
  same "$name: sharded -> unsharded byte-identical" "$d/straight.lamp" "$d/unsharded.lamp" "$d/unsharded.log"
  two "$@" --zero=1 --steps=10 --resume="$d/plain-half.lamp" --save="$d/from-plain.lamp" >"$d/from-plain.log" 2>&1
  ran "$name: unsharded checkpoint resumed sharded" $? "$d/from-plain.log"
  same "$name: unsharded -> sharded byte-identical" "$d/straight.lamp" "$d/from-plain.lamp" "$d/from-plain.log"
  one "$@" --steps=10 --resume="$d/half.lamp" --save="$d/one.lamp" >"$d/one.log" 2>&1
  ran "$name: the sharded checkpoint resumes on 1 rank" $? "$d/one.log"
  one "$@" --steps=10 --resume="$d/plain-half.lamp" --save="$d/one-plain.lamp" >"$d/one-plain.log" 2>&1
  same "$name: 1 rank from it == 1 rank from the unsharded one" "$d/one.lamp" "$d/one-plain.lamp" "$d/one.log"
}

zero_case fp32-sgd --precision=fp32 --optim=sgd
zero_case bf16-adamw --precision=bf16 --optim=adamw
zero_case fp16-adamw-accum2-clip --precision=fp16 --optim=adamw --accum=2 --clip=0.5
zero_case fp32-sgd-resnet --precision=fp32 --net=resnet --limit=256
# BatchNorm's parameters, read in fp32 under a 16-bit policy, are gathered in fp32.
zero_case bf16-adamw-resnet --precision=bf16 --optim=adamw --net=resnet --limit=256
zero_case fp16-sgd-cnn-accum2 --precision=fp16 --net=cnn --accum=2 --limit=256
# Buckets of 1 KiB: the slab goes in two, each reduce-scattered as backward finishes it.
zero_case bf16-adamw-two-buckets --precision=bf16 --optim=adamw --bucket_mb=0.001
grep -q "gradient buckets: 2" "$tmp/bf16-adamw-two-buckets/straight.log"
check "two buckets" $?

# 3 ranks: the slab of 50890 parameters is padded to 50892, 16964 elements per rank, in two
# buckets cut at element 50238, inside the first layer's bias (its offsets are not multiples of
# 3). 20 sharded steps == 10 + resume + 10, and the 3-rank checkpoint re-shards onto 2 ranks (the
# same as 2 unsharded ranks resuming it).
three() { launch 3 --batch=48 "$@"; }
d="$tmp/three"
mkdir -p "$d"
args=(--precision=bf16 --optim=adamw --bucket_mb=0.001)
three "${args[@]}" --zero=1 --steps=20 --save="$d/straight.lamp" >"$d/straight.log" 2>&1; ran "3 ranks: 20 sharded steps" $? "$d/straight.log"
grep -q "sharded over 3 ranks, 16964 of 50890 elements on each" "$d/straight.log"
check "3 ranks: 16964 of 50890 elements on each" $?
grep -q "gradient buckets: 2" "$d/straight.log"
check "3 ranks: two buckets" $?
three "${args[@]}" --zero=1 --steps=10 --save="$d/half.lamp" >"$d/first.log" 2>&1; ran "3 ranks: 10 sharded steps" $? "$d/first.log"
three "${args[@]}" --zero=1 --steps=10 --resume="$d/half.lamp" --save="$d/resumed.lamp" >"$d/second.log" 2>&1
ran "3 ranks: resumed sharded" $? "$d/second.log"
same "3 ranks: sharded -> sharded byte-identical to 20 straight" "$d/straight.lamp" "$d/resumed.lamp" "$d/second.log"
two "${args[@]}" --batch=48 --zero=1 --steps=6 --resume="$d/half.lamp" --save="$d/two.lamp" >"$d/two.log" 2>&1
ran "3 sharded ranks -> 2 sharded ranks" $? "$d/two.log"
two "${args[@]}" --batch=48 --steps=6 --resume="$d/half.lamp" --save="$d/two-plain.lamp" >"$d/two-plain.log" 2>&1
same "3 sharded ranks -> 2 sharded == 2 unsharded" "$d/two.lamp" "$d/two-plain.lamp" "$d/two.log" "$d/two-plain.log"

echo "ZeRO-1 resume under mpirun: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
