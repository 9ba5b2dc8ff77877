#!/usr/bin/env bash
# The GPU check: everything that needs a GPU, in one run of under 8 minutes, each stage
# under its own timeout, one table row per stage and a verdict last.
#
# The GPU machine has no package registry (no Lua, OpenBLAS, data set there), so the check runs
# from the bundle scripts/gpu-bundle.sh made on the CPU machine after a build with CUDA:
#
#   scripts/gpu-check.sh                   unpack gpu-bundle/lamp-gpu-bundle.tar.xz, check
#   scripts/gpu-check.sh --bundle=FILE     another archive
#   scripts/gpu-check.sh --tree            this checkout's build/ in place (a machine with the deps;
#                                          --build=DIR for another build folder)
#   options: --root=DIR (where to unpack; default /opt/lamp-gpu as root, else ~/.cache/lamp-gpu;
#            not under /tmp: plugins load only from folders no one else can write),
#            --rebuild-cuda (rebuild build/backends/cuda.so there with the local nvcc; done anyway
#            when the bundle has none and nvcc is found), --stages=a,b,... (default all),
#            --budget=SECONDS (default 470: the whole run's limit)
#   Through the device tool: carry ["gpu-bundle"], timeout_s 600, command scripts/gpu-check.sh.
#   Every stage's log is in /tmp/lamp-gpu-check/logs, and with OUT set in $OUT/gpu-check-logs.tar.gz
#   (the table in $OUT/gpu-check-table.txt).
#
# Stages:
#   a  `lamp devices`: the cuda backend loads and sees the GPU
#   b  tests/gpu/check_ops on cuda with the full shapes (every backend kernel against the CPU,
#      each device result computed twice), then two runs with the small shapes whose digests of
#      all device results must be equal (run-to-run determinism across processes)
#   c  check_ops (small shapes) under compute-sanitizer memcheck
#   d  the optimizers' CUDA steps against their CPU steps, bit for bit (optim_bitwise; the path
#      from LAMP_OPTIM_BITWISE, default build/tests/gpu/optim_bitwise; skipped where not built)
#   e  one epoch of scripts/fmnist_mlp.lua on the GPU under fp32, fp16 and bf16: each >= 86.0 %
#      test accuracy and within 0.5 points of the CPU run of the same; skipped steps and scale
#   f  a checkpoint saved on the GPU resumed on the CPU (fp16) and the reverse (bf16): the
#      resumed run trains on with a finite loss
#   g  throughput against PyTorch eager on the same GPU (scripts/bench/gpu_mlp.lua and its twin
#      scripts/bench/torch_gpu_mlp.py): the reference MLP at batch 128 and 784-4096-4096-10 at
#      batch 4096, fp32 (no TF32 either side), bf16, fp16; targets: lamp fp32 >= 1.0x PyTorch on
#      both, and on the large one lamp bf16 and fp16 >= 2x lamp fp32 and >= 1.0x PyTorch autocast
#   h  NCCL at world size 1: one epoch of scripts/fmnist_mlp.lua over 10240 samples on
#      the GPU with --comm=nccl and with --comm=single; the two checkpoints must hold the same
#      tensors and state bit for bit (lamp.checkpoint.info: every line but run.comm) and print the
#      same losses and accuracy
#   i  tests/gpu/nccl/nccl_check on nccl.so: a peer that never creates its
#      communicator (the other fails at its 5 s deadline, aborts and says so), more ranks than
#      GPUs, every collective on device and host buffers, enqueue ordering, the watchdog (an
#      all-reduce held past its 2 s deadline is reported by poll, the communicator aborted)
#   j  two ranks on one GPU over the mpi communicator (host staging): scripts/lamp-run
#      -n 2 (mpirun itself where lamp-run's setsid, ps or pkill is missing) trains one epoch within
#      0.5 points of one rank (stage e's fp32 run, else its own); needs mpirun and mpi.so. The GPU
#      machine has no MPI: the bundle carries the CPU machine's Open MPI 4 in mpi/ with mpi.so,
#      and its mpi/env.sh (sourced here, before any stage) points Open MPI and PMIx at that copy
#      (OPAL_*, PMIX_*), puts it first on PATH and LD_LIBRARY_PATH and selects ob1 over self and
#      vader. Without a GPU: two ranks train 1280 samples on the CPU over the same MPI (smoke)
#   k  3 epochs of scripts/fmnist_resnet.lua on the GPU under fp32 and bf16, each
#      >= 89.5 % (cuDNN convolutions, lamp's BatchNorm and pooling kernels)
#   l  the ResNet's throughput against PyTorch eager (cuDNN) at batch 128 and 512, fp32
#      (no TF32 either side) and bf16 autocast, lamp with its micro-steps replayed as CUDA graphs
#      (the default) and without (--graphs=off): lamp (graphs) >= 1.0x PyTorch at each, lamp bf16
#      >= 1.3x lamp fp32 at 512; the graphs' gain is printed beside (gpu_mlp.lua --model=resnet and
#      torch_gpu_mlp.py --model resnet). The graphs must have been replayed, and reach the eager
#      run's loss to the last printed digit (the same work, replayed).
#   libnccl.so.2 for h and i: $LAMP_NCCL_LIBRARY, else the dynamic loader's, the toolkit's, or the
#   one in the Python environment's nvidia wheels (exported as LAMP_NCCL_LIBRARY).
#
# The CPU accuracies of stage e come from cpu_reference.txt, which gpu-bundle.sh writes on the
# CPU machine by running this script with --write-cpu-reference=FILE (same binary, same
# arguments, --device=cpu): that keeps about a minute of CPU training off the GPU machine's short
# lease. The CPU results depend only on the OpenBLAS kernel, which moves the accuracy by
# hundredths of a point, far inside the 0.5 allowed. Without the file (--tree), the CPU runs are
# made here, each under its own timeout.
#
# Without a GPU (no nvidia-smi, or `lamp devices` says cuda is not available) the stages that can
# run do (devices, the bundle, check_ops on the simulated device) with CPU smokes of d-g (the
# optimizer program CPU against CPU, short trainings, a save and resume, the throughput script),
# which prove the script and the bundle before a GPU is spent on them; the GPU stages are listed
# as skipped with the reason (tests/gpu/test_gpu_check_cpu.sh holds this in CI).
# Exit status: 0 when no stage that ran failed, 1 otherwise, 2 on usage.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle="$repo/gpu-bundle/lamp-gpu-bundle.tar.xz"
tree=0
root=""
rebuild=0
stages="a,b,c,d,e,f,g,h,i,j,k,l"
budget=470
reference_out=""
build_dir=""
# Arguments of the accuracy runs, on the GPU and on the CPU alike (the script's defaults: one
# epoch, seed 0, batch 128).
mlp_args=(--epochs=1 --seed=0)

usage() {
  echo "usage: scripts/gpu-check.sh [--bundle=FILE | --tree [--build=DIR]] [--root=DIR] [--rebuild-cuda] [--stages=a,b,...] [--budget=S]" >&2
  echo "       scripts/gpu-check.sh --tree --write-cpu-reference=FILE" >&2
  exit 2
}

