#!/usr/bin/env bash
# The whole trainer on the simulated device (tests/sim/lamp_sim.c: memory the host cannot read,
# work run later on a queue): the MLP and the small ResNet under fp32, fp16 and bf16, with
# accumulation 2 and clipping, trained 10 optimizer steps with a save after 6 and a resume in a
# new process, leave a checkpoint byte-identical to 10 straight steps on the CPU, and so do runs
# with stochastic rounding; and so do 2 ranks over MPI with gradient buckets, sharded (ZeRO-1) or
# not. The checkpoint holds parameters, masters, optimizer
# state, the loss scaler, BatchNorm buffers and counters, so `cmp` compares all of them.
# The 16-bit runs are repeated on the native-16 sim (LAMP_SIM_NATIVE16=1: LAMP_CAP_NATIVE_16BIT_GEMM,
# as on CUDA), where the layers hand the device 16-bit operands: the same bytes, since widening is
# exact. Under fp16 the initial scale overflows, so skipped steps and the scale's backoff are
# compared too (and each fp16 run must have skipped some). On the sim the micro-steps are recorded
# as device graphs and replayed (the Trainer's default where the device records them): the
# ResNet's runs must have replayed some, and the networks with Dropout, whose masks are drawn on
# the host, must have given graphs up, saying why. The ResNet with its stages in nn.Recompute is
# trained the same way.
# Usage: test_sim_train.sh LAMP LAMP_SIM SOURCE_DIR
set -u
lamp=$1
lamp_sim=$2
src=$3
run="$src/tests/cli/resume_run.lua"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
export OPENBLAS_NUM_THREADS=1

check() { # name, status
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}

same() { # name, a, b, logs...
  local name=$1 a=$2 b=$3
  shift 3
  cmp -s "$a" "$b"
  local st=$?
  check "$name: byte-identical to the CPU" $st
  if [[ $st -ne 0 ]]; then tail -3 "$@"; cmp -l "$a" "$b" | head -3; fi
}

sim_case() { # name, arguments...
  local name=$1
  shift
  local d="$tmp/$name"
  mkdir -p "$d"
  "$lamp" "$run" "$@" --steps=10 --save="$d/cpu.lamp" >"$d/cpu.log" 2>&1
  check "$name: 10 steps on the cpu" $?
  env "${sim_env[@]}" "$lamp_sim" "$run" "$@" --device=sim --steps=6 --save="$d/half.lamp" >"$d/first.log" 2>&1
  check "$name: 6 steps on the sim" $?
  env "${sim_env[@]}" "$lamp_sim" "$run" "$@" --device=sim --steps=4 --resume="$d/half.lamp" --save="$d/sim.lamp" \
    >"$d/second.log" 2>&1
  check "$name: resumed on the sim, 4 more" $?
  same "$name" "$d/cpu.lamp" "$d/sim.lamp" "$d/cpu.log" "$d/second.log"
  if [[ "$name" == *resnet* ]]; then
    grep -q "^graphs on: [1-9][0-9]* micro-steps recorded, [1-9][0-9]* replayed" "$d/first.log"
    check "$name: micro-steps recorded and replayed on the sim ($(grep '^graphs' "$d/first.log"))" $?
  else
    grep -q "cannot be recorded as a device graph (Dropout(0.1): its mask is drawn on the host: sim: event_wait" \
      "$d/first.log" && grep -q "^graphs off: 0 micro-steps recorded" "$d/first.log"
    check "$name: Dropout gives graphs up, saying why" $?
  fi
  local last
  last=$(grep -o 'steps [0-9]* skipped [0-9]* scale .*' "$d/cpu.log")
  [[ -n "$last" && "$last" == "$(grep -o 'steps [0-9]* skipped [0-9]* scale .*' "$d/second.log")" ]]
  check "$name: the same steps, skipped steps and scale as the cpu ($last)" $?
  if [[ "$*" == *--precision=fp16* ]]; then
    [[ "$last" =~ skipped\ [1-9] ]]
    check "$name: fp16 skipped steps (the overflow path ran)" $?
  fi
}

sim_env=()

common=(--accum=2 --clip=0.5 --limit=256)
for p in fp32 fp16 bf16; do
  sim_case "mlp-$p" --net=mlp --precision=$p "${common[@]}"
  sim_case "resnet-$p" --net=resnet --precision=$p "${common[@]}"
done
sim_case "cnn-dropout-adamw-fp16" --net=cnn --precision=fp16 --optim=adamw "${common[@]}"
# nn.Recompute: the ResNet's stages recomputed in backward, their intermediates in the model's
# shared scratch (allocated in the first step, then reused: the micro-steps are recorded and
# replayed), resumed on the sim, against the CPU.
for p in fp16 bf16; do
  sim_case "resnet-recompute-$p" --net=resnet --recompute --precision=$p "${common[@]}"
done
# Stochastic rounding: the device draws the CPU's bits (with masters; without them, BatchNorm's
# keep_f32 parameters beside the rounded ones).
sim_case "mlp-bf16-sr" --net=mlp --precision=bf16 --stochastic_rounding "${common[@]}"
sim_case "resnet-bf16-nomasters-sr" --net=resnet --precision=bf16 --master_weights=false --stochastic_rounding \
  "${common[@]}"

# The 16-bit operand path: weights read from their 16-bit copies, operands never widened by the
# layers.
sim_env=(LAMP_SIM_NATIVE16=1)
for p in fp16 bf16; do
  sim_case "native16-mlp-$p" --net=mlp --precision=$p "${common[@]}"
  sim_case "native16-resnet-$p" --net=resnet --precision=$p "${common[@]}"
