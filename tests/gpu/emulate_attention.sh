#!/usr/bin/env bash
# Runs the CUDA attention kernels' code (src/backend/cuda/attention.cu) on the CPU, under the gpu test
# tests/cpp/gpu/test_cuda_attention.cpp, unchanged: a check of the kernels' logic (indexing, chunking,
# the key-major backward, reductions, barriers) for machines without a GPU. Not part of CI; it says
# nothing about a GPU's numbers or speed. Needs the CPU build (build/, libsinklab.a). A few minutes.
#
#   tests/gpu/emulate_attention.sh [gtest args]     e.g. --gtest_filter=*Partial*
#
# How: attention.cu is rewritten textually into $build/emu/attention_emu.cpp (the CUDA header ->
# tests/gpu/emu/cuda_emu.hpp, __shared__ -> static, kernel<<<grid, block, smem, stream>>>(args) ->
# emu::launch(...)); backend.cpp is compiled again with SINKLAB_HAVE_CUDA=1 so that tensors on cuda:0
# reach the emulated backend; the test links against build/libsinklab.a.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SINKLAB_BUILD_DIR:-$root/build}
emu="$build/emu"
[ -f "$build/libsinklab.a" ] || { echo "tests/gpu/emulate_attention.sh: no $build/libsinklab.a: build the CPU tree first" >&2; exit 2; }
flags_file="$build/tests/cpp/CMakeFiles/test_ops_attention.dir/flags.make"
link_file="$build/tests/cpp/CMakeFiles/test_ops_attention.dir/link.txt"
[ -f "$flags_file" ] && [ -f "$link_file" ] || { echo "tests/gpu/emulate_attention.sh: configure $build with SINKLAB_TESTS=ON first" >&2; exit 2; }
mkdir -p "$emu"
python3 - "$root/src/backend/cuda/attention.cu" "$emu/attention_emu.cpp" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = s.replace('#include "backend/cuda/cuda_common.hpp"', '#include "cuda_emu.hpp"')
# The fast kernels (cuDNN, flash) are not emulated here (tests/gpu/emulate_flash.sh runs the flash kernel):
# their entry points throw, and the emulated device reports no cuDNN, so auto picks no cuDNN.
assert '#include "backend/cuda/attention_kernels.hpp"' in s
s = s.replace('#include "backend/cuda/attention_kernels.hpp"', '')
s = s.replace('#include "cuda_emu.hpp"', '''#include "cuda_emu.hpp"
namespace sinklab::cuda {
void cudnn_attention_forward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&);
void cudnn_attention_backward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&);
void flash_attention_forward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&);
void flash_attention_backward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&);
}''')
s = s.replace('extern __shared__ float smem[];', 'float* smem = emu::dyn_smem();')
s = s.replace('__shared__ ', 'static ')
s, n = re.subn(r'(\w+)<<<(.+?)>>>\((.*?)\);',
               lambda m: 'emu::launch(%s, [&] { %s(%s); });' % (m.group(2), m.group(1), m.group(3)), s, flags=re.S)
assert n >= 5, "expected the attention kernels' launches"
s += '\nnamespace sinklab::cuda {\nint device_count() { return 1; }\nBackend& backend(int) { static CudaBackend b; return b; }\n}\n'
s += '''
namespace sinklab::cuda {
int64_t cudnn_library_version() { return 0; }
void cudnn_attention_forward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&) { SL_FAIL("cuDNN is not emulated"); }
void cudnn_attention_backward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&) { SL_FAIL("cuDNN is not emulated"); }
void flash_attention_forward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&) { SL_FAIL("the flash kernel is not emulated here"); }
void flash_attention_backward(CudaBackend&, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, const ops::AttentionSpec&, const AttentionDims&) { SL_FAIL("the flash kernel is not emulated here"); }
}
'''
open(sys.argv[2], 'w').write(s)
PY
get() { sed -n "s/^$1 = //p" "$flags_file"; }
defines=$(get CXX_DEFINES | sed 's/-DSINKLAB_HAVE_CUDA=0//')
includes="$(get CXX_INCLUDES) -I$root/tests/gpu/emu"
cxxflags=$(get CXX_FLAGS)
cxx=$(awk '{print $1}' "$link_file")
# The test binary's libraries: link.txt after "-o <binary>".
libs=$(sed -E 's/.* -o [^ ]+ //' "$link_file")
cd "$build/tests/cpp"  # link.txt's paths are relative to it
echo "tests/gpu/emulate_attention.sh: compiling"
eval "$cxx $defines -DSINKLAB_HAVE_CUDA=0 $includes $cxxflags -c $emu/attention_emu.cpp -o $emu/attention_emu.o"
eval "$cxx $defines -DSINKLAB_HAVE_CUDA=1 $includes $cxxflags -c $root/src/backend/backend.cpp -o $emu/backend.o"
eval "$cxx $defines -DSINKLAB_HAVE_CUDA=1 $includes $cxxflags -c $root/tests/cpp/gpu/test_cuda_attention.cpp -o $emu/test.o"
eval "$cxx $cxxflags $emu/test.o $emu/attention_emu.o $emu/backend.o -o $emu/test_cuda_attention_emu $libs"
echo "tests/gpu/emulate_attention.sh: running the emulated kernels (one thread per CUDA thread: slow)"
OMP_NUM_THREADS=1 "$emu/test_cuda_attention_emu" "$@"
