#!/usr/bin/env bash
# scripts/lamp-run ends its job: a rank stopped with SIGSTOP, SIGTERM or SIGINT to lamp-run,
# and SIGKILL to lamp-run (a guard process ends the job then). Each time lamp-run (or the
# guard) ends every rank and mpirun, and no process of the job is left in the process table.
# Usage: test_launcher_teardown.sh SOURCE_DIR LAMP_BINARY
set -u
src=$1
export LAMP_BIN=$2
timeout=8 # LAMP_COMM_TIMEOUT; the issue's bound is this plus 10 s
passed=0
failed=0
check() { if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi; }
contains() { [[ "$2" == *"$3"* ]]; local r=$?; [[ $r -ne 0 ]] && printf '  expected to contain: %s\n  got: %s\n' "$3" "$2"; check "$1" $r; }
seconds_since() { echo $(( (${EPOCHREALTIME/[.,]/} - $1) / 1000000 )); }
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# Every process of one job carries its tag on its command line (mpirun, the rank shells, the
# ranks, lamp-run and its guard), so the process table tells what is left of it. Zombies have
# no command line: they are not matched.
leftovers() { pgrep -f -- "$tag" | tr '\n' ' '; }
wait_gone() { # limit_s -> 0 once no process of the job is left
  local deadline=$(( $(now_us) + $1 * 1000000 ))
  while [[ -n "$(leftovers)" ]]; do (( $(now_us) < deadline )) || return 1; sleep 0.2; done
}
# A job this test could not end must not go on training: its processes, by pid, get SIGKILL.
sweep() { local p; for p in $(leftovers); do kill -KILL "$p" 2>/dev/null; done; }

# Starts a 2-rank job that trains until stopped; returns once both ranks have trained an epoch.
# set -m: a background job of a script ignores SIGINT unless job control puts it in its own
# process group, and SIGINT is one of the signals under test.
start() {
  tag="lamp-teardown-$$-$RANDOM$RANDOM"
  work=$(mktemp -d)
  set -m
  "$src/scripts/lamp-run" -n 2 --timeout "$timeout" "$src/tests/mpi/lua/train_long.lua" "$work" "$tag" \
    >"$work/out" 2>&1 &
  launcher=$!
  set +m
  local deadline=$(( $(now_us) + 120 * 1000000 ))
  until [[ -s "$work/rank0.pid" && -s "$work/rank1.pid" ]]; do
    if ! kill -0 "$launcher" 2>/dev/null || (( $(now_us) >= deadline )); then
      echo "FAILED: the job did not start:"; cat "$work/out"; failed=$((failed + 1)); return 1
    fi
    sleep 0.2
  done
}

# Waits for lamp-run (its exit status in rc) until limit_s; rc=timeout when it is still running.
wait_launcher() {
  local limit=$1 nap
  sleep "$limit" &
  nap=$!
  wait -n "$launcher" "$nap"
  rc=$?
  if kill -0 "$launcher" 2>/dev/null; then rc=timeout; else kill "$nap" 2>/dev/null; fi
}

finish() { # name: the job left nothing behind; then clean up whatever it did leave
  local left
  left=$(leftovers)
  check "$1: no process of the job is left (found: ${left:-none})" "$([[ -z "$left" ]]; echo $?)"
  sweep
  kill -KILL "$launcher" 2>/dev/null
  wait "$launcher" 2>/dev/null
  rm -rf "$work"
}

# 1. Rank 1 stopped: rank 0 reports it within the timeout, then lamp-run ends the job.
if start; then
  kill -STOP "$(<"$work/rank1.pid")"
  t0=$(now_us)
  wait_launcher $((timeout + 10))
  took=$(seconds_since "$t0")
  out=$(<"$work/out")
  check "stopped rank: lamp-run exits within $((timeout + 10)) s of the stop (rc $rc after $took s)" \
    "$([[ "$rc" != timeout ]]; echo $?)"
  check "stopped rank: lamp-run exits non-zero (rc $rc)" "$([[ "$rc" != timeout && "$rc" != 0 ]]; echo $?)"
  contains "stopped rank: rank 0 names rank 1" "$out" "rank 1 did not reach collective"
  contains "stopped rank: lamp-run says why it ends the job" "$out" "lamp-run: rank 0 reported a failed collective"
  contains "stopped rank: lamp-run names the rank it ends" "$out" \
    "still running: rank 1; ending the job: SIGTERM, then SIGKILL after 3 s"
  finish "stopped rank"
fi

# 2, 3. SIGTERM and SIGINT to lamp-run end the job at once.
for sig in TERM INT; do
  if start; then
    kill -"$sig" "$launcher"
    t0=$(now_us)
    wait_launcher $((timeout + 10))
    took=$(seconds_since "$t0")
    expected=$([[ $sig == TERM ]] && echo 143 || echo 130)
    check "SIG$sig to lamp-run: it exits with $expected within $((timeout + 10)) s (rc $rc after $took s)" \
      "$([[ "$rc" == "$expected" ]]; echo $?)"
    contains "SIG$sig to lamp-run: it says so" "$(<"$work/out")" \
      "lamp-run: SIG$sig received; ending the job: SIGTERM, then SIGKILL after 3 s"
    finish "SIG$sig to lamp-run"
  fi
done

# 4. SIGKILL to lamp-run, with rank 1 stopped too: the guard ends the job, stopped rank included.
if start; then
  kill -STOP "$(<"$work/rank1.pid")"
  kill -KILL "$launcher"
  wait "$launcher" 2>/dev/null
  t0=$(now_us)
  wait_gone $((timeout + 10))
  gone=$?
  took=$(seconds_since "$t0")
  check "SIGKILL to lamp-run: the job is gone within $((timeout + 10)) s (after $took s)" $gone
  contains "SIGKILL to lamp-run: the guard says why it ends the job" "$(<"$work/out")" \
    "lamp-run: the launcher (pid $launcher) died; ending its job (mpirun pid "
  finish "SIGKILL to lamp-run"
fi

echo "launcher teardown: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
