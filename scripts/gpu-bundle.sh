#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on the GPU machine into one archive of at most 60 MiB.
# That machine has no package registry: no Lua, OpenBLAS, zlib or Fashion-MNIST there, only the
# CUDA toolkit, compute-sanitizer and a python3 with PyTorch. Run on the CPU machine after a
# build with CUDA (cmake -DLAMP_CUDA=ON, or AUTO where nvcc is found):
#
#   scripts/gpu-bundle.sh [--build=DIR] [--allow-missing-cuda] [--no-reference]
#
# The archive, gpu-bundle/lamp-gpu-bundle.tar.xz (the folder is git-ignored; carry it to the GPU
# machine, e.g. the device tool's carry ["gpu-bundle"]), holds, under one root laid out like the
# checkout so that gpu-check.sh runs the same there as in a build tree:
#   build/lamp, build/backends/cuda.so, build/plugins/<kind>/*.so (not comm/mpi.so: no MPI there),
#   build/tests/gpu/check_ops, build/tests/gpu/optim_bitwise (LAMP_OPTIM_BITWISE) where built,
#   build/tests/gpu/nccl_check where nccl.so is built (stage i; nccl.so itself is among the plugins,
#       libnccl.so.2 is not packed: the GPU machine's own is used, see gpu-check.sh),
#   scripts/ (the training scripts, scripts/lib, scripts/bench, gpu-check.sh),
#   lib/ the shared libraries those need that are neither the C library's nor CUDA's (found with
#       ldd: liblua5.4, libopenblas with libgfortran and libquadmath, libz, ...),
#   data/fashion-mnist/ the IDX files (from LAMP_DATA_DIR or the Debian package's folder),
#   cpu_reference.txt the CPU accuracies of stage e (gpu-check.sh --write-cpu-reference; about a
#       minute of CPU training here instead of on the GPU machine's short lease),
#   MANIFEST what was packed, from which commit, and the newest glibc symbol version needed.
#
# --allow-missing-cuda packs without build/backends/cuda.so (gpu-check.sh then builds it on the
# GPU machine with its nvcc); without the flag a missing module is an error. --no-reference skips
# the CPU runs (gpu-check.sh then makes them on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

build=build
allow_missing_cuda=0
reference=1
for a in "$@"; do
  case "$a" in
    --build=*) build=${a#--build=} ;;
    --allow-missing-cuda) allow_missing_cuda=1 ;;
    --no-reference) reference=0 ;;
    *) echo "gpu-bundle: unknown argument $a (expected --build=DIR, --allow-missing-cuda, --no-reference)" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" 2>/dev/null && pwd) || { echo "gpu-bundle: no build folder $build" >&2; exit 1; }

limit_mib=60
out_dir=$repo/gpu-bundle
archive=$out_dir/lamp-gpu-bundle.tar.xz
data_dir=${LAMP_DATA_DIR:-/usr/share/datasets/fashion-mnist}
optim_bitwise=${LAMP_OPTIM_BITWISE:-$build/tests/gpu/optim_bitwise}

die() { echo "gpu-bundle: $*" >&2; exit 1; }

# {======================================================
# What must be there
# =======================================================
[[ -x $build/lamp ]] || die "$build/lamp is missing: build first (cmake --build $build)"
[[ -x $build/tests/gpu/check_ops ]] || die "$build/tests/gpu/check_ops is missing: cmake --build $build --target check_ops"
compgen -G "$build/plugins/*/*.so" >/dev/null || die "no plugins under $build/plugins: cmake --build $build --target lamp"
if [[ ! -f $build/backends/cuda.so ]]; then
  if [[ $allow_missing_cuda == 1 ]]; then
    echo "gpu-bundle: WARNING: $build/backends/cuda.so is missing; packing without it (gpu-check.sh rebuilds it with the GPU machine's nvcc)" >&2
  else
    die "$build/backends/cuda.so is missing: configure with CUDA (cmake -DLAMP_CUDA=ON) and build, or pass --allow-missing-cuda"
  fi
fi
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [[ -f $data_dir/$f.gz || -f $data_dir/$f ]] || die "Fashion-MNIST: $data_dir/$f(.gz) is missing (apt-get install dataset-fashion-mnist, or set LAMP_DATA_DIR)"
done
# }======================================================

umask 022
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/lamp-gpu
mkdir -p "$root/build/tests/gpu" "$root/lib" "$root/data/fashion-mnist"

# {======================================================
# Binaries, plugins, scripts, data
# =======================================================
cp "$build/lamp" "$root/build/"
cp "$build/tests/gpu/check_ops" "$root/build/tests/gpu/"
if [[ -x $optim_bitwise ]]; then
  cp "$optim_bitwise" "$root/build/tests/gpu/optim_bitwise"
else
  echo "gpu-bundle: note: no optimizer comparison program at $optim_bitwise (gpu-check.sh stage d will be skipped)" >&2
