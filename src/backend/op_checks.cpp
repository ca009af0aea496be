#include "backend/op_checks.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backend/attention_math.hpp"

namespace sinklab {

DType check_product_dtypes(const char* op, std::initializer_list<NamedTensor> inputs,
                           std::initializer_list<NamedTensor> outputs) {
  const NamedTensor* first = nullptr;
  for (const NamedTensor& x : inputs) {
    if (!x.t.defined()) continue;
    if (!first) {
      first = &x;
      continue;
    }
    SL_CHECK(x.t.dtype == first->t.dtype, "%s: %s (%s) and %s (%s) differ in dtype", op, first->name,
             dtype_name(first->t.dtype), x.name, dtype_name(x.t.dtype));
  }
  if (!first) return DType::f32;
  const DType dt = first->t.dtype;
  for (const NamedTensor& y : outputs) {
    if (!y.t.defined()) continue;
    const bool ok = y.t.dtype == dt || (dt == DType::bf16 && y.t.dtype == DType::f32);
    SL_CHECK(ok, "%s: %s has dtype %s; with %s inputs it is %s", op, y.name, dtype_name(y.t.dtype), dtype_name(dt),
             dt == DType::bf16 ? "f32 or bf16" : dtype_name(dt));
  }
  return dt;
}

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

static void check_4d(const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.defined(), "%s: %s is required", op, arg);
  SL_CHECK(t.ndim == 4, "%s: %s must be [B,L,heads,dh], got %s", op, arg, t.shape_str().c_str());
}

DType attention_stats_dtype(DType qkv) { return qkv == DType::bf16 ? DType::f32 : qkv; }

AttentionDims check_attention_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const ops::AttentionSpec& spec) {
  check_4d(q, op, "q");
  check_4d(k, op, "k");
  AttentionDims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]};
  SL_CHECK(k.shape[0] == d.B && k.shape[3] == d.dh, "%s: k %s does not match q %s (same B and head dim)", op,
           k.shape_str().c_str(), q.shape_str().c_str());
  SL_CHECK(d.Hkv > 0 && d.H % d.Hkv == 0, "%s: query heads (%lld) must be a multiple of key/value heads (%lld)",
           op, (long long)d.H, (long long)d.Hkv);
  if (v.defined()) {
    check_4d(v, op, "v");
    check_same_shape(v, k, op, "v", "k");
    SL_CHECK(v.dtype == q.dtype, "%s: v is %s but q is %s", op, dtype_name(v.dtype), dtype_name(q.dtype));
  }
  SL_CHECK(k.dtype == q.dtype, "%s: k is %s but q is %s", op, dtype_name(k.dtype), dtype_name(q.dtype));
  const char* invalid = math::attn_config_error(math::attn_config(spec));
  SL_CHECK(invalid == nullptr, "%s: invalid attention variant: %s", op, invalid);
  SL_CHECK(d.S >= spec.lead_keys, "%s: k has fewer keys (%lld) than lead_keys (%lld)", op, (long long)d.S,
           (long long)spec.lead_keys);
  switch (spec.mask) {
    case ops::AttnMask::causal:
    case ops::AttnMask::sliding_window:
    case ops::AttnMask::prefix_lm:
      // Query i and positional key j' = i are the same position: the masks and the position bias
      // are defined for aligned sequences only.
      SL_CHECK(d.S - spec.lead_keys == d.T,
               "%s: the attention masks need as many positional keys as queries (S - lead_keys = %lld - %lld, "
               "T = %lld)",
               op, (long long)d.S, (long long)spec.lead_keys, (long long)d.T);
      break;
  }
  if (spec.sink_logit.defined()) {
    check_shape(spec.sink_logit, {d.H}, op, "sink_logit");
    SL_CHECK(spec.sink_logit.dtype == attention_stats_dtype(q.dtype), "%s: sink_logit is %s but q is %s", op,
             dtype_name(spec.sink_logit.dtype), dtype_name(q.dtype));
  }
  if (spec.d_sink_logit.defined()) {
    SL_CHECK(spec.sink_logit.defined(), "%s: d_sink_logit given without sink_logit", op);
    check_shape(spec.d_sink_logit, {d.H}, op, "d_sink_logit");
    SL_CHECK(spec.d_sink_logit.dtype == attention_stats_dtype(q.dtype), "%s: d_sink_logit is %s but q is %s", op,
             dtype_name(spec.d_sink_logit.dtype), dtype_name(q.dtype));
  }
  if (spec.pos_bias == ops::AttnPosBias::relative) {
    SL_CHECK(spec.relative_bias.ndim == 2 && spec.relative_bias.shape[0] == d.H,
             "%s: relative_bias must be [H=%lld, num_buckets], got %s", op, (long long)d.H,
             spec.relative_bias.shape_str().c_str());
    SL_CHECK(spec.relative_bias.dtype == attention_stats_dtype(q.dtype), "%s: relative_bias is %s but q is %s", op,
             dtype_name(spec.relative_bias.dtype), dtype_name(q.dtype));
  }
  if (spec.d_relative_bias.defined()) {
    SL_CHECK(spec.relative_bias.defined(), "%s: d_relative_bias given without relative_bias", op);
    check_shape(spec.d_relative_bias, {d.H, spec.relative_bias.shape[1]}, op, "d_relative_bias");
    SL_CHECK(spec.d_relative_bias.dtype == attention_stats_dtype(q.dtype), "%s: d_relative_bias is %s but q is %s", op,
             dtype_name(spec.d_relative_bias.dtype), dtype_name(q.dtype));
  }
  SL_CHECK(spec.scale >= 0.0 && std::isfinite(spec.scale), "%s: scale must be finite and >= 0 (0 = 1/sqrt(dh))",
           op);
  return d;
}

