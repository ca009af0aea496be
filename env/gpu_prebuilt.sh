#!/usr/bin/env bash
# Packs a CUDA build made here (SINKLAB_CUDA=ON, the library's sm_80 + sm_90 code) for a GPU machine, so
# that the device's short time runs tests instead of compiling them: the binaries the gpu tests and the
# GPU benchmarks run, CTest's files, and the shared libraries they load that a GPU machine may lack
# (MPI, HDF5, Boost, OpenBLAS and what those load; glibc, the compiler's runtime and the CUDA libraries
# excepted: the GPU machine's own). `tests/gpu/run.sh --prebuilt` unpacks it and runs `ctest -L gpu`.
#
#   env/gpu_prebuilt.sh [build_dir]     (default build-cuda) -> .gpu_bundle/sinklab-gpu-prebuilt.tar.xz
#
# The binaries keep this machine's absolute paths (the source root compiled in as SINKLAB_SOURCE_DIR,
# CTest's commands): run.sh links the source root's path here to the checkout there when they differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build-cuda}" && pwd)
out="$root/.gpu_bundle"
archive="$out/sinklab-gpu-prebuilt.tar.xz"
max_bytes=$((48 * 1024 * 1024))  # the working tree (~13 MB) and this under the device tool's 64 MiB
die() { echo "env/gpu_prebuilt.sh: $*" >&2; exit 1; }
grep -q '^SINKLAB_CUDA:STRING=ON' "$build/CMakeCache.txt" 2>/dev/null || die "$build is not a SINKLAB_CUDA=ON build"

# The binaries: every one a gpu-labelled test runs, the programs those tests start, the GPU benchmarks.
mapfile -t tests < <(cd "$build" && ctest -N -V -L gpu | sed -nE 's/.*Test command: ([^ ]+).*/\1/p' | sort -u)
[ "${#tests[@]}" -gt 0 ] || die "no gpu-labelled tests in $build"
bins=("${tests[@]}")
for b in sinklab-pretrain sinklab-sft sinklab-probe sinklab-survey sinklab-gpuinfo sinklab-shard bench_attention_gpu; do
  [ -x "$build/bin/$b" ] || die "$build/bin/$b not built"
  bins+=("$build/bin/$b")
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
p="$stage/prebuilt"
mkdir -p "$p/lib" "$p/build"
printf '%s\n%s\n%s\n' "$root" "$build" "$(git -C "$root" rev-parse HEAD)" > "$p/ORIGIN"  # source root, build dir, commit
for b in "${bins[@]}"; do
  rel=${b#"$build"/}
  mkdir -p "$p/build/$(dirname "$rel")" && cp -a "$b" "$p/build/$rel"
done
# CTest's files: each directory's CTestTestfile.cmake and the test lists gtest_discover_tests wrote.
(cd "$build" && find . -path ./CMakeFiles -prune -o \( -name CTestTestfile.cmake -o -name '*_tests.cmake' \
   -o -name '*_include.cmake' \) -type f -print) | while read -r f; do
  mkdir -p "$p/build/$(dirname "$f")" && cp -a "$build/$f" "$p/build/$f"
done

# Shared libraries: what the binaries load, by soname, except the GPU machine's own.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libresolv\.|libutil\.|libstdc\+\+\.|libgcc_s\.|libgomp\.|libcuda\.|libcudart\.|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
for b in "${bins[@]}"; do ldd "$b"; done | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] || [ -e "$p/lib/$name" ] || cp "$(readlink -f "$path")" "$p/lib/$name"
done

(cd "$p" && find . -type f -printf '%s  %p\n' | sort -k2) > "$stage/MANIFEST"
mkdir -p "$out"
# One xz stream with a 192 MiB dictionary: the binaries share the static library, so each after the
# first costs little.
tar -C "$stage" -cf - prebuilt | xz -T1 --lzma2=preset=6,dict=192MiB > "$archive.tmp"
packed=$(stat -c %s "$archive.tmp")
[ "$packed" -le "$max_bytes" ] || { rm -f "$archive.tmp"; die "the archive is $packed bytes, over $max_bytes"; }
mv "$archive.tmp" "$archive"
cp "$stage/MANIFEST" "$out/MANIFEST.prebuilt"
echo "env/gpu_prebuilt.sh: $archive: $packed bytes ($(du -sb "$p" | cut -f1) unpacked, ${#bins[@]} binaries, $(ls "$p/lib" | wc -l) libraries)"
