#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, with ASan and UBSan) into build-fuzz/ and
# runs each for LAMP_FUZZ_SECONDS seconds (default 60) from its committed seeds in
# tests/fuzz/corpus/<name>/; new inputs collect in build-fuzz/corpus/<name>/, crashing ones in
# build-fuzz/crashes/<name>/. Usage: scripts/fuzz.sh [harness...] (default: all built).
# Prints executions and executions per second per harness; the last line reports the counts:
# "fuzz: N passed, N failed". Reproduce a crash: build-fuzz/fuzz/fuzz_<name> <crash file>.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || exit 1
seconds=${LAMP_FUZZ_SECONDS:-60}
jobs=${LAMP_JOBS:-$(nproc)}

names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  for f in tests/fuzz/fuzz_*.c; do
    n=$(basename "$f" .c)
    n=${n#fuzz_}
    # The CIFAR-10 reader's harness is built only once core/data/cifar.c exists.
    [[ "$n" == cifar10 && ! -f core/data/cifar.c ]] && { echo "fuzz: skipping cifar10 (no core/data/cifar.c)"; continue; }
    names+=("$n")
  done
fi
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done

# CUDA off: the harnesses do not need it, and nvcc would pick its own host compiler, not clang.
if ! cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release -DLAMP_FUZZ=ON \
       -DLAMP_SANITIZE=address,undefined -DLAMP_CUDA=OFF >/dev/null ||
   ! cmake --build build-fuzz -j "$jobs" --target "${targets[@]}"; then
  echo "fuzz: 0 passed, ${#names[@]} failed (the fuzz build failed)"
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
passed=0
failed=0
summary=()
for n in "${names[@]}"; do
  mkdir -p "build-fuzz/corpus/$n" "build-fuzz/crashes/$n"
  log="build-fuzz/fuzz_$n.log"
  echo "fuzz: running fuzz_$n for ${seconds}s"
  build-fuzz/fuzz/fuzz_$n -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="build-fuzz/crashes/$n/" "build-fuzz/corpus/$n" "tests/fuzz/corpus/$n" >"$log" 2>&1
  status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  line="fuzz_$n: ${execs:-?} executions, ${rate:-?} exec/s, coverage ${cov:-?} edges, corpus $(ls "build-fuzz/corpus/$n" | wc -l) new inputs"
  if [[ $status -eq 0 ]]; then
    passed=$((passed + 1))
    summary+=("$line")
  else
    failed=$((failed + 1))
    summary+=("$line: FAILED (exit $status), see $log and build-fuzz/crashes/$n/")
    tail -60 "$log"
  fi
done
for line in "${summary[@]}"; do echo "$line"; done
echo "fuzz: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
