#include "backend/op_checks.hpp"

#include <algorithm>

namespace sinklab {

MatmulGeometry matmul_geometry(const Tensor& out, const Tensor& a, const Tensor& b, bool transpose_a,
                               bool transpose_b) {
  SL_CHECK((out.ndim == 2 || out.ndim == 3) && a.ndim == out.ndim && b.ndim == out.ndim,
           "matmul: operands must all be 2-D or all 3-D, got out %s, a %s, b %s", out.shape_str().c_str(),
           a.shape_str().c_str(), b.shape_str().c_str());
  const int o = out.ndim - 2;  // index of the row dimension
  MatmulGeometry g;
  g.batch = out.ndim == 3 ? out.shape[0] : 1;
  if (out.ndim == 3)
    SL_CHECK(a.shape[0] == g.batch && b.shape[0] == g.batch, "matmul: batch sizes differ: out %s, a %s, b %s",
             out.shape_str().c_str(), a.shape_str().c_str(), b.shape_str().c_str());
  g.M = out.shape[o];
  g.N = out.shape[o + 1];
  g.K = transpose_a ? a.shape[o] : a.shape[o + 1];
  const int64_t a_m = transpose_a ? a.shape[o + 1] : a.shape[o];
  const int64_t b_k = transpose_b ? b.shape[o + 1] : b.shape[o];
  const int64_t b_n = transpose_b ? b.shape[o] : b.shape[o + 1];
  SL_CHECK(a_m == g.M && b_k == g.K && b_n == g.N, "matmul: shapes do not chain: out %s = a%s %s . b%s %s",
           out.shape_str().c_str(), transpose_a ? "^T" : "", a.shape_str().c_str(), transpose_b ? "^T" : "",
           b.shape_str().c_str());
  for (const Tensor* t : {&out, &a, &b}) {
    SL_CHECK(t->stride[o + 1] == 1 || t->shape[o + 1] == 1, "matmul: innermost dimension of %s must be contiguous",
             t->shape_str().c_str());
    SL_CHECK(t->shape[o] <= 1 || t->stride[o] >= t->shape[o + 1], "matmul: rows of %s overlap (row stride %lld)",
             t->shape_str().c_str(), (long long)t->stride[o]);
  }
  auto ld = [&](const Tensor& t) { return std::max<int64_t>({t.stride[o], t.shape[o + 1], 1}); };
  auto batch_stride = [&](const Tensor& t) { return out.ndim == 3 ? t.stride[0] : int64_t(0); };
  g.ld_out = ld(out);
  g.ld_a = ld(a);
  g.ld_b = ld(b);
  g.stride_out = batch_stride(out);
  g.stride_a = batch_stride(a);
  g.stride_b = batch_stride(b);
  return g;
}

void check_rope_args(const Tensor& out, const Tensor& x, const ops::RopeConfig& cfg, const char* op) {
  SL_CHECK(x.ndim == 4, "%s: expected [B,T,H,dh], got %s", op, x.shape_str().c_str());
  check_same_shape(out, x, op, "out", "x");
  const int64_t dh = x.shape[3];
  SL_CHECK(cfg.rotary_dim > 0 && cfg.rotary_dim % 2 == 0 && cfg.rotary_dim <= dh,
           "%s: rotary_dim %d must be even and in (0, head_dim %lld]", op, cfg.rotary_dim, (long long)dh);
  SL_CHECK(cfg.base > 0.0, "%s: rope base %g must be positive", op, cfg.base);
  if (cfg.llama3_factor > 0.0)
    SL_CHECK(cfg.llama3_high_freq_factor > cfg.llama3_low_freq_factor && cfg.llama3_low_freq_factor > 0.0 &&
                 cfg.llama3_original_max_position > 0.0,
             "%s: llama3 scaling needs high_freq_factor (%g) > low_freq_factor (%g) > 0 and "
             "original_max_position > 0",
             op, cfg.llama3_high_freq_factor, cfg.llama3_low_freq_factor);
}

}  // namespace sinklab
