#!/usr/bin/env bash
# ABI 1.4 from the user's side: text and enum options given from Lua in the same options table as
# the numbers, the messages for a wrong value, plugin-info and `lamp plugins` by name, and the
# options they list with type, default and choices. The fixtures are tests/bad_plugins/textopts.c
# and optim13.c (built against 1.3).
# Usage: test_plugin_options.sh LAMP_BINARY SOURCE_DIR
set -u
lamp=$1
src=$2
fixtures="$(dirname "$lamp")/tests/bad_plugins"
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

export LAMP_PLUGIN_PATH="$fixtures/?.so;;"

# plugin-info by name: the kind is found by looking in each.
out=$("$lamp" plugin-info textopts 2>&1); check "plugin-info finds textopts by name" $?
contains "plugin-info by name shows the kind" "$out" "kind        optim"
contains "plugin-info shows the enum with its choices" "$out" \
  "  sign           default exact    enum, one of: exact, smooth  how the sign is taken"
contains "plugin-info shows the string option" "$out" "  tag            default \"none\"   string  a label"
contains "plugin-info still shows the numbers" "$out" "  lr             default 0.1      range [0, 10]  learning rate"
out=$("$lamp" plugin-info sgd 2>&1); check "plugin-info finds a built-in by name" $?
contains "plugin-info by name reads the built-in" "$out" "path        $(realpath "$(dirname "$lamp")/plugins/optim/sgd.so")"
out=$("$lamp" plugin-info nosuch 2>&1); check "plugin-info of an unknown name exits 1" $(( $? == 1 ? 0 : 1 ))
contains "plugin-info lists where it looked, once each" "$out" "lamp plugin-info: no precision, comm or optim plugin 'nosuch' found; tried:
  $fixtures/nosuch.so
  $(dirname "$lamp")/plugins/precision/nosuch.so
  $(dirname "$lamp")/plugins/comm/nosuch.so
  $(dirname "$lamp")/plugins/optim/nosuch.so"
out=$(cd "$fixtures" && "$lamp" plugin-info textopts.so 2>&1); check "plugin-info takes x.so in the current folder as a path" $?
contains "plugin-info x.so reads the file" "$out" "name        textopts"

# lamp plugins NAME...: the named ones only, with their options under each row.
out=$("$lamp" plugins textopts sgd 2>&1); check "plugins by name exits 0" $?
[[ $(grep -c "^optim " <<<"$out") -eq 2 ]]; check "plugins by name lists just those two (got: $out)" $?
contains "plugins lists the options with type, default and choices" "$out" \
  "           options: lr=0.1 (number), sign=exact (enum: exact|smooth), tag=\"none\" (string), fail=no (enum: no|yes)"
out=$("$lamp" plugins textopts nosuch 2>&1); check "plugins with an unknown name exits 1" $(( $? == 1 ? 0 : 1 ))
contains "plugins says which name was not found" "$out" "error: no precision, comm or optim plugin 'nosuch' found; tried:"

# Lua: strings in the same table as the numbers.
cat > "$tmp/options.lua" <<'LUA'
local lamp = require "lamp"
local o = lamp.optim("textopts", { lr = 0.5, sign = "smooth", tag = "run 7" })
print(o:get("lr"), o:get("sign"), o:get("tag"), o:get("fail"))
for _, case in ipairs {
  { sign = "rough" }, { sign = 3 }, { tag = true }, { lr = "fast" }, { mode = "fast" }, { fail = "yes", sign = "exact" },
} do
  local ok, err = pcall(lamp.optim, "textopts", case)
  print(ok, err)
end
LUA
out=$("$lamp" "$tmp/options.lua" 2>&1); check "the Lua options script runs" $?
contains "Lua passes text options and optim:get returns them" "$out" $'0.5\tsmooth\trun 7\tno'
contains "a wrong enum value lists the choices" "$out" $'false\ttextopts: option \'sign\' must be one of: exact, smooth; got \'rough\''
contains "a number for an enum names both types" "$out" \
  $'false\ttextopts: option \'sign\' must be a string, one of: exact, smooth; got the number 3'
contains "a boolean for a string option is refused" "$out" $'false\ttextopts: option \'tag\' must be a string; got true'
contains "text for a number names both types" "$out" \
  $'false\ttextopts: option \'lr\' must be a number in [0, 10], got the string "fast"'
contains "an unknown name lists numbers and texts" "$out" \
  $'false\ttextopts: unknown option \'mode\'; valid options: lr, sign, tag, fail'
contains "the plugin reads what was given" "$out" \
  $'false\ttextopts: lr 0.1, sign \'exact\', tag \'none\', lr as text NULL, nosuch NULL'

# A plugin built against 1.3 knows no text options, whatever lies past its table.
printf 'local lamp = require "lamp"\nprint(pcall(lamp.optim, "optim13", {sign = "exact"}))\n' > "$tmp/old.lua"
out=$("$lamp" "$tmp/old.lua" 2>&1)
contains "a 1.3 plugin has no text options" "$out" $'false\toptim13: unknown option \'sign\'; valid options: lr'

echo "plugin options: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
