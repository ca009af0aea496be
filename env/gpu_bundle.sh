#!/usr/bin/env bash
# Packs, on this machine (which has the dev packages of env/apt-packages.txt), what a CUDA build of
# sinklab needs on a GPU machine that has nvcc, CMake and PyTorch but no network and likely no MPI /
# HDF5 / Boost / OpenBLAS / oneDNN / GoogleTest dev files: their headers, their shared libraries with every
# library those load (glibc and the compiler's runtime excepted: the GPU machine's own), GoogleTest's
# static libraries, and CMake find modules that point at them. tests/gpu/run.sh unpacks and uses it.
#
#   env/gpu_bundle.sh            -> .gpu_bundle/sinklab-gpu-bundle.tar.xz  (+ MANIFEST: files and sizes)
#
# .gpu_bundle/ is ignored by git. It travels to a device machine with the working tree (the device
# tool's `carry: [".gpu_bundle"]`); the tree and the carried paths together must stay under 64 MiB,
# hence one xz archive (OpenBLAS alone is 36 MB unpacked) and the size check below.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.gpu_bundle"
archive="$out/sinklab-gpu-bundle.tar.xz"
max_bytes=$((40 * 1024 * 1024))  # leaves room for the working tree (~9 MB) under the 64 MiB carry limit
arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$arch

die() { echo "env/gpu_bundle.sh: $*" >&2; exit 1; }

# The sources on this machine (Debian 12 packages; env/apt-packages.txt).
mpi_inc=$libdir/openmpi/include
mpi_libs=("$libdir/openmpi/lib/libmpi.so" "$libdir/openmpi/lib/libmpi_cxx.so")
hdf5_inc=/usr/include/hdf5/serial
hdf5_lib=$libdir/hdf5/serial/libhdf5.so
boost_lib=$(ls "$libdir"/libboost_program_options.so.1.* 2>/dev/null | head -n1 || true)
blas_inc=/usr/include/$arch/openblas-openmp
blas_lib=$libdir/openblas-openmp/libopenblas.so
dnnl_inc=/usr/include/oneapi
dnnl_lib=$libdir/libdnnl.so
zlib_lib=$libdir/libz.so
gtest_libs=("$libdir/libgtest.a" "$libdir/libgtest_main.a")
nccl_h=$(ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h 2>/dev/null | head -n1 || true)
for p in "$mpi_inc/mpi.h" "${mpi_libs[@]}" "$hdf5_inc/hdf5.h" "$hdf5_lib" "$boost_lib" "$blas_inc/cblas.h" "$blas_lib" \
         "$dnnl_inc/dnnl/dnnl.h" "$dnnl_lib" \
         "$zlib_lib" /usr/include/zlib.h /usr/include/nlohmann/json.hpp /usr/include/gtest/gtest.h "${gtest_libs[@]}"; do
  [ -n "$p" ] && [ -e "$p" ] || die "missing $p (install the packages of env/apt-packages.txt)"
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b="$stage/bundle"
mkdir -p "$b/include" "$b/lib" "$b/cmake"