for a in "$@"; do
  case "$a" in
    --bundle=*) bundle=${a#--bundle=} ;;
    --tree) tree=1 ;;
    --build=*) build_dir=$(cd "${a#--build=}" 2>/dev/null && pwd) || { echo "gpu-check: no build folder ${a#--build=}" >&2; exit 2; } ;;
    --root=*) root=${a#--root=} ;;
    --rebuild-cuda) rebuild=1 ;;
    --stages=*) stages=${a#--stages=} ;;
    --budget=*) budget=${a#--budget=} ;;
    --write-cpu-reference=*) reference_out=${a#--write-cpu-reference=} ;;
    *) echo "gpu-check: unknown argument $a" >&2; usage ;;
  esac
done
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget must be whole seconds, got $budget" >&2; usage; }
[[ $stages =~ ^[a-l](,[a-l])*$ ]] || { echo "gpu-check: --stages takes letters a-l separated by commas, got $stages" >&2; usage; }

umask 022
started=$SECONDS
# Logs and checkpoints in a fresh folder; at the end, with OUT set (the device tool), the logs go
# to $OUT as one archive (that tool brings back only a few files) beside the table.
work=/tmp/lamp-gpu-check
logs=$work/logs
if ! { rm -rf "$work" && mkdir -p "$logs" "$work/ckpt"; }; then
  echo "gpu-check: cannot make $work" >&2
  exit 1
fi

# ---- the table -----------------------------------------------------------------------------------
rows=()
failed=()
skipped=()
# row STAGE RESULT SECONDS DETAIL: RESULT is ok, FAIL, MISS (a throughput target), skip, info.
row() {
  rows+=("$(printf '%-22s | %-5s | %4ss | %s' "$1" "$2" "$3" "$4")")
  case "$2" in
    FAIL | MISS) failed+=("$1") ;;
    skip) skipped+=("$1") ;;
  esac
  printf '== %-22s %-5s %ss  %s\n' "$1" "$2" "$3" "$4"
}
left() { echo $((budget - (SECONDS - started))); }
# want LETTER NAME: the stage was asked for and there is time left for it (else its skip row).
want() {
  [[ ,$stages, == *,$1,* ]] || return 1
  (($(left) >= 20)) && return 0
  row "$2" skip 0 "out of time (budget $budget s)"
  return 1
}

# run_stage NAME LIMIT CMD...: runs CMD under `timeout`, at most LIMIT seconds and never past the
# budget; output to $logs/NAME.log. Returns CMD's status (124: timed out; 125: no time left).
run_stage() {
  local name=$1 limit=$2
  shift 2
  local t
  t=$(left)
  ((t -= 5))
  ((t > limit)) && t=$limit
  if ((t < 5)); then
    echo "(no time left in the budget of ${budget} s)" >"$logs/$name.log"
    return 125
  fi
  timeout --kill-after=5 "$t" "$@" >"$logs/$name.log" 2>&1
}
# The last lines of a stage's log, indented, for a failure's context.
tail_log() { sed 's/^/    /' "$logs/$1.log" | tail -n "${2:-15}"; }

# ---- where lamp is: the bundle unpacked, or this checkout's build tree ---------------------------
bundle_detail=""
unpack() {
  if [[ -z $root ]]; then
    root="$HOME/.cache/lamp-gpu"
    [[ $(id -u) == 0 ]] && mkdir -p /opt/lamp-gpu 2>/dev/null && root=/opt/lamp-gpu
  fi
  # Plugins and backend modules load only from folders no one else can write (core/plugin/search.c):
  # a fresh folder outside /tmp, written with umask 022.
  { rm -rf "$root" && mkdir -p "$root"; } || return 1
  local t0=$SECONDS
  if command -v xz >/dev/null; then
    tar -xf "$bundle" -C "$root" || return 1
  else # no xz binary: Python's tarfile reads xz through its lzma module
    "${PYTHON:-python3}" - "$bundle" "$root" <<'PY' || return 1
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    if hasattr(tarfile, "data_filter"):
        t.extractall(sys.argv[2], filter="data")
    else:
        t.extractall(sys.argv[2])
PY
  fi
  chmod -R go-w "$root"
  bundle_detail="$(du -m "$bundle" | cut -f1) MiB unpacked into $root in $((SECONDS - t0)) s"
}

[[ -n $build_dir && $tree == 0 ]] && { echo "gpu-check: --build=DIR goes with --tree" >&2; usage; }
if [[ $tree == 1 ]]; then
  root=$repo
elif [[ -f $bundle ]]; then
  if ! unpack; then
    row "bundle" FAIL 0 "cannot unpack $bundle into $root"
  fi
else
  if [[ -x $repo/build/lamp ]]; then
    echo "gpu-check: no bundle at $bundle: using this checkout's build tree ($repo/build)"
    root=$repo
    tree=1
  else
    echo "gpu-check: no bundle at $bundle and no build tree at $repo/build (make one with scripts/gpu-bundle.sh)" >&2
    exit 1
  fi
fi

bin=${build_dir:-$root/build}
lamp=$bin/lamp
check_ops=$bin/tests/gpu/check_ops
optim_bitwise=${LAMP_OPTIM_BITWISE:-$bin/tests/gpu/optim_bitwise}
nccl_check=$bin/tests/gpu/nccl_check
scripts=$root/scripts
export LAMP_PLUGIN_DIR=$bin/plugins
export LAMP_BACKEND_DIR=$bin/backends
[[ -d $root/data/fashion-mnist ]] && export LAMP_DATA_DIR=$root/data/fashion-mnist
# OpenBLAS threads for the CPU side (check_ops' references, the CPU runs): all the cores.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$(nproc)}

# The bundle's libraries, then CUDA's: the toolkit's, and where it lacks cuBLAS, the one in the
# Python environment's nvidia wheels (where PyTorch gets it).
libpath=""
[[ -d $root/lib ]] && libpath=$root/lib
cuda_home=${CUDA_HOME:-/usr/local/cuda}
for d in "$cuda_home/lib64" "$cuda_home/lib"; do [[ -d $d ]] && libpath=${libpath:+$libpath:}$d; done
if ! compgen -G "$cuda_home/lib*/libcublas.so*" >/dev/null && command -v "${PYTHON:-python3}" >/dev/null; then
  site=$("${PYTHON:-python3}" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for s in $site; do
    for d in "$s"/nvidia/*/lib; do [[ -d $d ]] && libpath=${libpath:+$libpath:}$d; done
  done
fi
# PyTorch brings its own libraries: it gets the machine's library path, not the bundle's.
python_libpath=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=${libpath}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -d $cuda_home/bin ]] && export PATH=$PATH:$cuda_home/bin
# The bundle's Open MPI (stage j; mpi.so needs its libmpi in every stage, where `lamp` lists the
# plugins): first on PATH and LD_LIBRARY_PATH, its folders in OPAL_* and PMIX_*.
mpi_from=""
if [[ $tree == 0 && -f $root/mpi/env.sh ]]; then
  # shellcheck source=/dev/null
  . "$root/mpi/env.sh"
  mpi_from="the bundle's $("$root/mpi/bin/mpirun" --version 2>/dev/null | head -1 | sed 's/^mpirun (\(.*\)) /\1 /')"
fi
# libnccl.so.2 (stages h, i): the nccl plugin opens $LAMP_NCCL_LIBRARY, else the loader's.
find_nccl() {
  local d s
  for d in ${LD_LIBRARY_PATH//:/ } "$cuda_home/lib64" "$cuda_home/lib"; do
    [[ -f $d/libnccl.so.2 ]] && { echo "$d/libnccl.so.2"; return; }
  done
  ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" { print $NF; exit }' | grep . && return
  command -v "${PYTHON:-python3}" >/dev/null || return
  for s in $("${PYTHON:-python3}" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$s"/nvidia/*/lib; do [[ -f $d/libnccl.so.2 ]] && { echo "$d/libnccl.so.2"; return; }; done
  done
}
[[ -n ${LAMP_NCCL_LIBRARY:-} ]] || LAMP_NCCL_LIBRARY=$(find_nccl)
[[ -n $LAMP_NCCL_LIBRARY ]] && export LAMP_NCCL_LIBRARY