void check_attention_like(const Tensor& t, const Tensor& ref, const char* op, const char* arg, const char* ref_name) {
  if (!t.defined()) return;
  check_4d(t, op, arg);
  check_same_shape(t, ref, op, arg, ref_name);
  SL_CHECK(t.dtype == ref.dtype, "%s: %s is %s but %s is %s", op, arg, dtype_name(t.dtype), ref_name,
           dtype_name(ref.dtype));
}

AttentionDims check_attention_forward_args(const char* op, const Tensor& out, const Tensor& stats, const Tensor& q,
                                           const Tensor& k, const Tensor& v, const ops::AttentionSpec& spec,
                                           const Tensor& probs) {
  SL_CHECK(v.defined(), "%s: v is required", op);
  const AttentionDims d = check_attention_qkv(op, q, k, v, spec);
  SL_CHECK(out.defined(), "%s: out is required", op);
  check_attention_like(out, q, op, "out", "q");
  if (stats.defined()) check_attention_stats(stats, d, q, op);
  if (probs.defined()) check_attention_probs(probs, d, q, op);
  return d;
}

AttentionDims check_attention_backward_args(const char* op, const Tensor& d_q, const Tensor& d_k, const Tensor& d_v,
                                            const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& out, const Tensor& stats, const ops::AttentionSpec& spec) {
  SL_CHECK(v.defined(), "%s: v is required", op);
  const AttentionDims d = check_attention_qkv(op, q, k, v, spec);
  SL_CHECK(out.defined() && d_out.defined() && stats.defined(), "%s: out, d_out and stats are required", op);
  check_attention_like(out, q, op, "out", "q");
  check_attention_like(d_out, q, op, "d_out", "q");
  check_attention_like(d_q, q, op, "d_q", "q");
  check_attention_like(d_k, k, op, "d_k", "k");
  check_attention_like(d_v, v, op, "d_v", "v");
  check_attention_stats(stats, d, q, op);
  return d;
}

void check_attention_stats(const Tensor& stats, const AttentionDims& d, const Tensor& q, const char* op) {
  check_shape(stats, {d.B, d.H, d.T}, op, "stats");
  SL_CHECK(stats.dtype == attention_stats_dtype(q.dtype), "%s: stats is %s but q is %s (stats: %s)", op,
           dtype_name(stats.dtype), dtype_name(q.dtype), dtype_name(attention_stats_dtype(q.dtype)));
}

void check_attention_probs(const Tensor& probs, const AttentionDims& d, const Tensor& q, const char* op) {
  check_shape(probs, {d.B, d.H, d.T, d.S}, op, "probs");
  SL_CHECK(probs.dtype == attention_stats_dtype(q.dtype), "%s: probs is %s but q is %s (probs: %s)", op,
           dtype_name(probs.dtype), dtype_name(q.dtype), dtype_name(attention_stats_dtype(q.dtype)));
  SL_CHECK(probs.stride[3] == 1 || d.S == 1, "%s: the last dimension of probs must be contiguous", op);
}

double attention_scale(const ops::AttentionSpec& spec, int64_t dh) {
  return spec.scale > 0.0 ? spec.scale : 1.0 / std::sqrt(double(dh));
}

// ---- state-space (Mamba) and mixture-of-experts ops --------------------------------------------------

