// The CUDA attention kernels behind the op's signature, one file each; CudaBackend::attention_forward /
// backward (attention.cu) checks the operands once, asks attention_dispatch.hpp which one runs, and
// calls it. Host-only declarations (no CUDA header).
#pragma once

#include <cstdint>

#include "backend/attention_math.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/op_checks.hpp"
#include "backend/ops.hpp"
#include "backend/tensor_rows.hpp"

namespace sinklab::cuda {

// What every hand-written attention kernel reads of a call, passed by value: the shapes, the resolved
// scale, the configuration and the q, k, v rows [B, L, heads, dh] (row (b, l, h)). AttnGeom
// (attention.cu) and FlashGeom (attention_flash.cu) add their outputs and tables.
struct AttnCallGeom {
  int64_t B = 0, T = 0, S = 0, H = 0, Hkv = 0, dh = 0, group = 1;
  float scale = 1.0f;
  math::AttnConfig cfg;
  View3 q, k, v;
};
// attention.cu: the geometry of a call (its checked dims, the spec, q, k, v).
AttnCallGeom attn_call_geom(const AttentionDims& d, const ops::AttentionSpec& spec, const Tensor& q, const Tensor& k,
                            const Tensor& v, const char* op);

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