fi
if [[ -f $build/plugins/comm/nccl.so ]]; then
  [[ -x $build/tests/gpu/nccl_check ]] || die "$build/tests/gpu/nccl_check is missing: cmake --build $build --target nccl_check"
  cp "$build/tests/gpu/nccl_check" "$root/build/tests/gpu/"
fi
if [[ -f $build/backends/cuda.so ]]; then
  mkdir -p "$root/build/backends"
  cp "$build/backends/cuda.so" "$root/build/backends/"
fi
(cd "$build" && find plugins -name '*.so' ! -path 'plugins/comm/mpi.so' -print0 | xargs -0 -I{} cp --parents {} "$root/build/")
mkdir -p "$root/scripts"
(cd "$repo/scripts" && find . \( -name '*.lua' -o -name '*.py' -o -name 'gpu-check.sh' \) -print0 |
  xargs -0 -I{} cp --parents {} "$root/scripts/")
# The IDX files uncompressed: xz packs the raw bytes smaller than their gzip copies.
for f in "$data_dir"/*-ubyte*; do
  name=$(basename "$f" .gz)
  if [[ $f == *.gz ]]; then gzip -dc "$f" >"$root/data/fashion-mnist/$name"; else cp "$f" "$root/data/fashion-mnist/$name"; fi
done
# }======================================================

# {======================================================
# Shared libraries: what ldd resolves for every ELF file packed, minus the C library's, the
# compiler runtime every machine has, and CUDA's (the GPU machine's own must be used)
# =======================================================
system_lib() {
  case "$(basename "$1")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | ld-linux*.so.* | \
      libgcc_s.so.* | libstdc++.so.*) return 0 ;;
    libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libnvidia-*.so.* | libnvrtc*.so.* | libnccl.so.*) return 0 ;;
  esac
  [[ $1 == /usr/local/cuda* ]]
}
mapfile -t elves < <(find "$root/build" -type f \( -name '*.so' -o -perm -u+x \))
declare -A libs
for e in "${elves[@]}"; do
  while read -r path; do
    [[ -n $path ]] && ! system_lib "$path" && libs[$path]=1
  done < <(ldd "$e" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
  if ldd "$e" 2>/dev/null | grep -q 'not found'; then
    missing=$(ldd "$e" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    # libcublas is found on the GPU machine (its toolkit); anything else missing here is an error.
    for m in $missing; do system_lib "$m" || die "${e#"$root/"} needs $m, which ldd cannot find here"; done
  fi
done
for path in "${!libs[@]}"; do cp -L "$path" "$root/lib/$(basename "$path")"; done

# The newest glibc symbol version the packed files need: gpu-check.sh compares it with the GPU
# machine's C library.
glibc_needed=$( (for e in "${elves[@]}" "$root"/lib/*; do objdump -T "$e" 2>/dev/null; done) |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
# }======================================================

# {======================================================
# The CPU reference accuracies (gpu-check.sh stage e)
# =======================================================
if [[ $reference == 1 ]]; then
  echo "gpu-bundle: training one epoch on the CPU under fp32, fp16 and bf16 for cpu_reference.txt ..."
  reflog=$(mktemp -d)
  OUT=$reflog scripts/gpu-check.sh --tree --build="$build" --write-cpu-reference="$root/cpu_reference.txt" ||
    die "the CPU reference runs failed (logs in $reflog/gpu-check)"
  rm -rf "$reflog"
fi
# }======================================================

{
  echo "lamp GPU bundle for scripts/gpu-check.sh"
  echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $build"
  echo "glibc needed: ${glibc_needed:-unknown}"
  echo "files:"
  (cd "$root" && find . -type f -printf '  %P %s\n' | sort)
} >"$root/MANIFEST"
chmod -R go-w "$root"

mkdir -p "$out_dir"
rm -f "$archive"
XZ_OPT="-9 -T0" tar -C "$root" --owner=0 --group=0 -cJf "$archive" .
bytes=$(stat -c %s "$archive")
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
if ((bytes > limit_mib * 1048576)); then
  die "$archive is $mib MiB, over the limit of $limit_mib MiB"
fi
echo "gpu-bundle: $archive  $mib MiB (limit $limit_mib MiB), $(find "$root" -type f | wc -l) files; glibc >= ${glibc_needed:-?}"
[[ -f $root/build/backends/cuda.so ]] || echo "gpu-bundle: (without build/backends/cuda.so)"
# The device tool carries the working tree (tracked and untracked, not ignored) and the carried
# folder together, 64 MiB at most.
tree_bytes=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total=$(awk -v a="${tree_bytes:-0}" -v b="$bytes" 'BEGIN { printf "%.1f", (a + b) / 1048576 }')
echo "gpu-bundle: with the working tree ($(awk -v a="${tree_bytes:-0}" 'BEGIN { printf "%.1f", a / 1048576 }') MiB) a device call carrying gpu-bundle/ takes $total of its 64 MiB"
awk -v t="$total" 'BEGIN { exit !(t > 64) }' && echo "gpu-bundle: WARNING: over the 64 MiB a device call carries" >&2
exit 0
