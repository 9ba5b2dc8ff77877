#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on the GPU machine into one archive of at most 60 MiB.
# That machine has no package registry: no Lua, OpenBLAS, zlib or Fashion-MNIST there, only the
# CUDA toolkit, compute-sanitizer and a python3 with PyTorch. Run on the CPU machine after a
# build with CUDA (cmake -DLAMP_CUDA=ON, or AUTO where nvcc is found):
#
#   scripts/gpu-bundle.sh [--build=DIR] [--allow-missing-cuda] [--no-reference] [--no-mpi]
#
# The archive, gpu-bundle/lamp-gpu-bundle.tar.xz (the folder is git-ignored; carry it to the GPU
# machine, e.g. the device tool's carry ["gpu-bundle"]), holds, under one root laid out like the
# checkout so that gpu-check.sh runs the same there as in a build tree:
#   build/lamp, build/backends/cuda.so, build/plugins/<kind>/*.so (comm/mpi.so only with mpi/),
#   build/tests/gpu/check_ops, build/tests/gpu/optim_bitwise (LAMP_OPTIM_BITWISE) where built,
#   build/tests/gpu/nccl_check where nccl.so is built (stage i; nccl.so itself is among the plugins,
#       libnccl.so.2 is not packed: the GPU machine's own is used, see gpu-check.sh),
#   scripts/ (the training scripts, scripts/lib, scripts/bench, gpu-check.sh, lamp-run),
#   lib/ the shared libraries those need that are neither the C library's nor CUDA's (found with
#       ldd: liblua5.4, libopenblas with libgfortran and libquadmath, libz, ...),
#   data/fashion-mnist/ the IDX files (from LAMP_DATA_DIR or the Debian package's folder),
#   cpu_reference.txt the CPU accuracies of stage e (gpu-check.sh --write-cpu-reference; about a
#       minute of CPU training here instead of on the GPU machine's short lease),
#   mpi/ (stage j: two ranks on one GPU over the mpi communicator; the GPU machine has no MPI)
#       this machine's Open MPI 4.x made relocatable: bin/ (mpirun, mpiexec, orted, ompi_info),
#       lib/ (libmpi, libopen-rte, libopen-pal, libpmix, libhwloc, libevent, libmunge, ...),
#       lib/openmpi3/ the MCA components that need nothing else (no UCX, libfabric, verbs, PSM,
#       OpenSHMEM or MPI-IO: on one host only self and shared memory are used), lib/pmix/ PMIx's,
#       share/openmpi, share/pmix (help texts), etc/ (the MCA parameter files), and env.sh, which
#       points OPAL_* and PMIX_* (the installation folders), PATH and LD_LIBRARY_PATH at this copy
#       and selects ob1 over self and vader (gpu-check.sh sources it); with build/plugins/comm/mpi.so,
#   MANIFEST what was packed, from which commit, and the newest glibc symbol version needed.
#
# --no-mpi packs neither mpi/ nor mpi.so (stage j is then skipped there); without Open MPI 4 or
# mpi.so here the bundle is made without them, with a warning.
# --allow-missing-cuda packs without build/backends/cuda.so (gpu-check.sh then builds it on the
# GPU machine with its nvcc); without the flag a missing module is an error. --no-reference skips
# the CPU runs (gpu-check.sh then makes them on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

build=build
allow_missing_cuda=0
reference=1
mpi=1
for a in "$@"; do
  case "$a" in
    --build=*) build=${a#--build=} ;;
    --allow-missing-cuda) allow_missing_cuda=1 ;;
    --no-reference) reference=0 ;;
    --no-mpi) mpi=0 ;;
    *) echo "gpu-bundle: unknown argument $a (expected --build=DIR, --allow-missing-cuda, --no-reference, --no-mpi)" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" 2>/dev/null && pwd) || { echo "gpu-bundle: no build folder $build" >&2; exit 1; }

limit_mib=60
out_dir=$repo/gpu-bundle
archive=$out_dir/lamp-gpu-bundle.tar.xz
data_dir=${LAMP_DATA_DIR:-/usr/share/datasets/fashion-mnist}
optim_bitwise=${LAMP_OPTIM_BITWISE:-$build/tests/gpu/optim_bitwise}

die() { echo "gpu-bundle: $*" >&2; exit 1; }

# ---- what must be there --------------------------------------------------------------------------
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

umask 022
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/lamp-gpu
mkdir -p "$root/build/tests/gpu" "$root/lib" "$root/data/fashion-mnist"

