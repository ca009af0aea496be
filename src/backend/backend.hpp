// Which backend serves a device, and what a --device flag names on this machine: the factory over the
// Backend interface (backend_interface.hpp). backend.cpp, which defines it, is the one file that knows
// both backends (it creates them); the backends include only the interface.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "backend/backend_interface.hpp"

namespace sinklab {

// The backend for a device (the CUDA one exists only in a SINKLAB_CUDA build; asking for it otherwise
// throws). The list form (an op's tensor operands; undefined ones are skipped) checks that every defined
// tensor lives on the same device; a copy between devices goes to the non-CPU side.
Backend& backend_for(Device device);
Backend& backend_for(std::span<const Tensor> tensors, const char* op);
bool cuda_available();  // a CUDA build and at least one usable device
// The device a --device flag ("cpu" | "cuda") names for this process: the CPU, or CUDA device
// gpu_for(visible devices) (parallel::World::local_gpu: one GPU per rank of the node). One line naming `flag`
// when the value is neither, the build has no CUDA, or no GPU is visible.
Device device_from_flag(const std::string& value, const char* flag, const std::function<int(int)>& gpu_for);
// The same for a kind already parsed (sinklab-pretrain's and sinklab-sft's --device, read with the
// other training settings): the one place a device request meets the machine.
Device resolve_device(DeviceKind kind, const char* flag, const std::function<int(int)>& gpu_for);
int cuda_device_count();  // usable CUDA devices (0 in a build without CUDA)
// cudnnGetVersion() of the loaded cuDNN (e.g. 91900); 0 in a build without CUDA.
int64_t cudnn_version();
// The CPU BLAS that multiplies matrices here, e.g. "OpenBLAS 0.3.21 (Zen kernels, 2 threads)". Its
// kernels differ per CPU (OpenBLAS picks them at run time; OPENBLAS_CORETYPE forces one) and give other
// last bits for the same GEMM: runs are bit-for-bit reproducible only with the same kernels and threads.
std::string cpu_blas_description();
// The description plus, when sinklab replaced OpenBLAS's own kernel choice at start-up
// (cpu/blas_kernels.hpp), what it replaced: the line every binary logs at start and results.h5 keeps.
std::string cpu_blas_summary();

}  // namespace sinklab
