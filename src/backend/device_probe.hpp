// The device probe (issue #27): what a GPU is (name, compute capability, memory, driver and library
// versions) and what it measures through the op API (a square GEMM's TFLOP/s, a device copy's GB/s).
// sinklab-gpuinfo prints it; a CUDA training run stores it beside its MFU (results.h5).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace sinklab {

// What the CUDA runtime and the libraries say about device `index` (nothing is measured).
struct DeviceFacts {
  std::string name;               // e.g. "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  int64_t memory_total = 0, memory_free = 0;  // bytes
  int driver_version = 0, runtime_version = 0;  // CUDA's encoding: 13000 = 13.0
  int64_t cublaslt_version = 0, cudnn_version = 0;
  int nccl_version = 0;           // NCCL_VERSION_CODE of the loaded library, e.g. 22805
};

// The facts of CUDA device `index` (backend.cpp: the CUDA build asks cuda/device_facts.cu); throws one line
// when the build has no CUDA or there is no such device.
DeviceFacts cuda_device_facts(int index);

// The median TFLOP/s of `reps` calls of C = A B with A, B, C [n, n] of dtype `dt` (bf16 on a GPU: the
// matmuls accumulate in f32) on `device`, after one warm-up call; 2 n^3 FLOPs a call.
double measure_gemm_tflops(Device device, DType dt, int64_t n, int reps);
// The median GB/s of `reps` copies of one f32 buffer of `bytes` into another on `device` (each copy reads
// and writes the bytes: 2 x bytes moved), after one warm-up copy.
double measure_copy_gbps(Device device, int64_t bytes, int reps);

// "CUDA 13.0" from CUDA's version encoding; "12.8.1"-style for cuDNN (91900 -> 9.19.0) and NCCL
// (22805 -> 2.28.5).
std::string cuda_version_text(int version);
std::string cudnn_version_text(int64_t version);
std::string nccl_version_text(int version);

// The facts as "key: value" lines (what sinklab-gpuinfo prints and results.h5 stores).
std::string device_facts_text(const DeviceFacts& facts);

}  // namespace sinklab
