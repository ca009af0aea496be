#include "backend/attention_dispatch.hpp"

#include <algorithm>

#include "backend/attention_math.hpp"
#include "backend/backend.hpp"
#include "core/error.hpp"

namespace sinklab::ops {

namespace {

const char* sim_name(AttnSim s) { return enum_name(kAttnSimNames, s); }
const char* norm_name(AttnNorm n) { return enum_name(kAttnNormNames, n); }

// The --attn-kernel values.
constexpr EnumName<AttnKernel> kAttnKernelNames[] = {{AttnKernel::auto_select, "auto"},
                                                     {AttnKernel::cudnn, "cudnn"},
                                                     {AttnKernel::flash, "flash"},
                                                     {AttnKernel::gemm, "gemm"},
                                                     {AttnKernel::reference, "reference"}};

// What every fast kernel needs of the call: a CUDA device, f32 or bf16 tensors (all of one dtype: the op
// checks that), no probs.
std::string fast_kernel_unfit(const AttnCall& call) {
  if (call.device != DeviceKind::cuda) return "needs a CUDA device (this attention runs on the CPU)";
  if (call.dtype != DType::f32 && call.dtype != DType::bf16)
    return "the CUDA backend's attention takes f32 or bf16 tensors";
  if (call.probs) return "the call writes the T x T probs matrix, which only the reference kernel forms";
  return "";
}

// The tiles of cuDNN and the flash kernel: a head dim that is a multiple of 8 up to 128.
std::string tiled_head_dim_unfit(const AttnCall& call) {
  if (call.head_dim % 8 != 0 || call.head_dim > 128 || call.head_dim <= 0)
    return strfmt("needs a head dim that is a multiple of 8 and at most 128 (this one: %lld)",
                  (long long)call.head_dim);
  return "";
}

std::string cudnn_unfit(const AttentionSpec& s, const AttnCall& call) {
  if (std::string why = fast_kernel_unfit(call); !why.empty()) return why;
  if (std::string why = tiled_head_dim_unfit(call); !why.empty()) return why;
  if (call.cudnn_version <= 0) return "no cuDNN library is loaded";
  if (s.sim != AttnSim::exp) return strfmt("cuDNN computes softmax (sim exp), not sim %s", sim_name(s.sim));
  if (s.norm != AttnNorm::sum || s.norm_alpha != 1.0)
    return s.norm != AttnNorm::sum ? strfmt("cuDNN normalises by the sum, not norm %s", norm_name(s.norm))
                                   : strfmt("cuDNN's rows sum to 1, not alpha %g", s.norm_alpha);
  if (s.mask == AttnMask::prefix_lm) return "cuDNN has no prefix-LM mask";
  if (s.pos_bias == AttnPosBias::relative) return "cuDNN has no T5 relative position bias";
  if (s.lead_keys > 0) return "lead keys (K/KV biases) seen by every query are no cuDNN mask";
  if (s.sink_logit.defined() && call.cudnn_version < 91300)
    return strfmt("the sink logit needs cuDNN >= 9.13 (loaded: %lld)", (long long)call.cudnn_version);
  // Seen on an H200 (cuDNN 9.14): "decode only mode, i.e. s_q == 1, not supported with sink_token".
  if (s.sink_logit.defined() && call.queries == 1) return "cuDNN refuses a sink logit with one query (T = 1)";
  return "";
}

std::string flash_unfit(const AttentionSpec& s, const AttnCall& call) {
  if (std::string why = fast_kernel_unfit(call); !why.empty()) return why;
  if (std::string why = tiled_head_dim_unfit(call); !why.empty()) return why;
  if (s.sim != AttnSim::sigmoid && s.sim != AttnSim::elu_plus_one && s.sim != AttnSim::identity)
    return strfmt("the flash kernel computes sim sigmoid, elu-plus-one or identity, not %s", sim_name(s.sim));
  if (s.norm != AttnNorm::one && s.norm != AttnNorm::sum)
    return strfmt("the flash kernel normalises by one or the sum, not norm %s", norm_name(s.norm));
  if (s.pos_bias != AttnPosBias::none) return "the flash kernel has no position bias (ALiBi, T5 relative)";
  if (s.sink_logit.defined()) return "the flash kernel has no sink logit";
  return "";
}

// The GEMM path (cuda/attention_gemm.cu) computes every spec; it holds one head's scores and gradients of the
// whole batch, 2 B T S bf16 values (kAttnGemmMaxQueries bounds T).
std::string gemm_unfit(const AttnCall& call) {
  if (std::string why = fast_kernel_unfit(call); !why.empty()) return why;
  if (call.dtype != DType::bf16)
    return "the GEMM path takes bf16 tensors (an f32 call keeps the reference kernel's f32 arithmetic)";
  if (call.head_dim <= 0) return "needs a head dim >= 1";
  if (call.queries > kAttnGemmMaxQueries)
    return strfmt("the GEMM path holds T x T scores, for T up to %lld (this call: %lld)",
                  (long long)kAttnGemmMaxQueries, (long long)call.queries);
  return "";
}

}  // namespace

const char* attn_kernel_name(AttnKernel kernel) { return enum_name(kAttnKernelNames, kernel); }

AttnCall attn_call(const Device& device, DType dtype, int64_t head_dim, bool probs) {
  AttnCall c;
  c.device = device.kind;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.probs = probs;
  c.cudnn_version = device.is_cuda() ? cudnn_version() : 0;
  return c;
}

AttnCall attn_call_of(const Tensor& q, bool probs) {
  AttnCall c = attn_call(q.device, q.dtype, q.ndim == 4 ? q.shape[3] : 0, probs);
  c.queries = q.ndim == 4 ? q.shape[1] : 0;
  return c;
}

AttnKernel parse_attn_kernel(const std::string& text) { return parse_enum(kAttnKernelNames, text, "attn-kernel"); }

std::string attn_kernel_unfit(AttnKernel kernel, const AttentionSpec& spec, const AttnCall& call) {
  switch (kernel) {
    case AttnKernel::cudnn: return cudnn_unfit(spec, call);
    case AttnKernel::flash: return flash_unfit(spec, call);
    case AttnKernel::gemm: return gemm_unfit(call);
    case AttnKernel::reference: return "";  // every call: its own checks refuse a dtype, naming the op
    case AttnKernel::auto_select: break;
  }
  return "auto is a request, not a kernel";
}

AttnKernelChoice choose_attention_kernel(const AttentionSpec& spec, const AttnCall& call) {
  const AttnKernel want = spec.kernel;
  if (want != AttnKernel::auto_select) {
    // The probe's probs come from the reference whatever was asked; on the CPU a GPU kernel is refused first.
    if (call.probs && want != AttnKernel::reference && call.device == DeviceKind::cuda)
      return {AttnKernel::reference, "the call writes the T x T probs matrix, which only the reference kernel forms"};
    const std::string why = attn_kernel_unfit(want, spec, call);
    SL_CHECK(why.empty(), "--attn-kernel %s: %s", attn_kernel_name(want), why.c_str());
    return {want, "requested by --attn-kernel"};
  }
  std::string reason;
  for (AttnKernel k : {AttnKernel::cudnn, AttnKernel::flash, AttnKernel::gemm}) {
    const std::string why = attn_kernel_unfit(k, spec, call);
    if (why.empty()) return {k, reason.empty() ? "fastest kernel that fits" : reason};
    reason += strfmt("%s%s: %s", reason.empty() ? "" : "; ", attn_kernel_name(k), why.c_str());
  }
  return {AttnKernel::reference, reason};
}

namespace {

// The (query, key) pairs one head's queries see, and those of the tiles of `rows` x `cols` that hold at least one
// (the flash kernel's work: it computes whole tiles).
struct Pairs {
  double visible = 0.0, tiled = 0.0;
};
Pairs visible_pairs(const AttentionSpec& spec, int64_t T, int64_t rows, int64_t cols) {
  const math::AttnConfig c = math::attn_config(spec);
  const int64_t L = c.lead_keys, S = T + L;
  Pairs p;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t kb = math::attn_key_begin(c, i, S), ke = math::attn_key_end(c, i, S);
    p.visible += double(L + (ke > kb ? ke - kb : 0));
  }
  for (int64_t i0 = 0; i0 < T; i0 += rows) {
    const int64_t i1 = std::min(T, i0 + rows);
    const int64_t kb = math::attn_key_begin(c, i0, S), ke = math::attn_key_end(c, i1 - 1, S);
    const int64_t tiles = (L + cols - 1) / cols + (ke > kb ? (ke - kb + cols - 1) / cols : 0);
    p.tiled += double(tiles) * double(rows) * double(cols);
  }
  return p;
}

}  // namespace

