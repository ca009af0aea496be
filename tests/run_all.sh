#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing (env/setup.sh), builds the CPU
# configuration and runs every C++ (CTest), MPI and Python test; fuzzes every parser of untrusted input
# for a few seconds each (tests/fuzz/run.sh, clang + libFuzzer / atheris); runs every hand-written CUDA
# kernel under the CPU emulation (tests/gpu/emulate.sh); then compiles the SINKLAB_CUDA=ON
# configuration (every CUDA source, warnings as errors) and runs its gpu-labelled tests, which skip
# without a device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

bash env/setup.sh

echo "== CPU build"
cmake -S . -B build -DSINKLAB_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build build -j"$jobs" >> build.log 2>&1 || { grep -E 'error|Error' -A3 build.log | head -60; exit 1; }

echo "== C++ tests (CTest: cpu, mpi; gpu tests skip without a device)"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900)

echo "== Python tests (pytest)"
SINKLAB_BUILD_DIR="$root/build" SINKLAB_BIN_DIR="$root/build/bin" .venv/bin/python -m pytest tests/python -q

# OpenBLAS and oneDNN pick other kernels on AVX2 and AVX-512 CPUs, with other last bits: the tests that
# claim bit-identity (resume, rank counts) run again on the AVX2 kernels, so an AVX-512 machine catches
# what would fail on AVX2 nodes. (The C++ tests do the same as their ".blas_haswell" copies in CTest.)
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  echo "== Bit-identity tests again on the AVX2 kernels (OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 pytest -m identity)"
  OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 SINKLAB_BUILD_DIR="$root/build" SINKLAB_BIN_DIR="$root/build/bin" \
    .venv/bin/python -m pytest tests/python -q -m identity
fi

echo "== Fuzzing (tests/fuzz/run.sh: every parser of untrusted input, briefly, from its seeds and regression cases)"
bash tests/fuzz/run.sh

echo "== CUDA kernels under the CPU emulation (tests/gpu/emulate.sh: every hand-written kernel and the library calls' layouts against the CPU backend; tests/cpp/gpu/README.md)"
emu_start=$(date +%s)
JOBS="$jobs" bash tests/gpu/emulate.sh
# The tool still catches bugs: one planted bug per kernel file must turn its test red (tests/cpp/gpu/README.md
# lists all 78; `--plant all` builds each planted copy one after another, about half a minute each on two
# cores, too long for CI). memory.cu: a block tree without its barrier; elementwise.cu: AdamW's m store;
# embedding.cu: the sort's row values; norms.cu: the warp butterfly; rope.cu: backward's sin sign;
# cross_entropy.cu: the block tree; linear.cu: a wrong cuBLASLt leading dimension; attention.cu (with
# attention_rows.cuh): the block reduction's barrier; attention_flash.cu: the row sum's partner lane, and the
# barrier after a K/V tile load (caught only under the "warp" thread order); attention_flash_mma.cu: a missing
# cp.async wait; attention_gemm.cu: the wrong key head; attention_cudnn.cpp: swapped strides in the cuDNN graph;
# nccl.cu: the reduce-scatter offset; mamba.cu: index_add_rows' sort values; elementwise.cuh: the contiguous
# kernel's scalar tail; multi_tensor.cu: the chunks' block tree.
JOBS="$jobs" bash tests/gpu/emulate.sh --plant reduce_tree_sync,adamw_m_store,embedding_keys_rows,norm_shuffle,rope_sin_sign,ce_tree_half,lt_ld_a,attn_reduce_sync,flash_lane_pairs,flash_tile_sync,mma_cp_async_wait,gemm_kv_head,cudnn_stride,nccl_reduce_offset,index_keys_rows,ew_tail_start,mt_tree_sync
echo "   (emulation step: $(( $(date +%s) - emu_start )) s)"

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== CUDA build (SINKLAB_CUDA=ON: compiles every CUDA source with warnings as errors)"
  cmake -S . -B build-cuda -DSINKLAB_CUDA=ON -DCMAKE_BUILD_TYPE=Release > build-cuda.log 2>&1 || { cat build-cuda.log; exit 1; }
  cmake --build build-cuda -j"$jobs" >> build-cuda.log 2>&1 || { grep -E 'error|Error' -A3 build-cuda.log | head -60; exit 1; }
  (cd build-cuda && ctest --output-on-failure -L gpu --timeout 300)
else
  echo "== CUDA build skipped: no nvcc on this machine"
fi
