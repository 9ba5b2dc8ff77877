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
contains "--version names the ABI" "$out" "(plugin ABI 1.4)"

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
  $(dirname "$lamp")/plugins/optim/nosuch.so"
[[ "$out" != *lamp-optim-nosuch.so* ]]; check "a bare plugin name never reaches dlopen's own search (got: $out)" $?

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
# It lives beside the build (a plugin in a directory anyone else can write, such as /tmp, is
# refused; the build folder and those above it must be safe for the built plugins anyway).
plugdir=$(mktemp -d "$(dirname "$lamp")/cli-plugins.XXXXXX")
trap 'rm -rf "$tmp" "$plugdir"' EXIT
cc -std=c11 -Wall -Wextra -Werror -O2 -fPIC -shared -fvisibility=hidden -I "$src/core/include" \
  "$src/tests/cli/example_plugin/plain_sgd.c" -o "$plugdir/plain_sgd.so"
check "the example plugin builds against core/include alone" $?
out=$("$lamp" plugin-info "$plugdir/plain_sgd.so"); check "plugin-info reads the example plugin" $?
contains "plugin-info shows the example's name" "$out" "name        plain_sgd"
out=$("$lamp" "$src/tests/cli/example_plugin/train_with.lua" "$plugdir/plain_sgd.so" 2>&1)
check "training with the example plugin succeeds" $?
contains "the example plugin is announced" "$out" "optim: plain_sgd 0.1 (ABI 1.4) from $plugdir/plain_sgd.so"

# Loaded by name, a plugin must declare that name: a search-path entry without '?' reaches
# every name.
printf 'local lamp = require "lamp"\nlamp.optim("adam")\n' > "$tmp/adam.lua"
out=$(LAMP_PLUGIN_PATH="$plugdir/plain_sgd.so" "$lamp" "$tmp/adam.lua" 2>&1)
check "a plugin declaring another name exits 1" $(( $? == 1 ? 0 : 1 ))
contains "a plugin declaring another name is named" "$out" \
  "$plugdir/plain_sgd.so: asked for optim 'adam', the plugin declares itself 'plain_sgd'"

# Not a regular file: refused at once, not opened (a FIFO would block the reader forever).
mkfifo "$plugdir/pipe.so"
out=$(timeout 20 "$lamp" plugin-info "$plugdir/pipe.so" 2>&1)
check "plugin-info on a FIFO exits 1 without blocking" $(( $? == 1 ? 0 : 1 ))
contains "plugin-info names the FIFO" "$out" \
  "lamp plugin-info: $plugdir/pipe.so: refusing a plugin that is not a regular file (a FIFO)"
rm -f "$plugdir/pipe.so"

# /tmp is shared (sticky, writable by everyone): a plugin there is refused, by path and in the
# listing, unless LAMP_PLUGIN_UNSAFE_PATHS says otherwise, with a warning each time.
if [[ "$(stat -L -c %a /tmp)" == 1777 ]]; then
  shared=$(mktemp -d /tmp/lamp-cli.XXXXXX)
  trap 'rm -rf "$tmp" "$plugdir" "$shared"' EXIT
  cp "$plugdir/plain_sgd.so" "$shared/"
  refusal="$shared/plain_sgd.so: refusing a plugin in a directory writable by its group and others ($(realpath /tmp), owner $(stat -L -c %U /tmp), mode 1777); fix by moving the plugin out of this shared sticky directory"
  out=$("$lamp" plugin-info "$shared/plain_sgd.so" 2>&1); check "plugin-info in /tmp exits 1" $(( $? == 1 ? 0 : 1 ))
  contains "plugin-info in /tmp says why and what to do" "$out" "lamp plugin-info: $refusal"
  out=$(LAMP_PLUGIN_PATH="$shared/?.so" "$lamp" plugins 2>&1); check "plugins with a refused plugin exits 1" $(( $? == 1 ? 0 : 1 ))
  contains "plugins lists the refused plugin with the reason" "$out" "error: $refusal"
  contains "plugins still lists the safe ones" "$out" "optim      sgd"
  out=$(LAMP_PLUGIN_UNSAFE_PATHS=1 "$lamp" plugin-info "$shared/plain_sgd.so" 2>&1)
  check "LAMP_PLUGIN_UNSAFE_PATHS=1 loads it" $?
  contains "LAMP_PLUGIN_UNSAFE_PATHS=1 warns" "$out" "warning: $shared/plain_sgd.so: loading a plugin in a directory writable by its group and others ($(realpath /tmp), owner $(stat -L -c %U /tmp), mode 1777) because LAMP_PLUGIN_UNSAFE_PATHS is set"
fi

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
