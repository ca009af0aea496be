#!/usr/bin/env bash
# Runs the flash attention kernel's code (src/backend/cuda/attention_flash.cu) on the CPU against the float64
# CPU reference (tests/gpu/emu/flash_emu_main.cpp): a check of its logic (tiling, masks, lead keys, WMMA
# operand layouts, barriers, the two backward kernels) for machines without a GPU. Not part of CI; it says
# nothing about a GPU's numbers or speed. Needs the CPU build (build/, libsinklab.a). About a minute.
#
# How: attention_flash.cu is rewritten textually into $build/emu/attention_flash_emu.cpp (its CUDA headers
# -> tests/gpu/emu/flash_emu.hpp, `extern __shared__` -> the emulated dynamic shared memory,
# kernel<<<grid, block, smem, stream>>>(args) -> emu::launch(...)) and linked with the harness.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SINKLAB_BUILD_DIR:-$root/build}
emu="$build/emu"
[ -f "$build/libsinklab.a" ] || { echo "tests/gpu/emulate_flash.sh: no $build/libsinklab.a: build the CPU tree first" >&2; exit 2; }
flags_file="$build/tests/cpp/CMakeFiles/test_ops_attention.dir/flags.make"
link_file="$build/tests/cpp/CMakeFiles/test_ops_attention.dir/link.txt"
[ -f "$flags_file" ] && [ -f "$link_file" ] || { echo "tests/gpu/emulate_flash.sh: configure $build with the tests first" >&2; exit 2; }
mkdir -p "$emu"
python3 - "$root/src/backend/cuda/attention_flash.cu" "$emu/attention_flash_emu.cpp" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
for inc in ('#include <cuda_bf16.h>', '#include <mma.h>', '#include "backend/cuda/attention_kernels.hpp"'):
    assert inc in s, inc
    s = s.replace(inc, '')
s = s.replace('#include "backend/cuda/cuda_common.hpp"', '#include "flash_emu.hpp"')
n_smem = s.count('extern __shared__ __align__(128) char smem[];')
s = s.replace('extern __shared__ __align__(128) char smem[];', 'char* smem = emu::dyn_smem();')
s, n = re.subn(r'(\w+)<<<(.+?)>>>\((.*?)\);',
               lambda m: 'emu::launch(%s, [&] { %s(%s); });' % (m.group(2), m.group(1), m.group(3)), s, flags=re.S)
assert n_smem == 3 and n == 1, (n_smem, n)
open(sys.argv[2], 'w').write(s)
PY
get() { sed -n "s/^$1 = //p" "$flags_file"; }
defines=$(get CXX_DEFINES)
includes="$(get CXX_INCLUDES) -I$root/tests/gpu/emu -I$root/tests/cpp"
cxxflags="$(get CXX_FLAGS) -Wno-unused-parameter"
cxx=$(awk '{print $1}' "$link_file")
libs=$(sed -E 's/.* -o [^ ]+ //' "$link_file")
cd "$build/tests/cpp"  # link.txt's paths are relative to it
echo "tests/gpu/emulate_flash.sh: compiling"
eval "$cxx $defines $includes $cxxflags -c $emu/attention_flash_emu.cpp -o $emu/attention_flash_emu.o"
eval "$cxx $defines $includes $cxxflags -c $root/tests/gpu/emu/flash_emu_main.cpp -o $emu/flash_emu_main.o"
eval "$cxx $cxxflags $emu/flash_emu_main.o $emu/attention_flash_emu.o -o $emu/flash_emu $libs"
echo "tests/gpu/emulate_flash.sh: running the emulated kernel (one thread per CUDA thread: slow)"
OMP_NUM_THREADS=1 "$emu/flash_emu"