done
sim_case "native16-cnn-dropout-adamw-fp16" --net=cnn --precision=fp16 --optim=adamw "${common[@]}"
sim_case "native16-mlp-fp16-nomasters-sr" --net=mlp --precision=fp16 --master_weights=false --stochastic_rounding \
  "${common[@]}"
sim_env=()

# One host synchronisation per optimizer step (lamp-sim counts the host's waits for the device,
# LAMP_SIM_HOST_WAITS=1): 20 steps wait exactly 10 times more than 10 steps, whatever the network,
# the policy, the accumulation or the table; the runs cross epoch ends and fp16 skips steps.
waits_of() { # log
  sed -n 's/^lamp-sim: \([0-9]*\) host waits$/\1/p' "$1"
}
waits_case() { # name, arguments...
  local name=$1
  shift
  local d="$tmp/waits-$name"
  mkdir -p "$d"
  env "${sim_env[@]}" LAMP_SIM_HOST_WAITS=1 "$lamp_sim" "$run" "$@" --device=sim --steps=10 --save="$d/a.lamp" \
    >"$d/10.log" 2>&1
  env "${sim_env[@]}" LAMP_SIM_HOST_WAITS=1 "$lamp_sim" "$run" "$@" --device=sim --steps=20 --save="$d/b.lamp" \
    >"$d/20.log" 2>&1
  local a b
  a=$(waits_of "$d/10.log")
  b=$(waits_of "$d/20.log")
  [[ -n "$a" && -n "$b" && $((b - a)) -eq 10 ]]
  check "waits-$name: one host wait per optimizer step (10 steps: ${a:-?}, 20 steps: ${b:-?})" $?
}
for net in mlp resnet cnn; do
  waits_case "$net-fp16-accum2" --net=$net --precision=fp16 "${common[@]}"
  waits_case "$net-bf16-accum1" --net=$net --precision=bf16 --accum=1 --clip=0.5 --limit=256
done
sim_env=(LAMP_SIM_NATIVE16=1)
waits_case "native16-resnet-fp16-accum2" --net=resnet --precision=fp16 "${common[@]}"
waits_case "native16-cnn-bf16-accum2" --net=cnn --precision=bf16 --optim=adamw "${common[@]}"
sim_env=()

# Two ranks over MPI: buckets all-reduced as backward produces them, on the simulated device.
if command -v mpirun >/dev/null && [[ -f "$(dirname "$lamp")/plugins/comm/mpi.so" ]]; then
  for net in mlp resnet; do
    d="$tmp/mpi-$net"
    mkdir -p "$d"
    LAMP_BIN="$lamp" "$src/scripts/lamp-run" -n 2 "$run" --net=$net --precision=bf16 --accum=2 --limit=256 --steps=6 \
      --save="$d/cpu.lamp" >"$d/cpu.log" 2>&1
    status=$?
    check "mpi-$net: 2 ranks on the cpu" $status
    [[ $status -eq 0 ]] || tail -n 20 "$d/cpu.log" # a rare failure here must say why
    LAMP_BIN="$lamp_sim" "$src/scripts/lamp-run" -n 2 "$run" --device=sim --net=$net --precision=bf16 --accum=2 \
      --limit=256 --steps=6 --save="$d/sim.lamp" >"$d/sim.log" 2>&1
    status=$?
    check "mpi-$net: 2 ranks on the sim" $status
    [[ $status -eq 0 ]] || tail -n 20 "$d/sim.log"
    grep -q "comm: mpi" "$d/sim.log"
    check "mpi-$net: the mpi communicator ran" $?
    same "mpi-$net" "$d/cpu.lamp" "$d/sim.lamp" "$d/cpu.log" "$d/sim.log"
  done
  # ZeRO-1 on the sim (reduce-scatter, the step over each rank's pieces, all-gather; the
  # ResNet's BatchNorm parameters gathered in fp32): the same checkpoint as 2 unsharded ranks on
  # the cpu.
  for net in mlp resnet; do
    d="$tmp/zero-$net"
    mkdir -p "$d"
    precision=bf16
    LAMP_BIN="$lamp" "$src/scripts/lamp-run" -n 2 "$run" --net=$net --precision=$precision --accum=2 --clip=0.5 \
      --limit=256 --steps=6 --save="$d/cpu.lamp" >"$d/cpu.log" 2>&1
    check "zero-$net: 2 unsharded ranks on the cpu" $?
    LAMP_BIN="$lamp_sim" "$src/scripts/lamp-run" -n 2 "$run" --device=sim --net=$net --precision=$precision --accum=2 \
      --clip=0.5 --limit=256 --steps=6 --zero=1 --save="$d/sim.lamp" >"$d/sim.log" 2>&1
    status=$?
    check "zero-$net: 2 sharded ranks on the sim" $status
    [[ $status -eq 0 ]] || tail -n 20 "$d/sim.log"
    grep -q "shard_optimizer: the optimizer state.* sharded over 2 ranks" "$d/sim.log"
    check "zero-$net: the run was sharded" $?
    same "zero-$net" "$d/cpu.lamp" "$d/sim.lamp" "$d/cpu.log" "$d/sim.log"
  done
else
  echo "mpirun or the mpi plugin is missing: the two-rank cases are skipped"
fi

echo "sim: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
