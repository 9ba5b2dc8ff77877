#!/usr/bin/env bash
# The device is a seam: outside core/backend (the backends), core/include and core/plugin (the
# plugin ABI, which names devices), no core file decides anything by naming the CPU device.
# Host memory is LAMP_HOST (tensor/memory.h, its one definition), never LAMP_CPU.
# Usage: test_device_seam.sh LAMP SOURCE_DIR
set -u
src=$2
found=$(cd "$src" && grep -rnw LAMP_CPU core --include='*.c' --include='*.h' |
  grep -v -e '^core/backend/' -e '^core/include/' -e '^core/plugin/' |
  grep -v '^core/tensor/memory.h:[0-9]*:#define LAMP_HOST LAMP_CPU$')
if [[ -n "$found" ]]; then
  echo "LAMP_CPU outside the backends (decide through the backend table, or say LAMP_HOST for host memory):"
  echo "$found"
  echo "device seam: 0 passed, 1 failed"
  exit 1
fi
echo "device seam: 1 passed, 0 failed"