# ---- binaries, plugins, scripts, data ------------------------------------------------------------
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
(cd "$repo/scripts" && find . \( -name '*.lua' -o -name '*.py' -o -name 'gpu-check.sh' -o -name 'lamp-run' \) -print0 |
  xargs -0 -I{} cp --parents {} "$root/scripts/")
# The IDX files uncompressed: xz packs the raw bytes smaller than their gzip copies.
for f in "$data_dir"/*-ubyte*; do
  name=$(basename "$f" .gz)
  if [[ $f == *.gz ]]; then gzip -dc "$f" >"$root/data/fashion-mnist/$name"; else cp "$f" "$root/data/fashion-mnist/$name"; fi
done

# ---- shared libraries ----------------------------------------------------------------------------
# What ldd resolves for every ELF file packed, minus the C library's, the compiler runtime every
# machine has, and CUDA's (the GPU machine's own must be used)
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

# ---- Open MPI for stage j ------------------------------------------------------------------------
# Relocatable under mpi/ (the GPU machine has no MPI): mpirun and orted, the libraries, the MCA
# components that need nothing beyond them, the help texts and the parameter files; env.sh points
# Open MPI's and PMIx's installation folders at this copy
mpi_note=""
mpi_bytes=0
pack_mpi() {
  local m=$root/mpi mpirun version paths pkglibdir pkgdatadir sysconfdir pmix_so pmix_dir
  mpirun=$(command -v mpirun) || { mpi_note="no mpirun here (apt-get install openmpi-bin)"; return 1; }
  [[ -f $build/plugins/comm/mpi.so ]] || { mpi_note="$build/plugins/comm/mpi.so is not built"; return 1; }
  version=$("$mpirun" --version 2>/dev/null | head -1)
  # Open MPI 4 (ORTE): its installation folders come from OPAL_* and PMIx's from PMIX_*; 5 (PRRTE)
  # lays itself out differently.
  [[ $version == *"(Open MPI) 4."* ]] || { mpi_note="mpirun here is '$version', not Open MPI 4"; return 1; }
  paths=$(ompi_info --parsable --path all 2>/dev/null) || { mpi_note="ompi_info --path all failed"; return 1; }
  pkglibdir=$(sed -n 's/^path:pkglibdir://p' <<<"$paths" | head -1)
  pkgdatadir=$(sed -n 's/^path:pkgdatadir://p' <<<"$paths" | head -1)
  sysconfdir=$(sed -n 's/^path:sysconfdir://p' <<<"$paths" | head -1)
  [[ -d $pkglibdir && -d $pkgdatadir ]] || { mpi_note="no MCA components or help texts where ompi_info says ($pkglibdir, $pkgdatadir)"; return 1; }
  mkdir -p "$m/bin" "$m/lib/openmpi3" "$m/lib/pmix" "$m/share/openmpi" "$m/share/pmix" "$m/etc"

  # Programs: mpirun is orterun; mpiexec the same (copies, not links: a few kB each).
  local orterun
  orterun=$(readlink -f "$mpirun")
  cp "$orterun" "$m/bin/mpirun"
  cp "$orterun" "$m/bin/mpiexec"
  local b
  for b in orted ompi_info; do
    command -v "$b" >/dev/null && cp -L "$(command -v "$b")" "$m/bin/$b"
  done

  # The MCA components whose libraries are all among those packed: the core and PMIx ones
  # (self, vader, ob1, the collectives, the runtime's) go; UCX, libfabric (ofi), verbs (openib),
  # PSM, OpenSHMEM, monitoring and MPI-IO (ompio) stay behind, with the libraries they pull in.
  local packable='^(libmpi\.so|libopen-rte\.so|libopen-pal\.so|libpmix\.so|libhwloc\.so|libevent(_core|_pthreads)?-2\.1\.so|libmunge\.so|libudev\.so|libz\.so|libmca_common_sm\.so)'
  component_ok() { # FILE: every library it needs is a system one or packable, and all are found
    local lib
    ldd "$1" 2>/dev/null | grep -q 'not found' && return 1
    while read -r lib; do
      system_lib "$lib" || [[ $(basename "$lib") =~ $packable ]] || return 1
    done < <(ldd "$1" 2>/dev/null | awk '$2 == "=>" { print $1 }')
    return 0
  }
  local c kept=0 left=()
  for c in "$pkglibdir"/mca_*.so; do
    if component_ok "$c"; then cp "$c" "$m/lib/openmpi3/"; kept=$((kept + 1)); else left+=("$(basename "$c" .so)"); fi
  done
  # PMIx's own components live beside its library (Debian: .../pmix2/lib/pmix), its help texts
  # and parameter file in the share folder next to that.
  pmix_so=$(ldd "$build/plugins/comm/mpi.so" "$m/lib/openmpi3"/mca_pmix_*.so 2>/dev/null | awk '$1 == "libpmix.so.2" { print $3; exit }')
  if [[ -n $pmix_so ]]; then
    pmix_dir=$(dirname "$(readlink -f "$pmix_so")")
    for c in "$pmix_dir"/pmix/*.so; do [[ -e $c ]] && component_ok "$c" && cp "$c" "$m/lib/pmix/"; done
    cp "$pmix_dir"/../share/pmix/help-*.txt "$m/share/pmix/" 2>/dev/null
    # Debian's names its component folder there, which would outrank PMIX_PKGLIBDIR: commented out.
    [[ -f $pmix_dir/../share/pmix-mca-params.conf ]] &&
      sed 's|^\( *mca_base_component_path *=\)|# (relocated: PMIX_PKGLIBDIR instead) \1|' "$pmix_dir/../share/pmix-mca-params.conf" >"$m/etc/pmix-mca-params.conf"
  fi
  cp "$pkgdatadir"/help-*.txt "$m/share/openmpi/"
  for c in openmpi-mca-params.conf openmpi-default-hostfile; do
    [[ -f $sysconfdir/$c ]] && cp "$sysconfdir/$c" "$m/etc/"
  done

  # The libraries of all of the above and of mpi.so, except those already in lib/ (zlib).
  mkdir -p "$root/build/plugins/comm"
  cp "$build/plugins/comm/mpi.so" "$root/build/plugins/comm/"
  local e path
  declare -A mlibs=()
  for e in "$m"/bin/* "$m"/lib/openmpi3/*.so "$m"/lib/pmix/*.so "$root/build/plugins/comm/mpi.so"; do
    [[ -e $e ]] || continue
    ldd "$e" 2>/dev/null | grep -q 'not found' && { mpi_note="${e#"$root/"}: $(ldd "$e" | grep 'not found' | head -1)"; return 1; }
    while read -r path; do
      [[ -n $path ]] && ! system_lib "$path" && [[ ! -e $root/lib/$(basename "$path") ]] && mlibs[$path]=1
    done < <(ldd "$e" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')
  done
  for path in "${!mlibs[@]}"; do cp -L "$path" "$m/lib/$(basename "$path")"; done
  # A folder of this machine left in a parameter file would outrank the variables of env.sh.
  local pinned
  pinned=$(grep -Hn '^[^#]*/\(usr\|etc\|opt\|lib\)/' "$m"/etc/*.conf 2>/dev/null | head -1)
  [[ -z $pinned ]] || { mpi_note="a parameter file names a folder of this machine: ${pinned#"$m/"}"; return 1; }
  # What one host's run cannot do without (set -e does not reach here: pack_mpi is a condition).
  for path in bin/mpirun bin/orted lib/openmpi3/mca_pml_ob1.so lib/openmpi3/mca_btl_self.so lib/openmpi3/mca_btl_vader.so \
    lib/openmpi3/mca_ess_pmi.so lib/openmpi3/mca_pmix_ext3x.so lib/openmpi3/mca_plm_isolated.so share/openmpi/help-mpi-runtime.txt; do
    [[ -s $m/$path ]] || { mpi_note="mpi/$path did not get packed"; return 1; }
  done
  compgen -G "$m/lib/libmpi.so.*" >/dev/null || { mpi_note="libmpi did not get packed"; return 1; }

  # env.sh: sourced (bash) from anywhere; finds this folder from its own path.
  cat >"$m/env.sh" <<'ENV'