# ---- headers, one folder per package (nothing leaks into another package's include path)
cp -a "$mpi_inc" "$b/include/mpi"
mkdir -p "$b/include/hdf5" "$b/include/openblas" "$b/include/zlib" "$b/include/json" "$b/include/gtest" "$b/include/boost"
cp -a "$hdf5_inc"/*.h "$b/include/hdf5/"
cp -a "$blas_inc"/*.h "$b/include/openblas/"
mkdir -p "$b/include/dnnl" && cp -a "$dnnl_inc" "$b/include/dnnl/"  # keeps <oneapi/dnnl/dnnl.h>
cp -a /usr/include/zlib.h /usr/include/zconf.h "$b/include/zlib/"
cp -a /usr/include/nlohmann "$b/include/json/"
cp -a /usr/include/gtest "$b/include/gtest/"
if [ -n "$nccl_h" ]; then mkdir -p "$b/include/nccl" && cp -a "$nccl_h" "$b/include/nccl/"; fi
# cudnn-frontend (header-only, env/cudnn_frontend.sh) and this machine's cuDNN headers, for a GPU machine
# whose cuDNN came without them (PyTorch's wheels ship the library; run.sh prefers headers it finds there).
fe_inc="$root/.deps/cudnn-frontend/include"
[ -f "$fe_inc/cudnn_frontend.h" ] || "$root/env/cudnn_frontend.sh"
mkdir -p "$b/include/cudnn_frontend" && cp -a "$fe_inc" "$b/include/cudnn_frontend/include"  # keeps the name include/
mkdir -p "$b/include/cudnn" && cp -a /usr/local/cuda/include/cudnn*.h "$b/include/cudnn/"
# Boost: only the headers <boost/program_options.hpp> pulls in (the whole of /usr/include/boost is ~180 MB).
echo '#include <boost/program_options.hpp>' > "$stage/po.cpp"
g++ -std=c++20 -M "$stage/po.cpp" | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u |
  while read -r h; do mkdir -p "$b/include/boost/$(dirname "${h#/usr/include/}")" && cp -a "$h" "$b/include/boost/${h#/usr/include/}"; done

# ---- shared libraries: the direct ones under their link names, then every library they load.
# Excluded: glibc and the compiler runtime, which the GPU machine's compiler brings (mixing them breaks).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libresolv\.|libutil\.|libstdc\+\+\.|libgcc_s\.|libgomp\.)'
add_lib() {  # add_lib <path> [link name]: copied under its soname, plus the link name as a symlink
  local real soname
  real=$(readlink -f "$1")
  soname=$(objdump -p "$real" 2>/dev/null | awk '/SONAME/ {print $2}')
  [ -n "$soname" ] || soname=$(basename "$1")
  [ -e "$b/lib/$soname" ] || cp "$real" "$b/lib/$soname"
  if [ -n "${2:-}" ] && [ "$2" != "$soname" ]; then ln -sf "$soname" "$b/lib/$2"; fi
}
direct=("${mpi_libs[@]}" "$hdf5_lib" "$boost_lib" "$blas_lib" "$dnnl_lib" "$zlib_lib")
add_lib "$libdir/openmpi/lib/libmpi.so" libmpi.so
add_lib "$libdir/openmpi/lib/libmpi_cxx.so" libmpi_cxx.so
add_lib "$hdf5_lib" libhdf5.so
add_lib "$boost_lib" libboost_program_options.so
add_lib "$blas_lib" libopenblas.so
add_lib "$dnnl_lib" libdnnl.so
add_lib "$zlib_lib" libz.so
for lib in "${direct[@]}"; do
  ldd "$lib" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] || add_lib "$path"
  done
done
cp -a "${gtest_libs[@]}" "$b/lib/"

# ---- CMake find modules (tests/gpu/run.sh puts $bundle/cmake first in CMAKE_MODULE_PATH): the
# targets CMakeLists.txt links, over the bundle's files only.
cat > "$b/cmake/sinklab_bundle.cmake" <<'EOF'
# Shared by the find modules of the sinklab GPU bundle (env/gpu_bundle.sh).
get_filename_component(SINKLAB_BUNDLE "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
function(sinklab_bundle_target name includes libs)
  if(NOT TARGET ${name})
    add_library(${name} INTERFACE IMPORTED GLOBAL)
    set_target_properties(${name} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${includes}"
      INTERFACE_LINK_LIBRARIES "${libs}" INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${SINKLAB_BUNDLE}/lib")
  endif()
endfunction()
EOF
cat > "$b/cmake/FindMPI.cmake" <<'EOF'
include(${CMAKE_CURRENT_LIST_DIR}/sinklab_bundle.cmake)
sinklab_bundle_target(MPI::MPI_CXX "${SINKLAB_BUNDLE}/include/mpi;${SINKLAB_BUNDLE}/include/mpi/openmpi"
  "${SINKLAB_BUNDLE}/lib/libmpi_cxx.so;${SINKLAB_BUNDLE}/lib/libmpi.so")
set(MPI_FOUND TRUE)
set(MPI_CXX_FOUND TRUE)
# No mpiexec in the bundle: the "mpi" tests are configured but cannot run (run.sh runs -L gpu only).
set(MPIEXEC_EXECUTABLE "mpiexec-not-in-the-gpu-bundle")
set(MPIEXEC_NUMPROC_FLAG "-n")
EOF
cat > "$b/cmake/FindHDF5.cmake" <<'EOF'
include(${CMAKE_CURRENT_LIST_DIR}/sinklab_bundle.cmake)
sinklab_bundle_target(HDF5::HDF5 "${SINKLAB_BUNDLE}/include/hdf5" "${SINKLAB_BUNDLE}/lib/libhdf5.so")
set(HDF5_FOUND TRUE)
EOF
cat > "$b/cmake/FindBoost.cmake" <<'EOF'
include(${CMAKE_CURRENT_LIST_DIR}/sinklab_bundle.cmake)
sinklab_bundle_target(Boost::program_options "${SINKLAB_BUNDLE}/include/boost"
  "${SINKLAB_BUNDLE}/lib/libboost_program_options.so")
set(Boost_FOUND TRUE)
EOF
cat > "$b/cmake/FindZLIB.cmake" <<'EOF'
include(${CMAKE_CURRENT_LIST_DIR}/sinklab_bundle.cmake)
sinklab_bundle_target(ZLIB::ZLIB "${SINKLAB_BUNDLE}/include/zlib" "${SINKLAB_BUNDLE}/lib/libz.so")
set(ZLIB_FOUND TRUE)
EOF
cat > "$b/cmake/Findnlohmann_json.cmake" <<'EOF'
include(${CMAKE_CURRENT_LIST_DIR}/sinklab_bundle.cmake)
sinklab_bundle_target(nlohmann_json::nlohmann_json "${SINKLAB_BUNDLE}/include/json" "")
set(nlohmann_json_FOUND TRUE)
EOF
cat > "$b/cmake/FindGTest.cmake" <<'EOF'
include(${CMAKE_CURRENT_LIST_DIR}/sinklab_bundle.cmake)
find_package(Threads REQUIRED)
sinklab_bundle_target(GTest::gtest "${SINKLAB_BUNDLE}/include/gtest" "${SINKLAB_BUNDLE}/lib/libgtest.a;Threads::Threads")
sinklab_bundle_target(GTest::gtest_main "${SINKLAB_BUNDLE}/include/gtest" "${SINKLAB_BUNDLE}/lib/libgtest_main.a;GTest::gtest")
set(GTest_FOUND TRUE)
set(GTEST_FOUND TRUE)
EOF

# ---- manifest, size check, archive
{
  echo "# sinklab GPU bundle, made by env/gpu_bundle.sh on $(hostname) at $(date -u +%FT%TZ) ($(. /etc/os-release; echo "$PRETTY_NAME"), $arch)"
  echo "# bytes  path"
  (cd "$b" && find . -type f -printf '%s  %p\n' | sort -k2)
} > "$stage/MANIFEST"
raw=$(du -sb "$b" | cut -f1)
mkdir -p "$out"
rm -f "$archive.tmp"
tar -C "$stage" -cf - bundle | xz -T2 -6 > "$archive.tmp"
packed=$(stat -c %s "$archive.tmp")
if [ "$packed" -gt "$max_bytes" ]; then
  rm -f "$archive.tmp"
  die "the archive is $packed bytes, over the $max_bytes allowed (the device tool carries at most 64 MiB with the tree)"
fi
mv "$archive.tmp" "$archive"
cp "$stage/MANIFEST" "$out/MANIFEST"
echo "env/gpu_bundle.sh: $archive: $packed bytes ($raw unpacked, $(grep -vc '^#' "$out/MANIFEST") files)"
