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

// The spec's learned tensors and the host-made position tables as the reference kernels and the GEMM path's
// row kernels read them (device pointers; null where the spec has none).
struct AttnTables {
  const float* sink = nullptr;  // [H] (stride sink_stride) when cfg.sink
  int64_t sink_stride = 0;
  const float* slopes = nullptr;     // alibi: [H], from the host
  const int32_t* buckets = nullptr;  // relative: bucket of each distance n < T, from the host
  const float* rel = nullptr;        // relative: relative_bias [H, num_buckets]
  int64_t rel0 = 0, rel1 = 0;
};
// attention.cu: the tables of a call, copied into the attention scratch slot behind `extra_bytes` of per-call
// device scratch (returned in *extra).
AttnTables attn_tables(CudaBackend& be, const AttentionDims& d, const ops::AttentionSpec& spec, size_t extra_bytes,
                       void** extra);
// The position bias g_h(i - j') of query i and positional key j' (0 for a lead key, jp < 0).
SL_HD float attn_position_bias(const AttnTables& t, const math::AttnConfig& cfg, int64_t h, int64_t i,
                               int64_t jp) {
  if (jp < 0) return 0.0f;
  if (cfg.pos_bias == ops::AttnPosBias::alibi) return t.slopes[h] * float(jp - i);  // -slope * (i - j')
  if (cfg.pos_bias == ops::AttnPosBias::relative)
    return t.rel[h * t.rel0 + int64_t(t.buckets[i - jp > 0 ? i - jp : 0]) * t.rel1];
  return 0.0f;
}
SL_HD float attn_sink_of(const AttnTables& t, const math::AttnConfig& cfg, int64_t h) {
  return cfg.sink ? t.sink[h * t.sink_stride] : 0.0f;
}
// attention.cu: d_sink_logit[h] = sum over (b, i) of dsink_rows[(b H + h) T + i] and d_relative_bias[h, c] = sum
// over b and the distances n of bucket c of d_dist[(b H + h) T + n] (each when the spec asks for it; written),
// one thread per output, in index order.
void attn_param_grads(CudaBackend& be, const AttnCallGeom& g, const AttnTables& t, const ops::AttentionSpec& spec,
                      const double* dsink_rows, const double* d_dist);

// attention_cudnn.cpp: cuDNN's fused SDPA (bf16 inside).
void cudnn_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d);
void cudnn_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d);

// attention_gemm.cu: the GEMM path for every spec (bf16 tensors): cuBLASLt products and fused row kernels.
void gemm_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                            const ops::AttentionSpec& spec, const AttentionDims& d);
void gemm_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                             Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                             const AttentionDims& d);

// attention_flash.cu: the flash-style kernel for sigmoid / elu+1 / identity (bf16 tensor cores inside).
void flash_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d);
void flash_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d);

}  // namespace sinklab::cuda
