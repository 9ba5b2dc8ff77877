#!/usr/bin/env bash
# examples/optim-muon as the build makes it beside the test plugins (tests/install/test_install_kit.sh
# builds every example out of tree against an installed lamp): inspected, refused where its options
# are wrong, and trained for a few steps of a small MLP by path.
# Usage: test_muon_example.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
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

so="$(dirname "$lamp")/tests/bad_plugins/muon.so"
[[ -f "$so" ]]; check "the build made $so" $?
work=$(mktemp -d "$(dirname "$lamp")/muon-example.XXXXXX")
trap 'rm -rf "$work"' EXIT
syms=$(nm -D --defined-only "$so" | awk '$2 ~ /[TDBR]/ {print $3}' | tr '\n' ' ')
[[ "$syms" == "lamp_plugin_entry_v1 " ]]; check "muon.so exports only its entry (found: $syms)" $?

out=$("$lamp" plugin-info "$so" 2>&1); check "plugin-info reads muon.so" $?
contains "plugin-info shows Muon's enum" "$out" "  scale          default shape    enum, one of: shape, rms"

cat > "$work/refusals.lua" <<'LUA'
local lamp = require "lamp"
print(pcall(lamp.optim, arg[1], { scale = "wide" }))
print(pcall(lamp.optim, arg[1], { ns_steps = 2.5 }))
print(lamp.optim(arg[1], { lr = 0.05, scale = "rms" }):get("scale"))
LUA
out=$("$lamp" "$work/refusals.lua" "$so" 2>&1)
contains "a wrong scale lists the choices" "$out" $'false\tmuon: option \'scale\' must be one of: shape, rms; got \'wide\''
contains "a fractional ns_steps is refused" "$out" $'false\tmuon: ns_steps must be a whole number, got 2.5'
contains "scale reads back" "$out" "rms"

cd "$src" || exit 1
out=$("$lamp" scripts/fmnist_mlp.lua --optim="$so" --lr=0.02 --limit=2560 --hidden=64,64 2>&1)
check "a short run with Muon succeeds" $?
acc=$(sed -n 's/^final test accuracy \([0-9.]*\) %$/\1/p' <<<"$out")
awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 65) }'
check "20 Muon steps of a 64-64 MLP reach 65 % (70.3 here; AdamW 62.4) (got ${acc:-none}; $(tail -n 3 <<<"$out"))" $?

echo "muon example: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
