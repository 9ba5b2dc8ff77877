#!/usr/bin/env bash
# nccl_check as ctest runs it: on a machine with a GPU every check must pass (exit 0); on one
# without a driver it must stop with exit 2 and the CUDA runtime's own reason, not crash or hang.
# Usage: test_nccl_check.sh NCCL_CHECK NCCL_SO
set -u
prog=$1 so=$2
out=$("$prog" "$so" 2>&1)
rc=$?
echo "$out"
if [[ $rc == 0 ]]; then
  grep -q '^nccl_check: all ok$' <<<"$out" || { echo "FAIL: exit 0 without 'all ok'"; exit 1; }
  echo "PASS: the nccl communicator works on this GPU"
  exit 0
fi
if [[ -e /dev/nvidiactl ]]; then
  echo "FAIL: exit $rc on a machine with a GPU driver"
  exit 1
fi
want="nccl_check: no CUDA device: CUDA driver version is insufficient for CUDA runtime version"
if [[ $rc == 2 && $out == "$want" ]]; then
  echo "PASS: no driver here; nccl_check stops with the runtime's reason"
  exit 0
fi
echo "FAIL: without a driver, expected exit 2 and '$want', got exit $rc"
exit 1