AttnCost attention_cost(AttnKernel kernel, const AttentionSpec& spec, const AttnShape& a, bool backward) {
  const bool bwd = backward;
  const int64_t S = a.T + spec.lead_keys;
  const double e = double(dtype_size(a.dtype)), BH = double(a.B * a.H), dh = double(a.dh);
  const double q_elems = double(a.B * a.T * a.H) * dh, kv_elems = double(a.B * S * a.Hkv) * dh;
  const double stats = 4.0 * BH * double(a.T);
  // The operands: q, k, v read and out written forward; q, k, v, out, d_out read, d_q, d_k, d_v written backward.
  const double io = bwd ? (3.0 * q_elems + 2.0 * kv_elems + q_elems + 2.0 * kv_elems) * e + stats
                        : (2.0 * q_elems + 2.0 * kv_elems) * e + stats;
  const Pairs p = visible_pairs(spec, a.T, 64, bwd ? 32 : 64);
  const double square = double(a.T) * double(S);
  AttnCost c;
  c.bytes = io;
  switch (kernel) {
    case AttnKernel::cudnn:
      c.flops = 2.0 * BH * p.visible * dh * (bwd ? 5.0 : 2.0);
      c.launches = 1;
      if (a.dtype == DType::f32) {  // the bf16 copies of every operand: an element's 4 bytes become 4 + 2
        c.bytes += io;               // by the copy and 2 by cuDNN, 8 in all
        c.launches += bwd ? 8 : 4;
      }
      break;
    case AttnKernel::flash:
      c.flops = 2.0 * BH * p.tiled * dh * (bwd ? 7.0 : 2.0);
      c.launches = bwd ? 2 : 1;
      break;
    case AttnKernel::gemm: {
      c.flops = 2.0 * BH * square * dh * (bwd ? 5.0 : 2.0);
      // bf16 scores a head: forward S written, its visible part read, P written and read; backward S and dP
      // written, their visible parts read, P and dS written and read by three products.
      const double sq = 2.0 * BH * square, vis = 2.0 * BH * p.visible;
      c.bytes += bwd ? 2.0 * sq + 2.0 * vis + 2.0 * sq + 3.0 * sq : sq + vis + 2.0 * sq;
      c.launches = a.H * (bwd ? 6 : 3) + (bwd && spec.pos_bias == AttnPosBias::relative ? a.H : 0);
      break;
    }
    case AttnKernel::reference:
    case AttnKernel::auto_select: {
      const double passes = math::attn_uses_max(math::attn_config(spec)) ? 3.0 : 2.0;
      c.flops = 2.0 * BH * p.visible * dh * (bwd ? 7.0 : passes);
      c.launches = bwd ? 2 : 1;
      break;
    }
  }
  return c;
}

}  // namespace sinklab::ops
