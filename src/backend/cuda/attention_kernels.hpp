// The CUDA attention kernels behind the op's signature, one file each; CudaBackend::attention_forward /
// backward (attention.cu) checks the operands once, asks attention_dispatch.hpp which one runs, and
// calls it. Host-only declarations (no CUDA header).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/op_checks.hpp"
#include "backend/ops.hpp"

namespace sinklab::cuda {

// attention_cudnn.cpp: cuDNN's fused SDPA (bf16 inside).
void cudnn_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d);
void cudnn_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d);

// attention_flash.cu: the flash-style kernel for sigmoid / elu+1 / identity (bf16 tensor cores inside).
void flash_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d);
void flash_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d);

}  // namespace sinklab::cuda
