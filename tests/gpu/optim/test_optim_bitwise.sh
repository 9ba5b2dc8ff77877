#!/usr/bin/env bash
# optim_bitwise as ctest runs it: on a machine with a GPU every optimizer must compare equal
# (exit 0); on one without a driver it must stop with exit 2 and the CUDA runtime's own reason,
# not crash. Usage: test_optim_bitwise.sh OPTIM_BITWISE PLUGIN_DIR
set -u
prog=$1 dir=$2
out=$("$prog" "$dir" 2>&1)
rc=$?
echo "$out"
if [[ $rc == 0 ]]; then
  n=$(grep -c ': bitwise equal$' <<<"$out")
  [[ $n == 3 ]] || { echo "FAIL: exit 0 but $n of 3 optimizers reported equal"; exit 1; }
  echo "PASS: cuda steps equal the cpu steps"
  exit 0
fi
if [[ -e /dev/nvidiactl ]]; then
  echo "FAIL: exit $rc on a machine with a GPU driver"
  exit 1
fi
want="optim_bitwise: no CUDA device: CUDA driver version is insufficient for CUDA runtime version"
if [[ $rc == 2 && $out == "$want" ]]; then
  echo "PASS: no driver here; optim_bitwise stops with the runtime's reason"
  exit 0
fi
echo "FAIL: without a driver, expected exit 2 and '$want', got exit $rc"
exit 1
