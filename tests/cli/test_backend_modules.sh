#!/usr/bin/env bash
# The cuda device's backend module as the user meets it (core/backend/load.c): `lamp devices`,
# lamp.device() and a training script, with the real module and with the loader's fixtures
# (tests/backend_modules, one folder per case, chosen with LAMP_BACKEND_DIR). Each way of failing
# has its own exact message, and the process goes on without the device.
# Usage: test_backend_modules.sh LAMP SOURCE_DIR (ctest sets LAMP_TEST_HAVE_CUDA and
# LAMP_BACKEND_FIXTURE_DIR). Asserted for a machine without a CUDA driver.
set -u
lamp=$1
src=$2
fixtures=${LAMP_BACKEND_FIXTURE_DIR:?run under ctest (LAMP_BACKEND_FIXTURE_DIR)}
tmp=$(mktemp -d)
intree="$fixtures/run.$$" # inside the build tree, which the trust check accepts (mktemp -d is under /tmp)
trap 'rm -rf "$tmp" "$intree"' EXIT
passed=0
failed=0

check() { # name, condition result
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
equal() { # name, got, expected
  [[ "$2" == "$3" ]]
  local r=$?
  [[ $r -ne 0 ]] && printf '  expected: %s\n  got:      %s\n' "$3" "$2"
  check "$1" $r
}
cuda_line() { grep '^cuda: ' <<<"$1"; }

if [[ "${LAMP_TEST_HAVE_CUDA:?run under ctest (LAMP_TEST_HAVE_CUDA)}" == 1 ]]; then
  unavailable="device cuda: no CUDA driver: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)"
else
  unavailable="device cuda: this build has no CUDA backend (it was configured without the CUDA toolkit: install the toolkit and configure with -DLAMP_CUDA=ON)"
fi

# The real module (or its absence), found beside the executable.
out=$("$lamp" devices); check "devices exits 0 without a usable cuda" $?
[[ "$(head -n 1 <<<"$out")" == "cpu: available, 1 device" ]]; r=$?; check "devices lists the cpu first (got: $(head -n 1 <<<"$out"))" $r
[[ "$(sed -n 2p <<<"$out")" =~ ^\ \ cpu:0\ \ .+,\ [0-9]+\.[0-9]\ GiB$ ]]; r=$?; check "devices describes cpu:0 (got: $(sed -n 2p <<<"$out"))" $r
equal "devices says why cuda is not available" "$(cuda_line "$out")" "cuda: not available: $unavailable"

out=$("$lamp" devices extra 2>&1); check "devices with an argument exits 2" $(( $? == 2 ? 0 : 1 ))
equal "devices takes no argument" "$out" "lamp devices: expected no arguments, got 1"

for script in fmnist_mlp fmnist_resnet; do
  out=$("$lamp" "$src/scripts/$script.lua" --device=cuda 2>&1); check "$script --device=cuda exits 1" $(( $? == 1 ? 0 : 1 ))
  equal "$script --device=cuda says why" "$(head -n 1 <<<"$out" | sed 's/^lamp: [^:]*:[0-9]*: //')" "$unavailable"
done

# LAMP_BACKEND_DIR names the only folder looked in.
mkdir -p "$tmp/empty"
out=$(LAMP_BACKEND_DIR="$tmp/empty" "$lamp" devices)
equal "a folder without the module" "$(cuda_line "$out")" \
  "cuda: not available: device cuda: no backend module $tmp/empty/cuda.so (LAMP_BACKEND_DIR is $tmp/empty)"

out=$(LAMP_BACKEND_DIR="$fixtures/needs_library" "$lamp" devices)
equal "a library the module needs is named" "$(cuda_line "$out")" \
  "cuda: not available: device cuda: the CUDA library liblamp_absent.so.1 was not found (the backend module $fixtures/needs_library/cuda.so needs it: install the CUDA libraries, or add the folder holding liblamp_absent.so.1 to LD_LIBRARY_PATH)"

out=$(LAMP_BACKEND_DIR="$fixtures/old_interface" "$lamp" devices)
[[ "$(cuda_line "$out")" =~ ^cuda:\ not\ available:\ device\ cuda:\ the\ backend\ module\ was\ built\ for\ backend\ interface\ version\ ([0-9]+)\ .*\ but\ lamp\ has\ version\ ([0-9]+)\ .*\;\ rebuild\ lamp\ and\ its\ backend\ modules\ from\ one\ tree$ ]] &&
  (( BASH_REMATCH[1] + 1 == BASH_REMATCH[2] ))
r=$?; check "an older interface is refused, naming both versions (got: $(cuda_line "$out"))" $r

out=$(LAMP_BACKEND_DIR="$fixtures/no_entry" "$lamp" devices)
equal "a shared object without the entry" "$(cuda_line "$out")" \
  "cuda: not available: device cuda: $fixtures/no_entry/cuda.so is not a lamp backend module (it exports no lamp_backend_module_open)"

# The module's own refusal (the real one's no-device case) follows "device cuda: ", kept for the run.
printf 'local lamp = require "lamp"\nfor _ = 1, 2 do local ok, e = pcall(lamp.device, "cuda:1"); print(e) end\nprint(#lamp.devices())\n' >"$tmp/twice.lua"
out=$(LAMP_FAKE_CUDA_FAIL="no CUDA device: no CUDA-capable device is detected (cudaErrorNoDevice)" \
  LAMP_BACKEND_DIR="$fixtures/fake" "$lamp" "$tmp/twice.lua" 2>&1)
expected="device cuda: no CUDA device: no CUDA-capable device is detected (cudaErrorNoDevice)"
equal "the module's refusal, asked twice" "$out" "$expected"$'\n'"$expected"$'\n'"1"

# A module anyone else could replace is refused like a plugin.
mkdir -p "$intree" && cp "$fixtures/fake/cuda.so" "$intree/cuda.so" && chmod 0775 "$intree/cuda.so"
out=$(LAMP_BACKEND_DIR="$intree" "$lamp" devices)
equal "a group-writable module is refused" "$(cuda_line "$out")" \
  "cuda: not available: device cuda: $intree/cuda.so: refusing a plugin file writable by its group (owner $(id -un), mode 0775); fix with chmod g-w $intree/cuda.so"

# Without LAMP_BACKEND_DIR, the module beside the executable comes before the build's.
mkdir -p "$intree/bin/backends" && cp "$lamp" "$intree/bin/lamp" && cp "$fixtures/fake/cuda.so" "$intree/bin/backends/"
out=$(env -u LAMP_BACKEND_DIR "$intree/bin/lamp" devices)
equal "the module beside the executable" "$(cuda_line "$out")" \
  "cuda: available, 2 devices (backend module $intree/bin/backends/cuda.so)"

# A module that loads: the devices it has.
out=$(LAMP_BACKEND_DIR="$fixtures/fake" "$lamp" devices)
equal "a loaded module's devices" "$(grep -A2 '^cuda: ' <<<"$out")" \
  "cuda: available, 2 devices (backend module $fixtures/fake/cuda.so)"$'\n'"  cuda:0  Fake GPU 0, 1.0 GiB, compute capability 9.0"$'\n'"  cuda:1  Fake GPU 1, 2.0 GiB, compute capability 9.1"
out=$(LAMP_BACKEND_DIR="$fixtures/fake" "$lamp" "$src/tests/cli/device_module.lua" 2>&1)
equal "lamp.device and lamp.devices with a loaded module" "$out" "device module ok"

# Under a launcher, "cuda" starts at the local rank's GPU (modulo the count); "cuda:N" still wins.
echo 'print(require("lamp").device(arg[1] or "cuda").ordinal)' >"$tmp/ordinal.lua"
ordinal() { env -u OMPI_COMM_WORLD_LOCAL_RANK -u MPI_LOCALRANKID -u LOCAL_RANK -u SLURM_LOCALID \
  LAMP_BACKEND_DIR="$fixtures/fake" "$@" "$lamp" "$tmp/ordinal.lua" 2>&1; }
equal "no launcher: cuda:0" "$(ordinal)" "0"
equal "Open MPI local rank 1: cuda:1" "$(ordinal env OMPI_COMM_WORLD_LOCAL_RANK=1)" "1"
equal "torchrun local rank 3 of a 2-GPU host: cuda:1" "$(ordinal env LOCAL_RANK=3)" "1"
equal "Slurm local rank 2: cuda:0" "$(ordinal env SLURM_LOCALID=2)" "0"
out=$(env OMPI_COMM_WORLD_LOCAL_RANK=1 LAMP_BACKEND_DIR="$fixtures/fake" "$lamp" "$tmp/ordinal.lua" cuda:0 2>&1)
equal "an explicit cuda:0 under local rank 1" "$out" "0"

echo "backend modules: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
