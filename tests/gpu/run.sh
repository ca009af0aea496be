#!/usr/bin/env bash
# The GPU check in one command, for a GPU machine without network (nvcc, CMake and PyTorch there; no
# MPI / HDF5 / Boost / OpenBLAS / oneDNN / GoogleTest dev files): configures sinklab with SINKLAB_CUDA=ON over
# the bundle env/gpu_bundle.sh made elsewhere, builds, runs `ctest -L gpu` and prints a summary (the
# device, then each gpu test's result), also written to $build/gpu_summary.txt with the commit.
#
#   tests/gpu/run.sh                         build everything, run the gpu tests
#   SINKLAB_GPU_TARGETS="test_cuda_attention test_cuda_rope" tests/gpu/run.sh   build only these
#   tests/gpu/run.sh --prebuilt              no build: run the binaries env/gpu_prebuilt.sh packed
#                                            elsewhere (.gpu_bundle/sinklab-gpu-prebuilt.tar.xz)
#   tests/gpu/run.sh --prebuilt --unpack-only   only put them in place (for the benchmarks)
#
# Environment: SINKLAB_GPU_BUNDLE (default .gpu_bundle), SINKLAB_GPU_BUILD (default build-gpu),
# SINKLAB_GPU_PREBUILT_DIR (--prebuilt: where to unpack, default .gpu_prebuilt), JOBS
# (default: all cores), CTEST_JOBS (gpu tests at once, default 8). With the device tool: carry [".gpu_bundle"] and run `tests/gpu/run.sh`; the
# log and the summary are also copied to $OUT when that is set.
# cuDNN and NCCL (linked by the CUDA build) come from the CUDA toolkit, the system, or PyTorch's pip
# packages (nvidia-cudnn-*, nvidia-nccl-*), in that order.
#
# Exit status: 0 every gpu test passed; 1 configure / build failed or a gpu test failed; 2 no bundle;
# 3 built, but no usable CUDA device (every gpu test skipped).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle_dir=${SINKLAB_GPU_BUNDLE:-$root/.gpu_bundle}
build=${SINKLAB_GPU_BUILD:-$root/build-gpu}
jobs=${JOBS:-$(nproc)}
log="$build/gpu_run.log"
say() { echo "tests/gpu/run.sh: $*"; }

prebuilt=0
[ "${1:-}" = "--prebuilt" ] && prebuilt=1
unpack_only=0  # --prebuilt --unpack-only: the binaries in place and gpu_ld_path written, no tests
[ "${2:-}" = "--unpack-only" ] && unpack_only=1

# ---- CUDA's libraries on this machine: the toolkit's, the system's, or PyTorch's pip packages
site_dirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
find_first() {  # find_first <file pattern> <dirs...>: the first match, shortest name first (libx.so before libx.so.9)
  local pat=$1; shift
  for d in "$@"; do
    [ -d "$d" ] || continue
    local hit
    hit=$(find "$d" -maxdepth 4 -name "$pat" \( -type f -o -type l \) 2>/dev/null | awk '{print length, $0}' | sort -n |
          head -n1 | cut -d' ' -f2-)
    if [ -n "$hit" ]; then echo "$hit"; return 0; fi
  done
  return 1
}
lib_dirs=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu)
py_dirs=()
for s in $site_dirs; do py_dirs+=("$s/nvidia"); done

