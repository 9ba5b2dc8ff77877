#!/usr/bin/env bash
# Metrics files and lamp plot from the outside: a short run's records; a run killed mid-epoch
# leaves only whole lines, and resumed from its last checkpoint it continues the step numbering
# without a gap or a repeat; lamp plot draws three policies' runs into a PNG of the size asked
# for; and its errors: no gnuplot on PATH, a malformed line, a missing file, a wrong command line.
# jq (scripts/install-deps.sh) reads the files: every line must be one JSON record.
# Usage: test_metrics.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
tmp=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0
failed=0
export OPENBLAS_NUM_THREADS=1
mlp="$src/scripts/fmnist_mlp.lua"

check() { # name, status
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}

for tool in jq gnuplot; do
  command -v $tool >/dev/null || { echo "test_metrics: $tool is missing (scripts/install-deps.sh installs it)"; exit 1; }
done

# Every line one JSON object, the last one ended by a newline.
whole_lines() { # file
  [[ -s $1 && $(tail -c1 "$1" | od -An -tx1 | tr -d ' ') == 0a ]] || return 1
  local values
  values=$(jq -c 'objects' "$1") || return 1
  [[ $(printf '%s\n' "$values" | wc -l) -eq $(wc -l <"$1") ]]
}
steps_of() { jq -r 'select(.type == "step") | .step' "$1"; }
# The width and height in a PNG's header (IHDR, big-endian, at bytes 16..23).
png_size() { # file
  [[ $(head -c8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || { echo "not a PNG"; return; }
  local b
  read -r -a b < <(od -An -tu1 -j16 -N8 "$1" | tr -s ' ' ' ')
  echo "$(((b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]))x$(((b[4] << 24) | (b[5] << 16) | (b[6] << 8) | b[7]))"
}

# ---- a short run: 8 steps and the epoch, evaluated --------------------------------------------
short="$tmp/short.jsonl"
"$lamp" "$mlp" --hidden=32 --limit=1024 --clip=1 --metrics="$short" >"$tmp/short.log" 2>&1
check "short run" $?
whole_lines "$short"; check "short run: whole JSON lines" $?
[[ $(steps_of "$short" | tr '\n' ' ') == "1 2 3 4 5 6 7 8 " ]]; check "short run: steps 1..8" $?
jq -se 'map(select(.type == "step")) | all(.epoch == 1 and (.loss | type) == "number" and (.lr | type) == "number"
        and .loss_scale == 1 and .skipped == false and (.grad_norm | type) == "number" and .samples_per_s > 0)' \
  "$short" >/dev/null
check "short run: every step record has its fields" $?
jq -se 'map(select(.type == "epoch")) | length == 1 and all(.epoch == 1 and .step == 8 and .samples == 1024
        and .train_loss > 0 and .test_loss > 0 and .test_accuracy > 0.3 and .test_samples == 10000 and .elapsed > 0
        and .memory.params.current > 0 and .memory.total.peak >= .memory.total.current)' "$short" >/dev/null
check "short run: the epoch record has the evaluation" $?
[[ $(jq -c 'select(.type != "step") | .type' "$short") == '"epoch"' ]]; check "short run: one epoch record" $?

# ---- killed mid-epoch, then resumed from its last checkpoint ----------------------------------
killed="$tmp/killed.jsonl"
run_args=(--hidden=256,256 --limit=51200 --save="$tmp/ckpt" --save_every=5 --metrics="$killed")
"$lamp" "$mlp" "${run_args[@]}" >"$tmp/killed.log" 2>&1 &
pid=$!
for _ in $(seq 600); do # up to 30 s for 12 steps
  [[ -f $killed && $(grep -c '"type":"step"' "$killed") -ge 12 ]] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null
check "killed while it ran" $?
wait $pid 2>/dev/null
pid=
total=$((51200 / 128))
at_kill=$(steps_of "$killed" | tail -1)
[[ $at_kill -ge 12 && $at_kill -lt $total ]]; check "killed mid-epoch (after step $at_kill of $total)" $?
whole_lines "$killed"; check "killed run: whole JSON lines" $?
[[ $(steps_of "$killed" | tr '\n' ' ') == "$(seq -s ' ' 1 "$at_kill") " ]]; check "killed run: steps 1..$at_kill" $?
"$lamp" plot "$killed" -o "$tmp/killed.png" >/dev/null 2>&1; check "killed run: lamp plot reads every line" $?
cp "$killed" "$tmp/killed.before"

"$lamp" "$mlp" "${run_args[@]}" --resume="$tmp/ckpt" >"$tmp/resumed.log" 2>&1
check "resumed run" $?
from=$(sed -n 's/.*continues after step \([0-9]*\).*/\1/p' "$tmp/resumed.log")
[[ -n $from && $from -le $at_kill && $((from % 5)) -eq 0 ]]; check "resumed from a checkpoint's step ($from)" $?
whole_lines "$killed"; check "resumed run: whole JSON lines" $?
diff <(steps_of "$killed") <(seq 1 $total) >/dev/null; check "resumed run: steps 1..$total, no gap, no repeat" $?
cmp -s <(head -n "$from" "$killed") <(head -n "$from" "$tmp/killed.before")
check "resumed run: the records up to its checkpoint kept" $?
[[ $(jq -c 'select(.type == "epoch") | [.epoch, .step]' "$killed") == "[1,$total]" ]]
check "resumed run: the epoch record" $?
echo "killed after step $at_kill, resumed after step $from"

# ---- three policies, one picture ---------------------------------------------------------------
mkdir -p "$tmp/tour"
"$lamp" "$src/scripts/precision_tour.lua" --nets=mlp --hidden=64 --limit=2560 --metrics="$tmp/tour/" \
  >"$tmp/tour.log" 2>&1
check "precision_tour --metrics" $?
for p in fp32 fp16 bf16; do
  whole_lines "$tmp/tour/mlp-$p.jsonl"; check "tour: mlp-$p.jsonl" $?
done
"$lamp" plot "$tmp"/tour/mlp-fp32.jsonl "$tmp"/tour/mlp-fp16.jsonl "$tmp"/tour/mlp-bf16.jsonl \
  -o "$tmp/tour.png" --size=900x600 >"$tmp/plot.log" 2>&1
check "lamp plot of three runs" $?
[[ $(png_size "$tmp/tour.png") == 900x600 ]]; check "lamp plot: a 900x600 PNG ($(png_size "$tmp/tour.png"))" $?
"$lamp" plot "$short" -o "$tmp/default.png" >/dev/null 2>&1
[[ $(png_size "$tmp/default.png") == 1200x900 ]]; check "lamp plot: 1200x900 by default" $?
[[ ! -s $tmp/plot.log ]]; check "lamp plot: nothing on stderr" $?
[[ -n ${LAMP_METRICS_PLOT_COPY:-} ]] && cp "$tmp/tour.png" "$LAMP_METRICS_PLOT_COPY"

# ---- errors --------------------------------------------------------------------------------------
expect() { # name, expected status, expected stderr, command...
  local name=$1 status=$2 message=$3
  shift 3
  local out
  out=$("$@" 2>&1 >/dev/null)
  local got=$?
  [[ $got -eq $status && $out == "$message" ]]
  check "$name" $?
  [[ $got -eq $status && $out == "$message" ]] || printf '  status %d, expected %d\n  got:      %s\n  expected: %s\n' \
    $got "$status" "$out" "$message"
}
expect "no gnuplot on PATH" 1 "lamp plot: gnuplot was not found on PATH (install the Debian package gnuplot-nox)" \
  env PATH=/nonexistent "$lamp" plot "$short" -o "$tmp/none.png"
[[ ! -e $tmp/none.png ]]; check "no gnuplot: no PNG left behind" $?
printf '{"type":"step","step":1,"loss":2.3}\n{"type":"step","step":2,"loss":\n' >"$tmp/bad.jsonl"
expect "a malformed line" 1 "lamp plot: $tmp/bad.jsonl:2: not JSON: unexpected token near end of file (column 31)" \
  "$lamp" plot "$short" "$tmp/bad.jsonl" -o "$tmp/bad.png"
printf '{"type":"step","step":1,"loss":"high"}\n' >"$tmp/field.jsonl"
expect "a field of the wrong type" 1 "lamp plot: $tmp/field.jsonl:1: \"loss\" must be a number or null, got a string" \
  "$lamp" plot "$tmp/field.jsonl" -o "$tmp/bad.png"
expect "a missing file" 1 "lamp plot: cannot read the metrics file $tmp/missing.jsonl: No such file or directory" \
  "$lamp" plot "$tmp/missing.jsonl" -o "$tmp/bad.png"
expect "no -o" 2 "lamp plot: -o OUT.png is required
usage: lamp plot FILE.jsonl [FILE.jsonl ...] -o OUT.png [--size=WIDTHxHEIGHT]" "$lamp" plot "$short"
expect "a bad --size" 2 "lamp plot: --size must be WIDTHxHEIGHT in pixels, each in [200, 10000] (e.g. 1200x900), got '900'
usage: lamp plot FILE.jsonl [FILE.jsonl ...] -o OUT.png [--size=WIDTHxHEIGHT]" \
  "$lamp" plot "$short" -o "$tmp/x.png" --size=900

echo "metrics: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
