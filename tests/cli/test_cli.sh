#!/usr/bin/env bash
# The lamp executable as a user meets it: exit codes and the exact messages of its failures.
# Usage: test_cli.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

check() { # name, condition result
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
contains() { # name, haystack, needle
  [[ "$2" == *"$3"* ]]
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected to contain: %s\n  got: %s\n' "$3" "$2"
  check "$1" $r
}

out=$("$lamp" --version); check "--version exits 0" $?
contains "--version names the ABI" "$out" "(plugin ABI 1.1)"

out=$("$lamp" 2>&1); check "no arguments exits 2" $(( $? == 2 ? 0 : 1 ))
contains "no arguments prints usage" "$out" "usage: lamp SCRIPT.lua"

out=$(env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK "$lamp" plugins); check "plugins exits 0" $?
for p in "precision  fp32" "comm       single" "optim      sgd"; do contains "plugins lists $p" "$out" "$p"; done
[[ "$(head -n 1 <<<"$out")" =~ ^KIND\ +NAME\ +VERSION\ +ABI\ +PROBE\ +PATH$ ]]
check "plugins names its columns, PROBE before PATH (got: $(head -n 1 <<<"$out"))" $?
row() { grep -E "^$1 +$2 " <<<"$3"; } # kind, name, listing
[[ "$(row comm single "$out")" =~ \ 1\.1\ +1\ \(always\ available\)\ +/ ]]
check "plugins shows single's probe (got: $(row comm single "$out"))" $?
if [[ -e "$(dirname "$lamp")/plugins/comm/mpi.so" ]]; then
  contains "plugins shows why mpi cannot run here" "$(row comm mpi "$out")" " 0 (not launched under mpirun ("
  out=$(env -u PMI_SIZE -u PMIX_RANK OMPI_COMM_WORLD_SIZE=2 "$lamp" plugins)
  contains "plugins shows mpi's probe under mpirun" "$(row comm mpi "$out")" \
    " 2 (launched under mpirun (OMPI_COMM_WORLD_SIZE=2)) "
fi

out=$("$lamp" plugin-info "$(dirname "$lamp")/plugins/optim/sgd.so"); check "plugin-info exits 0" $?
contains "plugin-info shows the kind" "$out" "kind        optim"
contains "plugin-info shows parameters" "$out" "momentum       default 0"

out=$("$lamp" plugin-info "$tmp/none.so" 2>&1); check "plugin-info on a missing file exits 1" $(( $? == 1 ? 0 : 1 ))
contains "plugin-info names the missing file" "$out" "lamp plugin-info: plugin '$tmp/none.so' not found; tried:"

printf 'error("boom from script")\n' > "$tmp/boom.lua"
out=$("$lamp" "$tmp/boom.lua" 2>&1); check "an uncaught error exits 1" $(( $? == 1 ? 0 : 1 ))
contains "an uncaught error prints the message" "$out" "lamp: $tmp/boom.lua:1: boom from script"
contains "an uncaught error prints a traceback" "$out" "stack traceback:"

printf 'print(#arg, arg[0] ~= nil, arg[1], arg[2], ...)\n' > "$tmp/args.lua"
out=$("$lamp" "$tmp/args.lua" --x=1 two 2>/dev/null); check "arguments run" $?
contains "arguments arrive in arg and ..." "$out" $'2\ttrue\t--x=1\ttwo\t--x=1\ttwo'

out=$("$lamp" "$tmp/missing.lua" 2>&1); check "a missing script exits 1" $(( $? == 1 ? 0 : 1 ))
contains "a missing script is named" "$out" "cannot open $tmp/missing.lua"

cd "$src" || exit 1
out=$(LAMP_DATA_DIR="$tmp/nodata" "$lamp" scripts/fmnist_mlp.lua 2>&1); check "a missing data set exits 1" $(( $? == 1 ? 0 : 1 ))
contains "a missing data set names the path and the package" "$out" \
  "fashion-mnist: cannot open $tmp/nodata/train-images-idx3-ubyte.gz: No such file or directory (install the Debian package dataset-fashion-mnist, or set LAMP_DATA_DIR)"

out=$("$lamp" scripts/fmnist_mlp.lua --optim=nosuch 2>&1); check "an unknown plugin exits 1" $(( $? == 1 ? 0 : 1 ))
contains "an unknown plugin lists every candidate" "$out" "optim plugin 'nosuch' not found; tried:
  $(dirname "$lamp")/plugins/optim/nosuch.so
  lamp-optim-nosuch.so (dlopen search path)"

out=$("$lamp" scripts/fmnist_mlp.lua --epoch=2 2>&1); check "an unknown script argument exits 1" $(( $? == 1 ? 0 : 1 ))
contains "an unknown script argument lists the valid ones" "$out" "unknown argument --epoch; valid arguments: --accum, --batch, --bucket_mb, --clip, --comm, --compress, --data, --device, --epochs"

out=$("$lamp" scripts/fmnist_mlp.lua --limit=1000 --lr=5000 2>&1); check "a NaN loss exits 1" $(( $? == 1 ? 0 : 1 ))
contains "a NaN loss is a clear error" "$out" "training cannot continue (lower the learning rate or enable clipping)"

# Only the entry symbol leaves a plugin (-fvisibility=hidden): nothing to collide with the host.
for so in "$(dirname "$lamp")"/plugins/*/*.so; do
  syms=$(nm -D --defined-only "$so" | awk '$2 ~ /[TDBR]/ {print $3}' | sort | tr '\n' ' ')
  [[ "$syms" == "lamp_plugin_entry_v1 " ]]
  check "$so exports only lamp_plugin_entry_v1 (found: $syms)" $?
done

# A stranger's plugin: built from the public headers alone with a bare compiler, then used by path.
cc -std=c11 -Wall -Wextra -Werror -O2 -fPIC -shared -fvisibility=hidden -I "$src/core/include" \
  "$src/tests/cli/example_plugin/plain_sgd.c" -o "$tmp/plain_sgd.so"
check "the example plugin builds against core/include alone" $?
out=$("$lamp" plugin-info "$tmp/plain_sgd.so"); check "plugin-info reads the example plugin" $?
contains "plugin-info shows the example's name" "$out" "name        plain_sgd"
out=$("$lamp" "$src/tests/cli/example_plugin/train_with.lua" "$tmp/plain_sgd.so" 2>&1)
check "training with the example plugin succeeds" $?
contains "the example plugin is announced" "$out" "optim: plain_sgd 0.1 (ABI 1.1) from $tmp/plain_sgd.so"

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