bool tensors_overlap(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  auto span = [](const Tensor& t) {
    int64_t last = 0;
    for (int d = 0; d < t.ndim; ++d) last += (t.shape[d] - 1) * t.stride[d];
    const char* p = static_cast<const char*>(t.data);
    return std::pair<const char*, const char*>(p, p + (last + 1) * int64_t(dtype_size(t.dtype)));
  };
  auto [a0, a1] = span(a);
  auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

// A [B,T,C] operand: three dims, contiguous last dim, any strides on the first two.
static void check_btc(const Tensor& t, int64_t B, int64_t T, int64_t C, DType dt, const char* op, const char* arg) {
  SL_CHECK(t.defined(), "%s: %s is required", op, arg);
  check_dtype(t, dt, op, arg);
  SL_CHECK(t.ndim == 3 && t.shape[0] == B && t.shape[1] == T && t.shape[2] == C,
           "%s: %s %s must be [%lld,%lld,%lld]", op, arg, t.shape_str().c_str(), (long long)B, (long long)T,
           (long long)C);
  SL_CHECK(t.stride[2] == 1 || C == 1, "%s: the last dimension of %s must be contiguous", op, arg);
}

// A per-channel parameter [n] (bias, D, dt_bias, scale); undefined (absent) is allowed.
static void check_vector(const Tensor& t, int64_t n, DType dt, const char* op, const char* arg) {
  if (!t.defined()) return;
  check_dtype(t, dt, op, arg);
  SL_CHECK(t.ndim == 1 && t.shape[0] == n && (t.stride[0] == 1 || n == 1), "%s: %s %s must be contiguous [%lld]", op,
           arg, t.shape_str().c_str(), (long long)n);
}

// A contiguous matrix [rows, cols] (conv weight, A).
static void check_matrix(const Tensor& t, int64_t rows, int64_t cols, DType dt, const char* op, const char* arg) {
  SL_CHECK(t.defined(), "%s: %s is required", op, arg);
  check_dtype(t, dt, op, arg);
  SL_CHECK(t.ndim == 2 && t.shape[0] == rows && t.shape[1] == cols && t.is_contiguous(),
           "%s: %s %s must be contiguous [%lld,%lld]", op, arg, t.shape_str().c_str(), (long long)rows,
           (long long)cols);
}

Conv1dDims check_causal_conv1d(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias) {
  const char* op = "causal_conv1d_forward";
  SL_CHECK(in.defined() && in.ndim == 3, "%s: in must be [B,T,C], got %s", op, in.shape_str().c_str());
  Conv1dDims d;
  d.B = in.shape[0];
  d.T = in.shape[1];
  d.C = in.shape[2];
  check_btc(in, d.B, d.T, d.C, in.dtype, op, "in");
  check_btc(out, d.B, d.T, d.C, in.dtype, op, "out");
  SL_CHECK(weight.defined() && weight.ndim == 2 && weight.shape[1] >= 1, "%s: weight must be [C,K], got %s", op,
           weight.shape_str().c_str());
  d.K = weight.shape[1];
  check_matrix(weight, d.C, d.K, in.dtype, op, "weight");
  check_vector(bias, d.C, in.dtype, op, "bias");
  SL_CHECK(!tensors_overlap(out, in), "%s: out must not overlap in (each output reads K past inputs)", op);
  return d;
}

ScanDims check_selective_scan(const Tensor& y, const Tensor& x, const Tensor& dt, const Tensor& A_log, const Tensor& B,
                              const Tensor& C, const Tensor& D, const Tensor& dt_bias) {
  const char* op = "selective_scan_forward";
  SL_CHECK(x.defined() && x.ndim == 3, "%s: x must be [B,T,Di], got %s", op, x.shape_str().c_str());
  SL_CHECK(A_log.defined() && A_log.ndim == 2, "%s: A_log must be [Di,N], got %s", op, A_log.shape_str().c_str());
  ScanDims d;
  d.B = x.shape[0];
  d.T = x.shape[1];
  d.Di = x.shape[2];
  d.N = A_log.shape[1];
  const DType dtp = x.dtype;
  check_btc(x, d.B, d.T, d.Di, dtp, op, "x");
  check_btc(dt, d.B, d.T, d.Di, dtp, op, "dt");
  check_btc(y, d.B, d.T, d.Di, dtp, op, "y");
  check_matrix(A_log, d.Di, d.N, dtp, op, "A_log");
  check_btc(B, d.B, d.T, d.N, dtp, op, "B");
  check_btc(C, d.B, d.T, d.N, dtp, op, "C");
  check_vector(D, d.Di, dtp, op, "D");
  check_vector(dt_bias, d.Di, dtp, op, "dt_bias");
  // y is written at (b,t,d) right after x and dt are read there, so it may be x or dt itself, but not a
  // shifted view of them, nor overlap B or C (read for every d).
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&x, "x"}, {&dt, "dt"}})
    SL_CHECK(!tensors_overlap(y, *t) || (y.data == t->data && y.stride == t->stride),
             "%s: y overlaps %s without being it", op, name);
  SL_CHECK(!tensors_overlap(y, B) && !tensors_overlap(y, C), "%s: y must not overlap B or C", op);
  return d;
}