# ---- stage e's accuracy runs (shared with --write-cpu-reference) ---------------------------------
# mlp_run DEVICE PRECISION LOGNAME LIMIT [ARGS...]: one epoch (ARGS added); prints "accuracy
# skipped scale" ("-" where the run printed none); returns the run's status.
mlp_run() {
  local device=$1 p=$2 name=$3 limit=$4
  shift 4
  (cd "$root" && run_stage "$name" "$limit" "$lamp" scripts/fmnist_mlp.lua --device="$device" --precision="$p" "${mlp_args[@]}" "$@")
  local rc=$?
  local acc skipped scale
  acc=$(sed -n 's/^final test accuracy \([0-9.]*\) %.*/\1/p' "$logs/$name.log" | tail -1)
  skipped=$(sed -n 's/.*skipped \([0-9]*\) of [0-9]* steps.*/\1/p' "$logs/$name.log" | tail -1)
  scale=$(sed -n 's/.*  scale \([0-9.e+]*\)  skipped.*/\1/p' "$logs/$name.log" | tail -1)
  echo "${acc:--} ${skipped:--} ${scale:--}"
  return $rc
}

if [[ -n $reference_out ]]; then
  [[ $tree == 1 ]] || { echo "gpu-check: --write-cpu-reference runs on the build tree (--tree)" >&2; exit 2; }
  {
    echo "# CPU accuracies of scripts/fmnist_mlp.lua ${mlp_args[*]} --device=cpu, for scripts/gpu-check.sh stage e"
    echo "# $("$lamp" --version 2>/dev/null | head -1); $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$reference_out.tmp"
  for p in fp32 fp16 bf16; do
    read -r acc _ _ < <(mlp_run cpu "$p" "cpu-reference-$p" 900)
    if [[ $acc == - ]]; then
      echo "gpu-check: the CPU run under $p printed no accuracy:" >&2
      tail_log "cpu-reference-$p" >&2
      rm -f "$reference_out.tmp"
      exit 1
    fi
    echo "$p $acc" >>"$reference_out.tmp"
    echo "cpu $p: $acc %"
  done
  mv "$reference_out.tmp" "$reference_out"
  exit 0
fi

# ---- is there a GPU? -----------------------------------------------------------------------------
gpu=1
no_gpu_reason=""
if ! command -v nvidia-smi >/dev/null; then
  gpu=0
  no_gpu_reason="no nvidia-smi on this machine"
elif ! nvidia-smi -L >/dev/null 2>&1; then
  gpu=0
  no_gpu_reason="nvidia-smi finds no GPU: $(nvidia-smi -L 2>&1 | head -1)"
else
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader | sed 's/^/gpu: /'
fi
echo "gpu-check: lamp from $root; logs in $logs"

# A bundle without the CUDA module (packed with --allow-missing-cuda), or --rebuild-cuda: build
# build/backends/cuda.so here from this checkout's sources with the local nvcc, with the flags of
# core/backend/cuda/CMakeLists.txt (kept in step by hand: C11 for .c; C++17, sm_90 and
# --fmad=false for .cu; cudart static, cuBLAS shared, only the entry exported).
rebuild_cuda() {
  local src=$repo/core/backend/cuda out=$bin/backends obj
  obj=$(mktemp -d)
  mkdir -p "$out" || return 1
  local inc=(-I"$repo/core" -I"$repo/core/include" -I"$cuda_home/include")
  local defs=(-D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE)
  local f objs=()
  for f in "$src"/*.c; do
    [[ -e $f ]] || continue
    "${CC:-cc}" -std=c11 -O2 -fPIC -fvisibility=hidden "${defs[@]}" "${inc[@]}" -c "$f" -o "$obj/$(basename "$f").o" || return 1
    objs+=("$obj/$(basename "$f").o")
  done
  for f in "$src"/*.cu; do
    [[ -e $f ]] || continue
    nvcc -std=c++17 -O2 -arch=sm_90 --fmad=false -Xcompiler=-fPIC,-fvisibility=hidden "${defs[@]}" "${inc[@]}" -c "$f" -o "$obj/$(basename "$f").o" || return 1
    objs+=("$obj/$(basename "$f").o")
  done
  ((${#objs[@]})) || { echo "no sources in $src"; return 1; }
  nvcc -shared -cudart=static -Xlinker=--no-undefined -o "$out/cuda.so" "${objs[@]}" -L"$cuda_home/lib64" -lcublas -lm || return 1
  chmod go-w "$out/cuda.so"
  rm -rf "$obj"
}

# ---- the stages ----------------------------------------------------------------------------------

# The bundle (or the tree): what is there, and whether this machine's C library is new enough.
if [[ $tree == 1 ]]; then
  if [[ -f $bundle ]]; then
    row "bundle" info 0 "build tree in place: $bin (bundle $bundle: $(du -m "$bundle" | cut -f1) MiB, not used)"
  else
    row "bundle" info 0 "build tree in place: $bin (no bundle at $bundle)"
  fi
elif [[ -n $bundle_detail ]]; then
  need=$(sed -n 's/^glibc needed: //p' "$root/MANIFEST" 2>/dev/null)
  have=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]*\.[0-9]*$')
  detail="$bundle_detail; needs glibc ${need:-?}, this machine has ${have:-?}"
  size=$(du -m "$bundle" | cut -f1)
  if ((size > 60)); then row "bundle" FAIL 0 "$detail: over the 60 MiB limit"; else row "bundle" ok 0 "$detail"; fi
fi

if [[ $gpu == 1 && -x $lamp ]] && { [[ $rebuild == 1 ]] || [[ ! -e $bin/backends/cuda.so ]]; }; then
  t0=$SECONDS
  if ! command -v nvcc >/dev/null; then
    row "rebuild cuda.so" FAIL 0 "no nvcc on PATH (nor in $cuda_home/bin)"
  elif rebuild_cuda >"$logs/rebuild.log" 2>&1; then
    row "rebuild cuda.so" ok $((SECONDS - t0)) "built $bin/backends/cuda.so with $(nvcc --version | tail -1)"
  else
    row "rebuild cuda.so" FAIL $((SECONDS - t0)) "see $logs/rebuild.log"
    tail_log rebuild
  fi
fi

# a: the backend loads and sees the GPU.
if want a "a devices"; then
  t0=$SECONDS
  run_stage devices 30 "$lamp" devices
  rc=$?
  cuda_line=$(grep '^cuda' "$logs/devices.log" | head -1)
  dev_line=$(grep '^  cuda:0' "$logs/devices.log" | head -1 | sed 's/^ *//')
  if [[ $rc != 0 ]]; then
    row "a devices" FAIL $((SECONDS - t0)) "lamp devices: exit $rc"
    tail_log devices
  elif [[ $cuda_line == "cuda: available"* ]]; then
    row "a devices" ok $((SECONDS - t0)) "${dev_line:-$cuda_line}"
  elif [[ $gpu == 1 ]]; then
    row "a devices" FAIL $((SECONDS - t0)) "${cuda_line:-no cuda line in lamp devices}"
  else
    row "a devices" info $((SECONDS - t0)) "${cuda_line:-no cuda line in lamp devices}"
  fi
fi
if [[ $gpu == 1 && ${cuda_line:-} == "cuda: not available"* ]]; then
  gpu=0
  no_gpu_reason="lamp: ${cuda_line#cuda: }"
fi
skip_no_gpu() { row "$1" skip 0 "$no_gpu_reason"; }

# b: every kernel against the CPU, and determinism.
digest_of() { sed -n 's/.*digest \([0-9a-f]*\)$/\1/p' "$logs/$1.log" | tail -1; }
lines_of() { sed -n 's/^check_ops: \([0-9]* of [0-9]* lines ok\).*/\1/p' "$logs/$1.log" | tail -1; }
if want b "b check_ops"; then
  t0=$SECONDS
  if [[ ! -x $check_ops ]]; then
    row "b check_ops" FAIL 0 "not built: $check_ops"
  elif [[ $gpu == 0 ]]; then
    run_stage check_ops_sim 120 "$check_ops" sim
    rc=$?
    if [[ $rc == 0 ]]; then row "b check_ops (sim)" ok $((SECONDS - t0)) "$(lines_of check_ops_sim); on the simulated device (no GPU)"
    else row "b check_ops (sim)" FAIL $((SECONDS - t0)) "exit $rc, $(lines_of check_ops_sim)"; grep -E 'FAIL|check_ops:' "$logs/check_ops_sim.log" | head -20; fi
  else
    run_stage check_ops_full 200 "$check_ops" cuda --full
    rc=$?
    run_stage check_ops_1 40 "$check_ops" cuda --seed=7
    rc1=$?
    run_stage check_ops_2 40 "$check_ops" cuda --seed=7
    rc2=$?
    d1=$(digest_of check_ops_1) d2=$(digest_of check_ops_2)
    detail="full: $(lines_of check_ops_full) (exit $rc); repeat digests ${d1:-none} ${d2:-none}"
    if [[ $rc == 0 && $rc1 == 0 && $rc2 == 0 && -n $d1 && $d1 == "$d2" ]]; then
      row "b check_ops" ok $((SECONDS - t0)) "$detail"
    else
      row "b check_ops" FAIL $((SECONDS - t0)) "$detail (runs exit $rc1, $rc2)"
      grep -hE 'FAIL|^check_ops' "$logs"/check_ops_full.log "$logs"/check_ops_1.log | head -30
    fi
  fi
fi

# c: memcheck over the small shapes.
if want c "c memcheck"; then
  t0=$SECONDS
  sanitizer=$(command -v compute-sanitizer)
  if [[ $gpu == 0 ]]; then
    skip_no_gpu "c memcheck"
  elif [[ -z $sanitizer ]]; then
    row "c memcheck" skip 0 "no compute-sanitizer on PATH (nor in $cuda_home/bin)"
  else
    run_stage memcheck 120 "$sanitizer" --tool memcheck --error-exitcode 99 "$check_ops" cuda
    rc=$?
    summary=$(grep -o 'ERROR SUMMARY: .*' "$logs/memcheck.log" | tail -1)
    if grep -q 'Device not supported' "$logs/memcheck.log"; then
      # Seen on gVisor machines (.library/device/KINDS.md): the tool, not lamp, cannot run there.
      row "c memcheck" skip $((SECONDS - t0)) "compute-sanitizer: $(grep -m1 'Device not supported' "$logs/memcheck.log")"
    elif [[ $rc == 0 ]]; then row "c memcheck" ok $((SECONDS - t0)) "${summary:-no summary}; $(lines_of memcheck)"
    else row "c memcheck" FAIL $((SECONDS - t0)) "exit $rc; ${summary:-no summary}"; tail_log memcheck 25; fi
  fi
fi

# d: the optimizer steps, bit for bit.
if want d "d optim bitwise"; then
  t0=$SECONDS
  if [[ ! -x $optim_bitwise ]]; then
    row "d optim bitwise" skip 0 "not built: $optim_bitwise (set LAMP_OPTIM_BITWISE)"
  elif [[ $gpu == 0 ]]; then
    # No GPU: the program's CPU-against-CPU mode on the same plugins, to prove it runs here.
    run_stage optim-cpu 60 "$optim_bitwise" "$bin/plugins/optim" "$bin/plugins/optim"
    rc=$?
    if [[ $rc == 0 ]]; then row "d optim (cpu smoke)" ok $((SECONDS - t0)) "cpu against cpu: $(grep -c ': bitwise equal$' "$logs/optim-cpu.log") optimizers equal"
    else row "d optim (cpu smoke)" FAIL $((SECONDS - t0)) "exit $rc"; tail_log optim-cpu 8; fi
    skip_no_gpu "d optim bitwise"
  else
    run_stage optim 90 "$optim_bitwise" "$bin/plugins/optim"
    rc=$?
    equal=$(grep -c ': bitwise equal$' "$logs/optim.log")
    if [[ $rc == 0 ]]; then row "d optim bitwise" ok $((SECONDS - t0)) "$equal optimizers bitwise equal"
    else row "d optim bitwise" FAIL $((SECONDS - t0)) "exit $rc; $(grep -v 'bitwise equal' "$logs/optim.log" | head -1)"; tail_log optim; fi
  fi
fi

# e: one epoch under each policy, against the CPU's accuracy.
cpu_accuracy() { # PRECISION -> the CPU's accuracy, from the bundle's reference or a run here
  local ref=$root/cpu_reference.txt acc
  if [[ -f $ref ]]; then
    acc=$(awk -v p="$1" '$1 == p { print $2 }' "$ref")
    [[ -n $acc ]] && { echo "$acc"; return; }
  fi
  read -r acc _ _ < <(mlp_run cpu "$1" "mlp-cpu-$1" 120)
  echo "$acc"
}
if want e "e fmnist accuracy"; then
  t0=$SECONDS
  if [[ $gpu == 0 ]]; then
    # No GPU: the same runs on the CPU over 2560 samples, to prove the script and the bundle
    # (plugins load from where it was unpacked, the data set reads) before a GPU is spent on them.
    ok=1 detail=""
    for p in fp32 fp16 bf16; do
      read -r acc nskip scale < <(mlp_run cpu "$p" "mlp-cpu-smoke-$p" 60 --limit=2560)
      [[ $acc =~ ^[0-9.]+$ ]] || { ok=0; tail_log "mlp-cpu-smoke-$p" 8; }
      detail+="$p $acc % skipped $nskip scale $scale; "
    done
    if [[ $ok == 1 ]]; then row "e fmnist (cpu smoke)" ok $((SECONDS - t0)) "2560 samples: ${detail%; }"
    else row "e fmnist (cpu smoke)" FAIL $((SECONDS - t0)) "${detail%; }"; fi
    skip_no_gpu "e fmnist accuracy"
  else
    ok=1 detail=""
    for p in fp32 fp16 bf16; do
      read -r acc nskip scale < <(mlp_run cuda "$p" "mlp-cuda-$p" 90)
      cpu=$(cpu_accuracy "$p")
      judged=$(awk -v g="$acc" -v c="$cpu" 'BEGIN {
        if (g !~ /^[0-9.]+$/) print "no accuracy";
        else if (g + 0 < 86.0) print "below 86.0";
        else if (c !~ /^[0-9.]+$/) print "no CPU accuracy";
        else if (g - c > 0.5 || c - g > 0.5) print "off the CPU by more than 0.5";
        else print "ok" }')
      [[ $judged == ok ]] || { ok=0; tail_log "mlp-cuda-$p" 8; }
      detail+="$p $acc % (cpu $cpu) skipped $nskip scale $scale: $judged; "
    done
    if [[ $ok == 1 ]]; then row "e fmnist accuracy" ok $((SECONDS - t0)) "${detail%; }"
    else row "e fmnist accuracy" FAIL $((SECONDS - t0)) "${detail%; }"; fi
  fi
fi

# f: a checkpoint crosses devices and training goes on. A constant learning rate, so that the
# second run (two epochs) has the first's schedule.
resume_pair() { # FIRST_DEVICE SECOND_DEVICE PRECISION -> "ok LOSS" or "FAIL why"
  local first=$1 second=$2 p=$3 dir
  dir=$(mktemp -d -p "$work/ckpt" "resume-$first-$second.XXXX")
  local common=(scripts/fmnist_mlp.lua --precision="$p" --limit=5120 --schedule=constant --save="$dir")
  (cd "$root" && run_stage "resume-$first" 60 "$lamp" "${common[@]}" --device="$first" --epochs=1) || { echo "FAIL the $first run (exit $?)"; return; }
  (cd "$root" && run_stage "resume-$second" 60 "$lamp" "${common[@]}" --device="$second" --epochs=2 --resume="$dir") || { echo "FAIL the $second run (exit $?)"; return; }
  grep -q '^resumed from' "$logs/resume-$second.log" || { echo "FAIL the $second run did not resume"; return; }
  local loss
  loss=$(sed -n 's/^epoch 2  train loss \([^ ]*\) .*/\1/p' "$logs/resume-$second.log")
  if [[ $loss =~ ^[0-9]+\.[0-9]+$ ]]; then echo "ok $loss"; else echo "FAIL epoch 2 train loss '${loss}'"; fi
}
if want f "f resume across"; then
  t0=$SECONDS
  if [[ $gpu == 0 ]]; then
    # No GPU: the same save and resume on the CPU alone, to prove the stage itself.
    r0=$(resume_pair cpu cpu fp16)
    if [[ $r0 == ok* ]]; then row "f resume (cpu smoke)" ok $((SECONDS - t0)) "cpu->cpu fp16: ${r0/ok /loss }"
    else row "f resume (cpu smoke)" FAIL $((SECONDS - t0)) "cpu->cpu fp16: $r0"; tail_log resume-cpu 8; fi
    skip_no_gpu "f resume across"
  else
    r1=$(resume_pair cuda cpu fp16)
    [[ $r1 == ok* ]] || tail_log resume-cpu 8
    r2=$(resume_pair cpu cuda bf16)
    [[ $r2 == ok* ]] || tail_log resume-cuda 8
    detail="cuda->cpu fp16: ${r1/ok /loss }; cpu->cuda bf16: ${r2/ok /loss }"
    if [[ $r1 == ok* && $r2 == ok* ]]; then row "f resume across" ok $((SECONDS - t0)) "$detail"
    else row "f resume across" FAIL $((SECONDS - t0)) "$detail"; fi
  fi
fi

# g: throughput, lamp against PyTorch eager.
sps_of() { sed -n 's/.*samples\/s \([0-9]*\)$/\1/p' "$logs/$1.log" | tail -1; }
if want g "g throughput"; then
  t0=$SECONDS
  python=${PYTHON:-python3}
  if [[ $gpu == 0 ]]; then
    # No GPU: the lamp side's script on the CPU for a few steps (PyTorch's twin needs CUDA).
    (cd "$root" && run_stage lamp-cpu-smoke 60 "$lamp" scripts/bench/gpu_mlp.lua --device=cpu --steps=5 --warmup=1)
    rc=$?
    if [[ $rc == 0 && -n $(sps_of lamp-cpu-smoke) ]]; then
      row "g gpu_mlp (cpu smoke)" ok $((SECONDS - t0)) "gpu_mlp.lua --device=cpu: $(sps_of lamp-cpu-smoke) samples/s"
    else
      row "g gpu_mlp (cpu smoke)" FAIL $((SECONDS - t0)) "exit $rc"
      tail_log lamp-cpu-smoke 8
    fi
    skip_no_gpu "g throughput"
  elif ! LD_LIBRARY_PATH=$python_libpath "$python" -c 'import torch' 2>/dev/null; then
    row "g throughput" skip 0 "$python has no torch"
  else
    declare -A sps
    # model: name hidden batch steps warmup
    for model in "ref 1024,1024 128 300 30" "big 4096,4096 4096 40 5"; do
      read -r name hidden batch steps warmup <<<"$model"
      for p in fp32 bf16 fp16; do
        (cd "$root" && run_stage "lamp-$name-$p" 60 "$lamp" scripts/bench/gpu_mlp.lua --device=cuda --precision="$p" \
          --hidden="$hidden" --batch="$batch" --steps="$steps" --warmup="$warmup")
        sps[lamp-$name-$p]=$(sps_of "lamp-$name-$p")
        LD_LIBRARY_PATH=$python_libpath run_stage "torch-$name-$p" 60 "$python" "$scripts/bench/torch_gpu_mlp.py" --precision "$p" --hidden "$hidden" \
          --batch "$batch" --steps "$steps" --warmup "$warmup"
        sps[torch-$name-$p]=$(sps_of "torch-$name-$p")
      done
    done
    ratio() { awk -v a="${sps[$1]:-0}" -v b="${sps[$2]:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
    echo "throughput (samples/s)      lamp      torch   lamp/torch"
    for name in ref big; do
      for p in fp32 bf16 fp16; do
        printf '  %-3s %-5s %14s %10s %8sx\n' "$name" "$p" "${sps[lamp-$name-$p]:-n/a}" "${sps[torch-$name-$p]:-n/a}" \
          "$(ratio "lamp-$name-$p" "torch-$name-$p")"
      done
    done
    misses=()
    check_target() { # LABEL RATIO MIN
      awk -v r="$2" -v m="$3" 'BEGIN { exit !(r != "n/a" && r + 0 >= m) }' || misses+=("$1 $2x < $3x")
    }
    r_ref=$(ratio lamp-ref-fp32 torch-ref-fp32) r_big=$(ratio lamp-big-fp32 torch-big-fp32)
    r_bf=$(ratio lamp-big-bf16 lamp-big-fp32) r_hf=$(ratio lamp-big-fp16 lamp-big-fp32)
    r_bft=$(ratio lamp-big-bf16 torch-big-bf16) r_hft=$(ratio lamp-big-fp16 torch-big-fp16)
    check_target "ref fp32 lamp/torch" "$r_ref" 1.0
    check_target "big fp32 lamp/torch" "$r_big" 1.0
    check_target "big bf16/fp32" "$r_bf" 2.0
    check_target "big fp16/fp32" "$r_hf" 2.0
    check_target "big bf16 lamp/torch" "$r_bft" 1.0
    check_target "big fp16 lamp/torch" "$r_hft" 1.0
    detail="lamp/torch fp32 ref ${r_ref}x big ${r_big}x; big bf16 ${r_bft}x fp16 ${r_hft}x; lamp big bf16/fp32 ${r_bf}x fp16/fp32 ${r_hf}x"
    if ((${#misses[@]} == 0)); then row "g throughput" ok $((SECONDS - t0)) "$detail"
    else row "g throughput" MISS $((SECONDS - t0)) "$detail; below target: $(IFS=';'; echo "${misses[*]}")"; fi
  fi
fi

# h: NCCL at world size 1 against single, bit for bit.
# ckpt_lines DIR: the latest checkpoint's info without its first line (path, header size and crc,
# which the comm's name changes) and without run.comm.
ckpt_lines() { # DIR NAME: the raw info in $work/NAME.raw, the compared lines in $work/NAME.info
  printf '%s\n' 'local lamp = require "lamp"' 'print(lamp.checkpoint.info((lamp.checkpoint.latest(arg[1]))))' >"$work/ckpt_info.lua"
  "$lamp" "$work/ckpt_info.lua" "$1" >"$work/$2.raw" 2>&1
  sed -e 1d -e '/^  str  run\.comm /d' "$work/$2.raw" >"$work/$2.info"
}
epoch_lines() { grep -E '^(epoch [0-9]+  train loss|final test accuracy)' "$logs/$1.log" | sed 's/  [0-9.]* samples\/s$//'; }
if want h "h nccl = single"; then
  t0=$SECONDS
  nccl_so=$bin/plugins/comm/nccl.so
  if [[ ! -f $nccl_so ]]; then
    row "h nccl = single" skip 0 "not built: $nccl_so"
  elif [[ $gpu == 0 ]]; then
    # No GPU: the plugin loads and its probe says why it cannot run.
    run_stage nccl-plugins 30 "$lamp" plugins
    line=$(awk '$1 == "comm" && $2 == "nccl"' "$logs/nccl-plugins.log" | sed 's/  */ /g')
    if [[ $line == "comm nccl "*" 0 ("* ]]; then row "h nccl (cpu smoke)" ok $((SECONDS - t0)) "lamp plugins: ${line%% /*}"
    else row "h nccl (cpu smoke)" FAIL $((SECONDS - t0)) "lamp plugins: ${line:-no nccl row}"; tail_log nccl-plugins 8; fi
    skip_no_gpu "h nccl = single"
  else
    ok=1 detail=""
    for c in single nccl; do
      dir=$(mktemp -d -p "$work/ckpt" "h-$c.XXXX")
      (cd "$root" && run_stage "h-$c" 90 "$lamp" scripts/fmnist_mlp.lua --device=cuda --comm="$c" "${mlp_args[@]}" --limit=10240 --save="$dir")
      rc=$?
      [[ $rc == 0 ]] || { ok=0; detail+="--comm=$c: exit $rc; "; tail_log "h-$c" 10; }
      ckpt_lines "$dir" "h-$c"
    done
    if [[ $ok == 1 ]]; then
      tensors=$(grep -c '^  tensor ' "$work/h-nccl.info")
      if ! grep -Eq '^  str  run\.comm +"nccl"$' "$work/h-nccl.raw"; then
        ok=0 detail+="the nccl run's checkpoint does not name nccl; "
      fi
      if ! cmp -s "$work/h-single.info" "$work/h-nccl.info" || ((tensors == 0)); then
        ok=0 detail+="checkpoints differ ($tensors tensors): $(diff "$work/h-single.info" "$work/h-nccl.info" | head -3 | tr '\n' ' '); "
      fi
      if [[ "$(epoch_lines h-single)" != "$(epoch_lines h-nccl)" ]]; then
        ok=0 detail+="printed results differ; "
      fi
      detail+="$tensors tensors and all state equal; $(epoch_lines h-nccl | tail -1)"
    fi
    if [[ $ok == 1 ]]; then row "h nccl = single" ok $((SECONDS - t0)) "$detail (NCCL ${LAMP_NCCL_LIBRARY:-from the loader})"
    else row "h nccl = single" FAIL $((SECONDS - t0)) "${detail%; }"; fi
  fi
fi

# i: the communicator's own checks on the GPU.
if want i "i nccl_check"; then
  t0=$SECONDS
  if [[ ! -x $nccl_check ]]; then
    row "i nccl_check" skip 0 "not built: $nccl_check"
  else
    run_stage nccl-check 90 "$nccl_check" "$bin/plugins/comm/nccl.so"
    rc=$?
    if [[ $gpu == 0 ]]; then
      # No GPU: the program must stop with the CUDA runtime's reason (exit 2), not crash or hang.
      if [[ $rc == 2 ]]; then row "i nccl_check (smoke)" ok $((SECONDS - t0)) "$(tail -1 "$logs/nccl-check.log")"
      else row "i nccl_check (smoke)" FAIL $((SECONDS - t0)) "exit $rc, expected 2"; tail_log nccl-check 8; fi
      skip_no_gpu "i nccl_check"
    elif [[ $rc == 0 ]]; then
      row "i nccl_check" ok $((SECONDS - t0)) "$(grep -c ': ok ' "$logs/nccl-check.log") checks ok; $(grep -o 'peer: ok status [0-9]* after [0-9.]* s' "$logs/nccl-check.log")"
    else
      row "i nccl_check" FAIL $((SECONDS - t0)) "exit $rc: $(grep -m1 ' FAIL ' "$logs/nccl-check.log" | cut -c1-200)"
      tail_log nccl-check 20
    fi
  fi
fi

# j: two ranks on one GPU through the mpi communicator's host staging.
# mpi_two_ranks NAME LIMIT ARGS...: `lamp ARGS` on two ranks, through scripts/lamp-run where its
# tools are there, else mpirun itself (the ranks inherit the environment on one host); returns
# the launch's status.
mpi_two_ranks() {
  local name=$1 limit=$2
  shift 2
  if [[ -x $scripts/lamp-run ]] && command -v setsid >/dev/null && command -v ps >/dev/null && command -v pkill >/dev/null; then
    mpi_launcher="lamp-run"
    (cd "$root" && LAMP_BIN=$lamp run_stage "$name" "$limit" "$scripts/lamp-run" -n 2 --timeout 60 "$@")
  else
    mpi_launcher="mpirun (no $(for t in setsid ps pkill; do command -v $t >/dev/null || echo -n "$t "; done)for lamp-run)"
    [[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    (cd "$root" && LAMP_COMM_TIMEOUT=60 OPENBLAS_NUM_THREADS=$(($(nproc) > 1 ? $(nproc) / 2 : 1)) \
      run_stage "$name" "$limit" mpirun -n 2 --oversubscribe "$lamp" "$@")
  fi
}
accuracy_of() { sed -n 's/^final test accuracy \([0-9.]*\) %.*/\1/p' "$logs/$1.log" | tail -1; }
if want j "j mpi 2 ranks on 1 GPU"; then
  t0=$SECONDS
  mpirun_path=$(command -v mpirun)
  mpi_label=${mpi_from:-$mpirun_path}
  # With the bundle's MPI, mpirun and the libmpi that mpi.so loads must both be its own.
  mpi_mixed=""
  if [[ -n $mpi_from ]]; then
    libmpi=$(ldd "$bin/plugins/comm/mpi.so" 2>/dev/null | awk '$1 ~ /^libmpi\.so/ { print $3 }')
    [[ $mpirun_path == "$root/mpi/bin/mpirun" ]] || mpi_mixed="mpirun is $mpirun_path, not the bundle's"
    [[ $libmpi == "$root/mpi/lib/"* ]] || mpi_mixed+="${mpi_mixed:+; }mpi.so loads libmpi from ${libmpi:-nowhere}, not the bundle's"
  fi
  if [[ -n $mpi_mixed ]]; then
    row "j mpi 2 ranks on 1 GPU" FAIL 0 "$mpi_mixed"
  elif [[ -z $mpirun_path ]]; then
    row "j mpi 2 ranks on 1 GPU" skip 0 "no mpirun on this machine, none in the bundle (gpu-bundle.sh packs Open MPI 4 into mpi/)"
  elif [[ ! -f $bin/plugins/comm/mpi.so ]]; then
    row "j mpi 2 ranks on 1 GPU" skip 0 "no mpi.so in $bin/plugins/comm (a bundle made with --no-mpi or without MPI)"
  elif [[ $gpu == 0 ]]; then
    # No GPU: two ranks over the same MPI and mpi.so on the CPU, a few steps, to prove the
    # launcher, the (bundle's) Open MPI and the plugin before a GPU is spent on them.
    mpi_two_ranks j-cpu-smoke 60 scripts/fmnist_mlp.lua --device=cpu --comm=mpi --limit=1280 "${mlp_args[@]}"
    rc=$?
    acc=$(accuracy_of j-cpu-smoke)
    if [[ $rc == 0 && $acc =~ ^[0-9.]+$ ]]; then
      row "j mpi (cpu smoke)" ok $((SECONDS - t0)) "2 ranks, 1280 samples: $acc % via $mpi_launcher over $mpi_label"
    else
      row "j mpi (cpu smoke)" FAIL $((SECONDS - t0)) "exit $rc, accuracy ${acc:--}, via $mpi_launcher over $mpi_label"
      tail_log j-cpu-smoke 12
    fi
    skip_no_gpu "j mpi 2 ranks on 1 GPU"
  else
    # One rank: stage e's fp32 run where it printed an accuracy (the same arguments), else its own.
    one=$( [[ -f $logs/mlp-cuda-fp32.log ]] && accuracy_of mlp-cuda-fp32) one_from="stage e"
    if [[ ! $one =~ ^[0-9.]+$ ]]; then
      read -r one _ _ < <(mlp_run cuda fp32 j-one-rank 90 --comm=single)
      one_from="--comm=single"
    fi
    mpi_two_ranks j-two-ranks 150 scripts/fmnist_mlp.lua --device=cuda --comm=mpi "${mlp_args[@]}"
    rc=$?
    two=$(accuracy_of j-two-ranks)
    judged=$(awk -v a="$two" -v b="$one" 'BEGIN {
      if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) print "no accuracy";
      else if (a - b > 0.5 || b - a > 0.5) print "off by more than 0.5";
      else print "ok" }')
    detail="2 ranks ${two:--} % (exit $rc), 1 rank ${one:--} % ($one_from): $judged; via $mpi_launcher over $mpi_label"
    # The bundle's Open MPI was built against the CPU machine's C library (libevent wants 2.36).
    mpi_glibc=$(sed -n 's/^mpi glibc needed: //p' "$root/MANIFEST" 2>/dev/null)
    have_glibc=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]*\.[0-9]*$')
    if [[ -n $mpi_glibc && -n $have_glibc && $(printf '%s\n' "$mpi_glibc" "$have_glibc" | sort -V | tail -1) != "$have_glibc" ]]; then
      detail+="; the bundle's MPI needs glibc $mpi_glibc, this machine has $have_glibc"
    fi
    if [[ $rc == 0 && $judged == ok ]]; then row "j mpi 2 ranks on 1 GPU" ok $((SECONDS - t0)) "$detail"
    else row "j mpi 2 ranks on 1 GPU" FAIL $((SECONDS - t0)) "$detail"; tail_log j-two-ranks 12; fi
  fi
fi

# k: the small ResNet (cuDNN convolutions, lamp's BatchNorm and pooling kernels) trains on the GPU.
resnet_run() { # DEVICE PRECISION NAME LIMIT [ARGS...] -> the accuracy
  local device=$1 p=$2 name=$3 limit=$4
  shift 4
  (cd "$root" && run_stage "$name" "$limit" "$lamp" scripts/fmnist_resnet.lua --device="$device" --precision="$p" "$@")
  local rc=$?
  accuracy_of "$name"
  return $rc
}
if want k "k resnet accuracy"; then
  t0=$SECONDS
  if [[ $gpu == 0 ]]; then
    # No GPU: one short epoch on the CPU, to prove the script and the bundle's ResNet path.
    acc=$(resnet_run cpu fp32 resnet-cpu-smoke 90 --epochs=1 --limit=1280)
    rc=$?
    if [[ $rc == 0 && $acc =~ ^[0-9.]+$ ]]; then row "k resnet (cpu smoke)" ok $((SECONDS - t0)) "1280 samples, 1 epoch: $acc %"
    else row "k resnet (cpu smoke)" FAIL $((SECONDS - t0)) "exit $rc, accuracy ${acc:--}"; tail_log resnet-cpu-smoke 8; fi
    skip_no_gpu "k resnet accuracy"
  else
    # 3 epochs under fp32 and bf16, each >= 89.5 % (the CPU reaches 89.8 % and 90.0 %).
    ok=1 detail=""
    for p in fp32 bf16; do
      acc=$(resnet_run cuda "$p" "resnet-cuda-$p" 180 --epochs=3)
      judged=$(awk -v a="$acc" 'BEGIN { if (a !~ /^[0-9.]+$/) print "no accuracy"; else if (a + 0 < 89.5) print "below 89.5"; else print "ok" }')
      [[ $judged == ok ]] || { ok=0; tail_log "resnet-cuda-$p" 8; }
      detail+="$p ${acc:--} %: $judged; "
    done
    if [[ $ok == 1 ]]; then row "k resnet accuracy" ok $((SECONDS - t0)) "3 epochs: ${detail%; }"
    else row "k resnet accuracy" FAIL $((SECONDS - t0)) "3 epochs: ${detail%; }"; fi
  fi
fi

# l: the ResNet's throughput against PyTorch eager (cuDNN) at batch 128 and 512, fp32 (no TF32 on
# either side) and bf16 autocast; lamp with CUDA graphs (its default) and without.
if want l "l resnet throughput"; then
  t0=$SECONDS
  python=${PYTHON:-python3}
  if [[ $gpu == 0 ]]; then
    (cd "$root" && run_stage resnet-sps-cpu-smoke 60 "$lamp" scripts/bench/gpu_mlp.lua --model=resnet --device=cpu --steps=3 --warmup=1)
    rc=$?
    if [[ $rc == 0 && -n $(sps_of resnet-sps-cpu-smoke) ]]; then
      row "l resnet sps (cpu smoke)" ok $((SECONDS - t0)) "gpu_mlp.lua --model=resnet --device=cpu: $(sps_of resnet-sps-cpu-smoke) samples/s"
    else row "l resnet sps (cpu smoke)" FAIL $((SECONDS - t0)) "exit $rc"; tail_log resnet-sps-cpu-smoke 8; fi
    skip_no_gpu "l resnet throughput"
  elif ! LD_LIBRARY_PATH=$python_libpath "$python" -c 'import torch' 2>/dev/null; then
    row "l resnet throughput" skip 0 "$python has no torch"
  else
    declare -A rsps
    for batch in 128 512; do
      for p in fp32 bf16; do
        for g in on off; do
          (cd "$root" && run_stage "lamp-resnet-$batch-$p-graphs-$g" 60 "$lamp" scripts/bench/gpu_mlp.lua --model=resnet \
            --device=cuda --precision="$p" --batch="$batch" --steps=100 --warmup=10 --graphs="$g")
          rsps[lamp-$g-$batch-$p]=$(sps_of "lamp-resnet-$batch-$p-graphs-$g")
        done
        LD_LIBRARY_PATH=$python_libpath run_stage "torch-resnet-$batch-$p" 60 "$python" "$scripts/bench/torch_gpu_mlp.py" \
          --model resnet --precision "$p" --batch "$batch" --steps 100 --warmup 10
        rsps[torch-$batch-$p]=$(sps_of "torch-resnet-$batch-$p")
      done
    done
    rratio() { awk -v a="${rsps[$1]:-0}" -v b="${rsps[$2]:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
    echo "resnet throughput (samples/s)  lamp graphs  lamp eager   torch eager  graphs/torch  eager/torch  graphs/eager"
    for batch in 128 512; do
      for p in fp32 bf16; do
        printf '  %-4s %-5s %18s %12s %13s %12sx %11sx %12sx\n' "$batch" "$p" "${rsps[lamp-on-$batch-$p]:-n/a}" \
          "${rsps[lamp-off-$batch-$p]:-n/a}" "${rsps[torch-$batch-$p]:-n/a}" "$(rratio "lamp-on-$batch-$p" "torch-$batch-$p")" \
          "$(rratio "lamp-off-$batch-$p" "torch-$batch-$p")" "$(rratio "lamp-on-$batch-$p" "lamp-off-$batch-$p")"
      done
    done
    misses=() wrong=() detail="" gain=""
    for batch in 128 512; do
      for p in fp32 bf16; do
        r=$(rratio "lamp-on-$batch-$p" "torch-$batch-$p")
        detail+="$batch $p ${r}x; "
        gain+="$batch $p $(rratio "lamp-on-$batch-$p" "lamp-off-$batch-$p")x; "
        awk -v r="$r" 'BEGIN { exit !(r != "n/a" && r + 0 >= 1.0) }' || misses+=("$batch $p lamp/torch ${r}x < 1.0x")
      done
    done
    loss_of() { sed -n 's/.* loss \([0-9.eEinfa+-]*\),.*/\1/p' "$logs/$1.log" | tail -1; }
    for batch in 128 512; do
      for p in fp32 bf16; do
        on="lamp-resnet-$batch-$p-graphs-on" off="lamp-resnet-$batch-$p-graphs-off"
        grep -q "graphs on ([0-9]* recorded, [1-9][0-9]* replayed)" "$logs/$on.log" ||
          wrong+=("$batch $p no graph replayed: $(grep -o 'cannot be recorded as a device graph.*' "$logs/$on.log" | head -1)")
        [[ -n $(loss_of "$on") && $(loss_of "$on") == "$(loss_of "$off")" ]] ||
          wrong+=("$batch $p loss with graphs $(loss_of "$on") != eager $(loss_of "$off")")
      done
    done
    r_bf=$(rratio lamp-on-512-bf16 lamp-on-512-fp32)
    awk -v r="$r_bf" 'BEGIN { exit !(r != "n/a" && r + 0 >= 1.3) }' || misses+=("512 bf16/fp32 ${r_bf}x < 1.3x")
    detail="lamp/torch ${detail%; }; lamp 512 bf16/fp32 ${r_bf}x; graphs/eager ${gain%; }"
    if ((${#wrong[@]} > 0)); then row "l resnet throughput" FAIL $((SECONDS - t0)) "$detail; $(IFS=';'; echo "${wrong[*]}")"
    elif ((${#misses[@]} == 0)); then row "l resnet throughput" ok $((SECONDS - t0)) "$detail"
    else row "l resnet throughput" MISS $((SECONDS - t0)) "$detail; below target: $(IFS=';'; echo "${misses[*]}")"; fi
  fi
fi

table() {
  printf '%-22s | %-5s | %5s | %s\n' "stage" "result" "time" "detail"
  printf '%s\n' "${rows[@]}"
}
echo
table
verdict="PASS"
join() { local IFS=,; echo "$*"; }
((${#failed[@]})) && verdict="FAIL ($(join "${failed[@]}"))"
extra=""
((${#skipped[@]})) && extra="; skipped: $(join "${skipped[@]}")"
[[ $gpu == 0 ]] && extra+=" (no GPU: $no_gpu_reason)"
echo "verdict: $verdict in $((SECONDS - started)) s$extra"
if [[ -n ${OUT:-} ]]; then
  { table; echo "verdict: $verdict in $((SECONDS - started)) s$extra"; } >"$OUT/gpu-check-table.txt"
  tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$logs" .
fi
((${#failed[@]} == 0))