if [ "$prebuilt" = 1 ]; then
  # ---- a build made elsewhere: unpack it where its absolute paths point, find its libraries
  archive="$bundle_dir/sinklab-gpu-prebuilt.tar.xz"
  [ -f "$archive" ] || { say "no prebuilt archive at $archive: run env/gpu_prebuilt.sh where the build is, then carry .gpu_bundle"; exit 2; }
  unpacked=${SINKLAB_GPU_PREBUILT_DIR:-$root/.gpu_prebuilt}  # where the archive is unpacked
  rm -rf "$unpacked" && mkdir -p "$unpacked"
  tar -C "$unpacked" --strip-components=1 -xJf "$archive" || { say "cannot unpack $archive"; exit 1; }
  { read -r origin_root; read -r origin_build; read -r origin_commit; } < "$unpacked/ORIGIN"
  if [ "$(cd "$origin_root" 2>/dev/null && pwd -P)" != "$(cd "$root" && pwd -P)" ]; then
    [ -e "$origin_root" ] && { say "the build's source root $origin_root exists here and is not this checkout"; exit 1; }
    mkdir -p "$(dirname "$origin_root")" && ln -s "$root" "$origin_root"
    say "linked $origin_root -> $root (the prebuilt binaries' paths)"
  fi
  build=$origin_build
  mkdir -p "$build" && cp -a "$unpacked/build/." "$build/"
  log="$build/gpu_run.log"
  : > "$log"
  ld_dirs="$unpacked/lib"
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
    hit=$(find_first "$so" "${lib_dirs[@]}" "${py_dirs[@]}") || { say "no $so found (CUDA toolkit, system, PyTorch's nvidia-*)"; exit 1; }
    ld_dirs="$ld_dirs:$(dirname "$hit")"
    say "$so: $hit"
  done
  export LD_LIBRARY_PATH="$ld_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$build/gpu_ld_path"  # for the benchmarks run after this script
  say "prebuilt at commit $origin_commit, unpacked into $build"
  missing=$(for b in "$build"/bin/*; do ldd "$b" | grep 'not found'; done | sort -u)
  [ -z "$missing" ] || { say "libraries not found: $missing"; exit 1; }
  [ "$unpack_only" = 1 ] && exit 0
fi

archive="$bundle_dir/sinklab-gpu-bundle.tar.xz"
if [ "$prebuilt" = 0 ]; then
if [ ! -f "$archive" ]; then
  say "no bundle at $archive: run env/gpu_bundle.sh on a machine with the dev packages, then carry .gpu_bundle"
  exit 2
fi
mkdir -p "$build"
: > "$log"
# ---- the bundle, unpacked once per archive
bundle="$build/_bundle"
stamp=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$(cat "$bundle/.stamp" 2>/dev/null)" != "$stamp" ]; then
  say "unpacking $archive"
  rm -rf "$bundle" && mkdir -p "$bundle"
  tar -C "$bundle" --strip-components=1 -xJf "$archive" || { say "cannot unpack $archive"; exit 1; }
  echo "$stamp" > "$bundle/.stamp"
fi

# ---- cuDNN and NCCL libraries, nccl.h
cudnn=$(find_first 'libcudnn.so*' "${lib_dirs[@]}" "${py_dirs[@]}") || { say "no libcudnn.so found (CUDA toolkit, system, PyTorch's nvidia-cudnn)"; exit 1; }
nccl=$(find_first 'libnccl.so*' "${lib_dirs[@]}" "${py_dirs[@]}") || { say "no libnccl.so found (CUDA toolkit, system, PyTorch's nvidia-nccl)"; exit 1; }
nccl_inc=""
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ ! -f /usr/include/nccl.h ]; then
  h=$(find_first nccl.h "${py_dirs[@]}") || h="$bundle/include/nccl/nccl.h"
  [ -f "$h" ] || { say "no nccl.h found"; exit 1; }
  nccl_inc=$(dirname "$h")
fi
# cudnn.h: the toolkit's or the one beside the library found (PyTorch's nvidia-cudnn wheel has include/),
# else the bundle's (cuDNN 9.19 headers: cudnn-frontend checks the loaded library's version at run time).
cudnn_inc=""
if [ ! -f /usr/local/cuda/include/cudnn.h ] && [ ! -f /usr/include/cudnn.h ]; then
  h=$(find_first cudnn.h "$(dirname "$(dirname "$cudnn")")" "${py_dirs[@]}") || h="$bundle/include/cudnn/cudnn.h"
  [ -f "$h" ] || { say "no cudnn.h found"; exit 1; }
  cudnn_inc=$(dirname "$h")
fi
say "cuDNN $cudnn, NCCL $nccl${nccl_inc:+, nccl.h from $nccl_inc}${cudnn_inc:+, cudnn.h from $cudnn_inc}"

# ---- configure and build. The bundle's libraries (and cuDNN / NCCL) are found through the binaries'
# RPATH (not RUNPATH: it also serves the libraries those load), so nothing else needs LD_LIBRARY_PATH.
rpath="$bundle/lib;$(dirname "$cudnn");$(dirname "$nccl")"
extra_flags=()
inc_flags=""
for d in $nccl_inc $cudnn_inc; do inc_flags="$inc_flags -isystem $d"; done
if [ -n "$inc_flags" ]; then
  extra_flags+=("-DCMAKE_CXX_FLAGS=$inc_flags" "-DCMAKE_CUDA_FLAGS=$inc_flags")
fi
generator=()  # Ninja for a new build dir when there is one; an existing build keeps its generator
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja > /dev/null; then generator=(-G Ninja); fi
say "configuring $build (log: $log)"
cmake -S "$root" -B "$build" "${generator[@]}" -DSINKLAB_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_MODULE_PATH="$bundle/cmake" \
  -DSINKLAB_BLAS_LIB="$bundle/lib/libopenblas.so" -DSINKLAB_BLAS_INCLUDE="$bundle/include/openblas" \
  -DSINKLAB_DNNL_LIB="$bundle/lib/libdnnl.so" -DSINKLAB_DNNL_INCLUDE="$bundle/include/dnnl" \
  -DSINKLAB_CUDNN_LIB="$cudnn" -DSINKLAB_NCCL_LIB="$nccl" \
  -DSINKLAB_CUDNN_FRONTEND_DIR="$bundle/include/cudnn_frontend" \
  -DCMAKE_BUILD_RPATH="$rpath" -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" \
  "${extra_flags[@]}" >> "$log" 2>&1 || { tail -n 40 "$log"; say "FAILED: configure"; exit 1; }
targets=()
for t in ${SINKLAB_GPU_TARGETS:-}; do targets+=(--target "$t"); done
say "building${SINKLAB_GPU_TARGETS:+ $SINKLAB_GPU_TARGETS} with $jobs jobs"
start=$(date +%s)
cmake --build "$build" -j "$jobs" "${targets[@]}" >> "$log" 2>&1 || { grep -E "error|Error" "$log" | head -n 30; tail -n 20 "$log"; say "FAILED: build"; exit 1; }
say "built in $(( $(date +%s) - start )) s"
fi  # the build (not --prebuilt)

# ---- the device and the gpu tests
device="none seen by nvidia-smi"
if command -v nvidia-smi > /dev/null; then
  d=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1)
  [ -n "$d" ] && device="$d"
fi
say "device: $device"
# The device probe (sinklab-gpuinfo): versions, memory, bf16 GEMM TFLOP/s and copy bandwidth, into the log.
if [ -x "$build/bin/sinklab-gpuinfo" ]; then
  "$build/bin/sinklab-gpuinfo" 2>&1 | tee -a "$log" | sed 's/^/  /'
fi
ctest_out="$build/gpu_ctest.log"
(cd "$build" && ctest -L gpu -j "${CTEST_JOBS:-8}" --output-on-failure --timeout 600) > "$ctest_out" 2>&1
ctest_rc=$?
cat "$ctest_out" >> "$log"
passed=$(grep -cE ' Passed +[0-9.]+ sec' "$ctest_out")
skipped=$(grep -cE '\*\*\*Skipped|Skipped +[0-9.]+ sec' "$ctest_out")
# ctest's last line: "99% tests passed, 2 tests failed out of 190", or "100% tests passed out of 190"
total=$(sed -nE 's/.*% tests passed.* out of ([0-9]+).*/\1/p' "$ctest_out" | tail -n1)
failed=$(sed -nE 's/.*% tests passed, ([0-9]+) tests failed out of.*/\1/p' "$ctest_out" | tail -n1)
[ -n "$total" ] && [ -z "$failed" ] && failed=0
summary="$build/gpu_summary.txt"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "unknown (no git checkout)")
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " + local changes" || true)
if [ "$prebuilt" = 1 ]; then commit="${origin_commit:0:7} (the prebuilt binaries' commit)"; dirty=""; fi
{
echo "==== sinklab gpu tests, commit $commit$dirty, $(date -u +%FT%TZ)"
echo "==== device: $device"
# ctest's per-test lines: "  3/24 Test  #7: CudaRope.MatchesCpu ......   Passed    0.21 sec"
# (a parameterised case carries "  # GetParam() = ..." after its name)
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+)( +# GetParam\(\) = [^ ]*)? \.*[ *]*([A-Za-z][A-Za-z ()]*[A-Za-z)]) +[0-9.]+ sec.*/\3\t\1/p' "$ctest_out" |
  awk -F'\t' '{printf "  %-10s %s\n", $1, $2}'
echo "==== ${total:-0} gpu tests: $passed passed, ${failed:-?} failed, $skipped skipped (full log: $log)"
} | tee "$summary"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$log" "$summary" "$OUT/"; fi
if [ "$ctest_rc" -ne 0 ] || [ -z "$total" ] || [ "${failed:-1}" != 0 ]; then
  say "FAILED: gpu tests (ctest status $ctest_rc)"
  exit 1
fi
if [ "$total" -gt 0 ] && [ "$skipped" -eq "$total" ]; then
  say "no usable CUDA device: every gpu test skipped (built, nothing checked)"
  exit 3
fi
say "ok"