# Open MPI from scripts/gpu-bundle.sh, relocated here: source this file (bash), then mpirun.
# Open MPI 4 and PMIx take their installation folders from these variables (in mpirun and, by
# inheritance, in each rank), so that nothing is looked for under the packing machine's /usr.
lamp_mpi=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$lamp_mpi OPAL_EXEC_PREFIX=$lamp_mpi OPAL_BINDIR=$lamp_mpi/bin OPAL_LIBDIR=$lamp_mpi/lib
export OPAL_PKGLIBDIR=$lamp_mpi/lib/openmpi3 OPAL_DATAROOTDIR=$lamp_mpi/share OPAL_DATADIR=$lamp_mpi/share
export OPAL_PKGDATADIR=$lamp_mpi/share/openmpi OPAL_SYSCONFDIR=$lamp_mpi/etc
export PMIX_PREFIX=$lamp_mpi PMIX_EXEC_PREFIX=$lamp_mpi PMIX_BINDIR=$lamp_mpi/bin PMIX_LIBDIR=$lamp_mpi/lib
export PMIX_PKGLIBDIR=$lamp_mpi/lib/pmix PMIX_DATAROOTDIR=$lamp_mpi/share PMIX_DATADIR=$lamp_mpi/share
export PMIX_PKGDATADIR=$lamp_mpi/share/pmix PMIX_SYSCONFDIR=$lamp_mpi/etc
# hwloc's plugins (PCI, OpenCL, ...) are not packed: the host's, of another version, stay unloaded.
export HWLOC_PLUGINS_PATH=$lamp_mpi/lib/hwloc
export PATH=$lamp_mpi/bin:$PATH
export LD_LIBRARY_PATH=$lamp_mpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# One host: ranks started by mpirun itself (plm isolated: without it Open MPI 4 stops where
# there is no ssh or rsh, even for local ranks), ob1 over self and shared memory (vader) without
# the single-copy path (CMA needs ptrace rights that containers often lack), nothing else tried.
export OMPI_MCA_plm=isolated OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
# vader's segments live in /dev/shm; where there is none to write, in the temporary folder.
[[ -d /dev/shm && -w /dev/shm ]] || export OMPI_MCA_btl_vader_backing_directory=${TMPDIR:-/tmp}
# The GPU machine runs commands as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENV
  {
    echo "$version from $(dirname "$orterun") and $pkglibdir, relocated (source env.sh)"
    echo "components packed: $kept; left behind: ${left[*]}"
  } >"$m/PACKED"
  mpi_bytes=$(du -sb "$m" | cut -f1)
  mpi_note="$version: $(awk -v b="$mpi_bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB unpacked, $kept MCA components (${#left[@]} left behind: ${left[*]})"
  return 0
}
if [[ $mpi == 1 ]]; then
  if pack_mpi; then
    # Its share of the archive: the same compression over mpi/ and mpi.so alone.
    mpi_xz=$(tar -C "$root" -cf - mpi build/plugins/comm/mpi.so | xz -9 -T0 | wc -c)
    mpi_note+="; $(awk -v b="$mpi_xz" 'BEGIN { printf "%.1f", b / 1048576 }') MiB compressed"
    echo "gpu-bundle: mpi/: $mpi_note"
  else
    echo "gpu-bundle: WARNING: packing without MPI ($mpi_note): stage j will be skipped on the GPU machine" >&2
    rm -rf "$root/mpi" "$root/build/plugins/comm/mpi.so"
    mpi_note="not packed: $mpi_note"
  fi
else
  mpi_note="not packed (--no-mpi)"
fi
mapfile -t elves < <(find "$root/build" "$root/mpi" -type f \( -name '*.so' -o -perm -u+x \) 2>/dev/null)

# The newest glibc symbol version the packed files need: gpu-check.sh compares it with the GPU
# machine's C library.
glibc_needed=$( (for e in "${elves[@]}" "$root"/lib/* "$root"/mpi/lib/*; do [[ -f $e ]] && objdump -T "$e" 2>/dev/null; done; true) |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)

# ---- the CPU reference accuracies (gpu-check.sh stage e) -----------------------------------------
if [[ $reference == 1 ]]; then
  echo "gpu-bundle: training one epoch on the CPU under fp32, fp16 and bf16 for cpu_reference.txt ..."
  reflog=$(mktemp -d)
  OUT=$reflog scripts/gpu-check.sh --tree --build="$build" --write-cpu-reference="$root/cpu_reference.txt" ||
    die "the CPU reference runs failed (logs in $reflog/gpu-check)"
  rm -rf "$reflog"
fi

{
  echo "lamp GPU bundle for scripts/gpu-check.sh"
  echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $build"
  echo "glibc needed: ${glibc_needed:-unknown}"
  echo "mpi: $mpi_note"
  [[ -d $root/mpi ]] && echo "mpi glibc needed: $( (for e in "$root"/mpi/bin/* "$root"/mpi/lib/*.so* "$root"/mpi/lib/*/*.so; do objdump -T "$e" 2>/dev/null; done; true) |
    grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
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
