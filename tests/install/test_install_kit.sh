#!/usr/bin/env bash
# The plugin author's kit as a stranger meets it: lamp installed into a prefix (cmake --install),
# the prefix moved elsewhere, every example (examples/*) built against the moved prefix alone,
# twice (the pkg-config line of its README with a plain cc; its CMake project with
# find_package(lamp)), then the installed lamp looks at each and trains with each, the
# communicator on two ranks through the installed lamp-run.
# Usage: test_install_kit.sh BUILD_DIR SOURCE_DIR. The source folder is read once, to copy the
# examples; nothing after that names it (the builds are checked for it).
set -u
build=$1
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
# The accuracy of fmnist_mlp.lua's last line, "final test accuracy 77.22 %", at least $3 %.
accuracy_at_least() { # name, output, minimum
  local acc
  acc=$(sed -n 's/^final test accuracy \([0-9.]*\) %$/\1/p' <<<"$2" | tail -n 1)
  [[ -n "$acc" ]] && awk -v a="$acc" -v m="$3" 'BEGIN { exit !(a >= m) }'
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected a final test accuracy >= %s %%, got: %s\n%s\n' "$3" "${acc:-none}" "$(tail -n 5 <<<"$2")"
  check "$1" $r
}

# Inside the build folder. The examples' plugins lie outside the installed lamp's tree, so lamp checks
# every folder above them up to "/": a checkout under a shared folder (a clone in /tmp) fails that
# rule, and then the runs below load them with LAMP_PLUGIN_UNSAFE_PATHS=1 (lamp warns on each load).
work=$(mktemp -d "$build/install-kit.XXXXXX")
trap 'rm -rf "$work"' EXIT
shared_above() { # DIR: a folder above DIR that others may write, or that another user owns
  local d
  d=$(realpath "$1")
  while [[ "$d" != / ]]; do
    d=$(dirname "$d")
    local mode owner
    mode=$(stat -L -c %a "$d") owner=$(stat -L -c %u "$d")
    if (( (8#$mode & 8#022) != 0 )) || [[ "$owner" != 0 && "$owner" != "$(id -u)" ]]; then echo "$d"; return 0; fi
  done
  return 1
}
if unsafe=$(shared_above "$work"); then
  echo "note: $unsafe above the build folder is shared: the examples load with LAMP_PLUGIN_UNSAFE_PATHS=1"
  export LAMP_PLUGIN_UNSAFE_PATHS=1
fi

# ---- install, then move --------------------------------------------------------------------------

out=$(cmake --install "$build" --prefix "$work/installed" 2>&1); r=$?
check "cmake --install into a temporary prefix succeeds" $r
[[ $r -ne 0 ]] && echo "$out"
mv "$work/installed" "$work/moved"
prefix=$work/moved
for f in bin/lamp bin/lamp-run include/lamp/plugin.h lib/lamp/plugins/optim/sgd.so lib/lamp/plugins/comm/single.so \
  lib/lamp/plugins/precision/fp32.so share/lamp/fmnist_mlp.lua share/lamp/lib/training.lua \
  lib/pkgconfig/lamp-plugin.pc lib/cmake/lamp/lampConfig.cmake lib/cmake/lamp/lampConfigVersion.cmake; do
  [[ -e "$prefix/$f" ]]; check "the prefix holds $f" $?
done
if [[ -e "$build/backends/cuda.so" ]]; then
  [[ -e "$prefix/lib/lamp/backends/cuda.so" ]]; check "the prefix holds the CUDA backend module" $?
fi

lamp=$prefix/bin/lamp
out=$("$lamp" plugins 2>&1); check "the moved lamp lists its plugins" $?
contains "the moved lamp finds sgd in its own prefix" "$out" "$prefix/lib/lamp/plugins/optim/sgd.so"
[[ "$out" != *"$build/plugins"* ]]; check "the moved lamp uses none of the build's plugins (got: $out)" $?

# ---- build every example twice -------------------------------------------------------------------

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
unset CMAKE_PREFIX_PATH LAMP_PLUGIN_PATH LAMP_PLUGIN_DIR CPATH C_INCLUDE_PATH
cflags=$(pkg-config --cflags lamp-plugin); check "pkg-config knows lamp-plugin" $?
contains "pkg-config's cflags carry the moved prefix's headers" "$cflags" "-I$prefix/lib/pkgconfig/../../include"
contains "pkg-config's cflags carry what the headers need" "$cflags" "-std=c11 -D_POSIX_C_SOURCE=200809L -fPIC -fvisibility=hidden"
contains "pkg-config's libs link a plugin" "$(pkg-config --libs lamp-plugin)" "-shared -Wl,--no-undefined"
[[ -e "$(pkg-config --variable=plugindir lamp-plugin)/optim/sgd.so" ]]
check "pkg-config's plugindir holds the built-in plugins" $?

examples=()
for dir in "$src"/examples/*/; do examples+=("$(basename "$dir")"); done
[[ ${#examples[@]} -ge 3 ]]; check "there are examples to build (found: ${examples[*]})" $?
mkdir -p "$work/pkg" "$work/cmake"
declare -A name pkg_so cmake_so
for ex in "${examples[@]}"; do
  cp -r "$src/examples/$ex" "$work/pkg/$ex" && cp -r "$src/examples/$ex" "$work/cmake/$ex"
  name[$ex]=$(sed -n 's/^lamp_add_plugin(\([^ )]*\) .*/\1/p' "$work/cmake/$ex/CMakeLists.txt")
  [[ -n "${name[$ex]}" ]]; check "$ex: its CMakeLists.txt calls lamp_add_plugin" $?

  # The README's pkg-config line, as written, with warnings as errors.
  line=$(grep -m 1 -E '^ +cc \$\(pkg-config --cflags --libs lamp-plugin\) ' "$work/pkg/$ex/README.md" | sed 's/^ *//')
  [[ -n "$line" ]]; check "$ex: its README gives the pkg-config line" $?
  out=$(cd "$work/pkg/$ex" && eval "${line/#cc /cc -Wall -Wextra -Werror -O2 }" 2>&1)
  check "$ex: the README's pkg-config line builds it ($line)" $?
  [[ -n "$out" ]] && echo "$out"
  pkg_so[$ex]=$work/pkg/$ex/${name[$ex]}.so

  out=$(cmake -S "$work/cmake/$ex" -B "$work/cmake/$ex/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" 2>&1 &&
    cmake --build "$work/cmake/$ex/build" 2>&1); r=$?
  check "$ex: its CMake project builds with find_package(lamp)" $r
  [[ $r -ne 0 ]] && echo "$out"
  cmake_so[$ex]=$work/cmake/$ex/build/${name[$ex]}.so
  [[ -f "${cmake_so[$ex]}" ]]; check "$ex: lamp_add_plugin made ${name[$ex]}.so" $?
  contains "$ex: find_package found the moved prefix" "$(grep '^lamp_DIR:' "$work/cmake/$ex/build/CMakeCache.txt")" \
    "$prefix/lib/cmake/lamp"
  # (the build folder may lie inside the source tree: what must not appear is its sources)
  ! grep -rqE "$src/(core|plugins|examples|scripts)/" "$work/cmake/$ex/build"
  check "$ex: nothing in its CMake build names a source folder of lamp" $?

  for so in "${pkg_so[$ex]}" "${cmake_so[$ex]}"; do
    syms=$(nm -D --defined-only "$so" 2>/dev/null | awk '$2 ~ /[TDBR]/ {print $3}' | tr '\n' ' ')
    [[ "$syms" == "lamp_plugin_entry_v1 " ]]; check "$so exports only lamp_plugin_entry_v1 (found: $syms)" $?
    out=$("$lamp" plugin-info "$so" 2>&1); check "$ex: plugin-info reads $so" $?
    contains "$ex: plugin-info names the plugin" "$out" "name        ${name[$ex]}"
  done
done

# ---- train with each -----------------------------------------------------------------------------

mlp=$prefix/share/lamp/fmnist_mlp.lua
short=(--limit=6000 --hidden=128)

out=$("$lamp" "$mlp" "${short[@]}" --optim="${pkg_so[optim-lion]}" --lr=1e-3 2>&1)
check "lion (pkg-config build) trains" $?
contains "lion is loaded from its path" "$out" "optim: lion 1.0 (ABI "
accuracy_at_least "lion trains the MLP" "$out" 70

# By name, from LAMP_PLUGIN_PATH, with its own default lr (1e-4 is slow: only a little progress).
out=$(LAMP_PLUGIN_PATH="$work/cmake/optim-lion/build/?.so" "$lamp" "$mlp" "${short[@]}" --optim=lion 2>&1)
check "lion (CMake build) trains by name through LAMP_PLUGIN_PATH" $?
contains "lion is found by name" "$out" "optim: lion 1.0 (ABI "
contains "lion keeps its own default lr" "$out" "fp32 single lion"
accuracy_at_least "lion at its default lr learns something" "$out" 40

precision=${cmake_so[precision-autocast-fp16]}
out=$("$lamp" "$mlp" "${short[@]}" --precision="$precision" 2>&1)
check "autocast-fp16 (CMake build) trains" $?
contains "autocast-fp16 scales the loss and skips nothing" "$out" "scale 1024  skipped 0 of 46 steps"
accuracy_at_least "autocast-fp16 trains the MLP" "$out" 70

# Muon on a small MLP (its Newton-Schulz products make the full-size one slow).
out=$("$lamp" "$mlp" --limit=6000 --hidden=64,64 --optim="${pkg_so[optim-muon]}" --lr=0.02 2>&1)
check "muon (pkg-config build) trains" $?
contains "muon is loaded from its path" "$out" "optim: muon "
accuracy_at_least "muon trains the MLP" "$out" 70

# Two ranks over shared memory against the same two over mpi: the same losses, to the last digit
# printed (a sum of two values does not depend on the order), and no segment left behind.
if [[ -e "$prefix/lib/lamp/plugins/comm/mpi.so" ]] && command -v mpirun >/dev/null; then
  shm_before=$(ls /dev/shm 2>/dev/null | grep -c '^lamp-shm-')
  out=$("$prefix/bin/lamp-run" -n 2 --timeout 60 "$mlp" "${short[@]}" --comm="${pkg_so[comm-shm]}" 2>&1)
  check "shm (pkg-config build) trains on 2 ranks through the installed lamp-run" $?
  contains "shm joins 2 ranks through the bootstrap" "$out" "shm: rank 0 of 2, "
  accuracy_at_least "shm trains the MLP on 2 ranks" "$out" 70
  shm_epoch=$(grep -o '^epoch 1  train loss [0-9.]*  test loss [0-9.]*  test accuracy [0-9.]* %' <<<"$out")
  out=$("$prefix/bin/lamp-run" -n 2 --timeout 60 "$mlp" "${short[@]}" --comm=mpi 2>&1)
  check "the same run over mpi" $?
  mpi_epoch=$(grep -o '^epoch 1  train loss [0-9.]*  test loss [0-9.]*  test accuracy [0-9.]* %' <<<"$out")
  [[ -n "$shm_epoch" && "$shm_epoch" == "$mpi_epoch" ]]
  check "shm and mpi train to the same losses (shm: $shm_epoch; mpi: $mpi_epoch)" $?
  out=$("$prefix/bin/lamp-run" -n 2 --timeout 60 "$mlp" "${short[@]}" --comm="${cmake_so[comm-shm]}" 2>&1)
  check "shm (CMake build) trains on 2 ranks" $?
  shm_after=$(ls /dev/shm 2>/dev/null | grep -c '^lamp-shm-')
  [[ "$shm_after" == "$shm_before" ]]; check "shm leaves no segment in /dev/shm ($shm_before before, $shm_after after)" $?
else
  echo "SKIPPED: the two-rank shm runs (no mpi plugin or no mpirun)"
fi

echo "install kit: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
