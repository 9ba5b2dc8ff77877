#!/usr/bin/env bash
# Checkpoint folders as a user of the training scripts meets them: a fresh run refuses a --save
# folder holding another run's checkpoints (before training, naming the folder and the newest
# step) and deletes none of them; --start_over moves them into DIR/previous-1, and a later
# --resume takes the new run's newest; --resume of a folder whose checkpoints are all damaged is
# refused, naming each; an empty or missing folder starts afresh; a FIFO given to --resume is refused at
# once.
# Usage: test_checkpoint_folders.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
export OPENBLAS_NUM_THREADS=1

check() { # name, status
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
contains() { # name, haystack, needle
  [[ "$2" == *"$3"* ]]
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected to contain: %s\n  got: %s\n' "$3" "$2"
  check "$1" $r
}
mlp() { # arguments...: a small, fast run of the Fashion-MNIST MLP (8 optimizer steps an epoch)
  timeout 120 "$lamp" "$src/scripts/fmnist_mlp.lua" --limit=256 --batch=32 --hidden=16 "$@" 2>&1
}
equals() { # name, got, expected
  [[ "$2" == "$3" ]]
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected: %s\n  got:      %s\n' "$3" "$2"
  check "$1" $r
}
listing() { (cd "$1" && ls | tr '\n' ' '); }

d="$tmp/ckpt"
out=$(mlp --epochs=2 --save="$d" --save_every=4 --keep=3); check "the first run saves" $?
old_run="ckpt-00000008.lamp ckpt-00000012.lamp ckpt-00000016.lamp lamp.lock lamp.owner "
equals "the first run keeps its 3 newest" "$(listing "$d")" "$old_run"
cp "$d/ckpt-00000008.lamp" "$tmp/old8.lamp"

out=$(mlp --epochs=1 --save="$d" --save_every=3); check "a fresh run into that folder exits 1" $(( $? == 1 ? 0 : 1 ))
contains "the refusal names the folder and the newest step" "$out" \
  "lamp: cannot save into $d: it holds checkpoints of another run (newest: step 16); resume from it (--resume=$d) or start over (--start_over)"
[[ "$out" != *"checkpoint written"* ]]; check "the refused run wrote nothing" $?
equals "the refused run deleted nothing" "$(listing "$d")" "$old_run"
cmp -s "$d/ckpt-00000008.lamp" "$tmp/old8.lamp"; check "the refused run overwrote nothing" $?

out=$(mlp --epochs=1 --save="$d" --save_every=3 --start_over); check "--start_over runs" $?
equals "the new run's checkpoints replace the old ones" "$(listing "$d")" \
  "ckpt-00000003.lamp ckpt-00000006.lamp ckpt-00000008.lamp lamp.lock lamp.owner previous-1 "
equals "the old run moved into previous-1, whole" "$(listing "$d/previous-1")" \
  "ckpt-00000008.lamp ckpt-00000012.lamp ckpt-00000016.lamp lamp.owner "
cmp -s "$d/previous-1/ckpt-00000008.lamp" "$tmp/old8.lamp"; check "the old run's step 8 is its own" $?

out=$(mlp --epochs=2 --resume="$d" --save="$d" --save_every=3); check "a resume of the new run runs" $?
contains "the resume takes the new run's newest, not the old run's step 16" "$out" "resumed from $d/ckpt-00000008.lamp"
equals "the resumed run prunes its own run's checkpoints" "$(listing "$d")" \
  "ckpt-00000011.lamp ckpt-00000014.lamp ckpt-00000016.lamp lamp.lock lamp.owner previous-1 "
out=$(mlp --epochs=3 --resume="$d/previous-1" --save="$d/previous-1"); check "the old run resumes from previous-1" $?
contains "the old run's newest is intact" "$out" "resumed from $d/previous-1/ckpt-00000016.lamp"

e="$tmp/damaged"
mkdir -p "$e"
printf 'garbage' >"$e/ckpt-00000004.lamp"
head -c 100 "$d/ckpt-00000016.lamp" >"$e/ckpt-00000009.lamp"
out=$(mlp --epochs=1 --resume="$e" --save="$e"); check "a resume from a folder of damaged checkpoints exits 1" $(( $? == 1 ? 0 : 1 ))
contains "the refusal says why" "$out" ": cannot resume from $e: its 2 checkpoints are all damaged (move them away to start afresh):"
contains "the refusal names the truncated file" "$out" "  $e/ckpt-00000009.lamp: truncated: the checkpoint is "
contains "the refusal names the file that is no checkpoint" "$out" \
  "  $e/ckpt-00000004.lamp: not a lamp checkpoint (it starts with bytes 67 61 72 62 61 67 65, expected the magic \"LAMPCKPT\")"

mkdir -p "$tmp/empty"
out=$(mlp --epochs=1 --resume="$tmp/empty" --save="$tmp/empty"); check "an empty folder starts afresh" $?
contains "and says so" "$out" "no checkpoint in $tmp/empty: starting afresh"
out=$(mlp --epochs=1 --resume="$tmp/not-yet" --save="$tmp/not-yet"); check "a missing folder starts afresh" $?
contains "and says so too" "$out" "no checkpoint in $tmp/not-yet: starting afresh"

mkfifo "$tmp/fifo.lamp"
out=$(mlp --epochs=1 --resume="$tmp/fifo.lamp"); status=$?
equals "a FIFO given to --resume exits 1 at once (124: it hung)" "$status" 1
contains "the FIFO is named for what it is" "$out" ": $tmp/fifo.lamp is a FIFO, not a regular file"

out=$(mlp --epochs=1 --save="$tmp/x" --start_over=1); check "--start_over=1 exits 1" $(( $? == 1 ? 0 : 1 ))
contains "--start_over takes no value" "$out" "lamp: --start_over takes no value, got --start_over=1"

echo "checkpoint folders: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
