// Which kernel runs an attention call: the one place that decides (docs/DESIGN.md, "The GPU path").
//
//   cudnn      cuDNN's fused SDPA (cuda/attention_cudnn.cpp): sim exp, norm sum with alpha 1, causal or
//              sliding-window mask, no position bias or ALiBi (cudnn-frontend's slopes, get_alibi_slope, are
//              the released code's rule, math::attn_alibi_slope, for any H), the learned sink logit (cuDNN >= 9.13,
//              not with one query), no lead keys, head_dim a multiple of 8 up to 128. bf16 inside: bf16 tensors
//              are read and written in place (strided views), f32 ones converted.
//   flash      sinklab's flash-style kernel (cuda/attention_flash.cu): sim sigmoid (any bias),
//              elu-plus-one, identity; norm one or sum (any alpha); causal, sliding-window, prefix-LM masks;
//              lead keys; no position bias, no sink logit; head_dim a multiple of 8 up to 128. bf16 inside.
//   gemm       the GEMM path (cuda/attention_gemm.cu): every spec (every sim, norm, mask, position bias, the
//              sink logit, lead keys, any head dim) with bf16 tensors, the scores of one head of the batch
//              materialised in bf16 through batched cuBLASLt GEMMs and normalised by one fused row kernel;
//              T up to kAttnGemmMaxQueries.
//   reference  the reference kernels (the CPU backend; cuda/attention.cu on a GPU): every spec and call (a
//              dtype they cannot take is refused by the op's own checks, naming the op and the tensor).
//
// auto takes the first of cudnn, flash, gemm, reference that can run the call. A named kernel (--attn-kernel)
// runs or is refused with one line naming --attn-kernel and why. On the CPU backend only the reference
// exists: auto and reference run it, cudnn, flash and gemm are refused (not silently mapped: a job file that
// asks for a GPU kernel gets an error on the CPU, not a different kernel).
// A call that writes the T x T probs matrix (the probe) always runs the reference: the fast kernels never
// hold that matrix. Its stats are the same function as the fast kernels' (for softmax log Z, else the
// row reduction, attention_math.hpp), so a backward may run another kernel than its forward.
#pragma once

#include <cstdint>
#include <string>

#include "backend/ops.hpp"
#include "core/tensor.hpp"

namespace sinklab::ops {

// What, beyond the spec, the choice depends on.
struct AttnCall {
  DeviceKind device = DeviceKind::cpu;
  DType dtype = DType::f32;      // of q, k, v
  int64_t head_dim = 0;
  bool probs = false;            // the call also writes probs [B,H,T,S]
  int64_t cudnn_version = 0;     // cudnnGetVersion() of the loaded library (e.g. 91900), 0: none
  int64_t queries = 0;           // T of the call's q; 0: not known (the model-level choice)
};

struct AttnKernelChoice {
  AttnKernel kernel = AttnKernel::reference;
  std::string reason;  // why this kernel (auto: why the faster ones could not)
};

// The longest sequence the GEMM path takes: its scratch is 2 B T S bf16 values (one head of the batch's
// scores and their gradients), 4 GiB at B = 8, T = S = 16384.
inline constexpr int64_t kAttnGemmMaxQueries = 16384;

const char* attn_kernel_name(AttnKernel kernel);  // auto | cudnn | flash | gemm | reference
// Parses an --attn-kernel value; throws naming the flag and the valid values.
AttnKernel parse_attn_kernel(const std::string& text);

// The one builder of a call: the device, dtype and head dim of q, k, v, whether it writes probs, and the
// loaded cuDNN's version on a CUDA device.
AttnCall attn_call(const Device& device, DType dtype, int64_t head_dim, bool probs);
// The call of an op on q [B,T,H,dh] (its device, dtype and head dim).
AttnCall attn_call_of(const Tensor& q, bool probs);

// Why `kernel` (cudnn, flash, gemm or reference) cannot run the call; empty when it can.
std::string attn_kernel_unfit(AttnKernel kernel, const AttentionSpec& spec, const AttnCall& call);

// The kernel that runs the call, for the request spec.kernel. Throws sinklab::Error
// "--attn-kernel <name>: <reason>" when the requested kernel cannot run it.
AttnKernelChoice choose_attention_kernel(const AttentionSpec& spec, const AttnCall& call);

// What one attention call computes and moves on the kernel that runs it: the step ledger's and the roofline's
// model (bench/README.md, "Attention on a GPU, issue #55"). flops: the matrix products' multiply-adds x 2 as
// the kernel computes them (cuDNN: the visible pairs, 2 products forward and 5 backward; the flash kernel: its
// tiles of 64 (32 in the backward), 2 and 7 products; the GEMM path: whole T x S squares, 2 and 5; the
// reference: its dot products, scores recomputed per pass); bytes: device-memory reads and writes of the
// operands, the GEMM path's scores and the f32 <-> bf16 copies around cuDNN and the WMMA flash kernel with f32
// tensors (tiles re-read from L2 not counted); launches: kernels and library calls.
struct AttnCost {
  double flops = 0.0, bytes = 0.0;
  int64_t launches = 0;
};
struct AttnShape {
  int64_t B = 0, T = 0, H = 0, Hkv = 0, dh = 0;
  DType dtype = DType::f32;  // of q, k, v (stats f32)
};
AttnCost attention_cost(AttnKernel kernel, const AttentionSpec& spec, const AttnShape& shape, bool backward);

}  // namespace sinklab::ops
