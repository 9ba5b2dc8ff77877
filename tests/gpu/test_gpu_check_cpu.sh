#!/usr/bin/env bash
# scripts/gpu-check.sh on a machine without a GPU, as CI has: the stages it can run there (check_ops
# on the simulated device, the CPU smokes of the optimizer program, the training, the resume and
# the throughput script; where nccl.so is built, its plugin listing and nccl_check's clean stop)
# must pass, the GPU stages must be listed as skipped, and the exit status must be 0. Stage a (lamp devices) is left out: its output depends on the CUDA module's state.
# Stage j's smoke (two ranks on the CPU over mpi) must pass where mpirun and mpi.so are there.
# Where SOURCE_DIR holds a bundle (gpu-bundle/lamp-gpu-bundle.tar.xz, from scripts/gpu-bundle.sh;
# never in CI) the smoke runs again from it, unpacked under BUILD_DIR, over the Open MPI it
# carries in mpi/ (a few seconds).
# Usage: test_gpu_check_cpu.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: this machine has a GPU; scripts/gpu-check.sh runs the GPU stages here"
  exit 77
fi
out=$(OUT='' "$src/scripts/gpu-check.sh" --tree --build="$build" --stages=b,c,d,e,f,g,h,i,j,k,l 2>&1)
rc=$?
echo "$out"
fail=0
expect() { grep -qE "$1" <<<"$out" || { echo "FAIL: no line matching: $1"; fail=1; }; }
[[ $rc == 0 ]] || { echo "FAIL: exit $rc, expected 0"; fail=1; }
expect '^b check_ops \(sim\) +\| ok +\|.* lines ok; on the simulated device'
expect '^e fmnist \(cpu smoke\) +\| ok '
expect '^f resume \(cpu smoke\) +\| ok +\|.*cpu->cpu fp16: loss [0-9]'
expect '^g gpu_mlp \(cpu smoke\) +\| ok '
if [[ -f $build/plugins/comm/nccl.so ]]; then
  expect '^h nccl \(cpu smoke\) +\| ok +\| +[0-9]+s \| lamp plugins: comm nccl 1\.0 1\.4 0 \(the run device is cpu'
  expect '^i nccl_check \(smoke\) +\| ok +\| +[0-9]+s \| nccl_check: no CUDA device: '
  for s in 'h nccl = single' 'i nccl_check'; do expect "^$s +\| skip +\|"; done
fi
expect '^j mpi 2 ranks on 1 GPU +\| skip +\|'
if command -v mpirun >/dev/null && [[ -f $build/plugins/comm/mpi.so ]]; then
  expect '^j mpi \(cpu smoke\) +\| ok +\| +[0-9]+s \| 2 ranks, 1280 samples: [0-9.]+ % via '
fi
expect '^k resnet \(cpu smoke\) +\| ok +\| +[0-9]+s \| 1280 samples, 1 epoch: [0-9.]+ %'
expect '^l resnet sps \(cpu smoke\) +\| ok '
for s in 'c memcheck' 'e fmnist accuracy' 'f resume across' 'g throughput' 'k resnet accuracy' 'l resnet throughput'; do
  expect "^$s +\| skip +\|"
done
expect '^verdict: PASS in [0-9]+ s; skipped: .*\(no GPU: '
bundle=$src/gpu-bundle/lamp-gpu-bundle.tar.xz
if [[ -f $bundle ]]; then
  root=$build/gpu-bundle-check
  out=$(OUT='' "$src/scripts/gpu-check.sh" --bundle="$bundle" --root="$root" --stages=j 2>&1)
  rc=$?
  echo "$out"
  [[ $rc == 0 ]] || { echo "FAIL: from the bundle: exit $rc, expected 0"; fail=1; }
  if [[ -f $root/mpi/env.sh ]]; then
    expect "^j mpi \\(cpu smoke\\) +\\| ok +\\| +[0-9]+s \\| 2 ranks, 1280 samples: [0-9.]+ % via .* over the bundle's Open MPI"
  else
    echo "note: $bundle carries no mpi/ (made before it did, or with --no-mpi)"
    expect '^j mpi 2 ranks on 1 GPU +\| skip +\|'
  fi
  rm -rf "$root"
fi
[[ $fail == 0 ]] && echo "PASS"
exit $fail