int64_t check_moe_router_topk(const Tensor& top_weights, const Tensor& top_experts, const Tensor& logits) {
  const char* op = "moe_router_topk";
  SL_CHECK(logits.defined() && logits.ndim == 2 && logits.is_contiguous(), "%s: logits must be contiguous [N,E], got %s",
           op, logits.shape_str().c_str());
  const int64_t N = logits.shape[0], E = logits.shape[1];
  SL_CHECK(top_weights.defined() && top_weights.ndim == 2 && top_weights.is_contiguous() && top_weights.shape[0] == N,
           "%s: top_weights %s must be contiguous [N=%lld,k]", op, top_weights.shape_str().c_str(), (long long)N);
  const int64_t k = top_weights.shape[1];
  SL_CHECK(k >= 1 && k <= E && E >= 1, "%s: k = %lld must be in [1, E = %lld]", op, (long long)k, (long long)E);
  check_dtype(top_weights, logits.dtype, op, "top_weights");
  check_dtype(top_experts, DType::i32, op, "top_experts");
  SL_CHECK(top_experts.is_contiguous() && top_experts.ndim == 2 && top_experts.shape[0] == N && top_experts.shape[1] == k,
           "%s: top_experts %s must be contiguous [%lld,%lld]", op, top_experts.shape_str().c_str(), (long long)N,
           (long long)k);
  return k;
}

IndexAddRows check_index_add_rows(const Tensor& out, const Tensor& src, const Tensor& index, const Tensor& scale) {
  const char* op = "index_add_rows";
  SL_CHECK(out.defined() && out.ndim == 2, "%s: out must be [N,d], got %s", op, out.shape_str().c_str());
  SL_CHECK(src.defined() && src.ndim == 2, "%s: src must be [M,d], got %s", op, src.shape_str().c_str());
  SL_CHECK(src.dtype == out.dtype, "%s: src and out differ in dtype", op);
  IndexAddRows r{rows_of(out, op, "out"), rows_of(src, op, "src")};
  SL_CHECK(r.out.cols == r.src.cols, "%s: out %s and src %s differ in width", op, out.shape_str().c_str(),
           src.shape_str().c_str());
  const int64_t M = r.src.rows;
  check_dtype(index, DType::i32, op, "index");
  SL_CHECK(index.is_contiguous() && index.numel() == M, "%s: index %s must be contiguous with %lld elements", op,
           index.shape_str().c_str(), (long long)M);
  check_vector(scale, M, out.dtype, op, "scale");
  SL_CHECK(!tensors_overlap(out, src), "%s: src must not overlap out", op);
  return r;
}

int32_t check_flat_ranges(const ops::FlatRanges& ranges, int64_t n, int32_t max_tag, const char* op) {
  SL_CHECK(ranges.tags.size() == ranges.ranges.size(), "%s: %zu ranges but %zu tags", op, ranges.ranges.size(),
           ranges.tags.size());
  std::vector<FlatRange> sorted = ranges.ranges;
  std::sort(sorted.begin(), sorted.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    SL_CHECK(sorted[i].begin >= 0 && sorted[i].begin <= sorted[i].end && sorted[i].end <= n,
             "%s: range [%lld, %lld) outside [0, %lld)", op, (long long)sorted[i].begin, (long long)sorted[i].end,
             (long long)n);
    SL_CHECK(i == 0 || sorted[i - 1].end <= sorted[i].begin, "%s: ranges [%lld, %lld) and [%lld, %lld) overlap", op,
             (long long)sorted[i - 1].begin, (long long)sorted[i - 1].end, (long long)sorted[i].begin,
             (long long)sorted[i].end);
  }
  int32_t top = -1;
  for (int32_t t : ranges.tags) {
    SL_CHECK(t >= 0 && (max_tag < 0 || t < max_tag), "%s: tag %d outside [0, %d)", op, t, max_tag < 0 ? 1 << 30 : max_tag);
    top = std::max(top, t);
  }
  return top + 1;
}

}  // namespace sinklab
