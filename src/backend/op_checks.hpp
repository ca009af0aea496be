// Argument checks that do not depend on the backend: each op's CPU and CUDA twins call the same one
// (one message, one rule), then add their own dtype and device checks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "backend/ops.hpp"
#include "backend/tensor_rows.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace sinklab {

// a and b have the same shape: "<op>: <arg_a> [..] and <arg_b> [..] differ in shape".
inline void check_same_shape(const Tensor& a, const Tensor& b, const char* op, const char* arg_a, const char* arg_b) {
  bool same = a.ndim == b.ndim;
  for (int d = 0; same && d < a.ndim; ++d) same = a.shape[d] == b.shape[d];
  SL_CHECK(same, "%s: %s %s and %s %s differ in shape", op, arg_a, a.shape_str().c_str(), arg_b,
           b.shape_str().c_str());
}

// column_sum's operands (ops.hpp): same dtype (or a bf16 in summed into an f32 out: a bias gradient of bf16
// activations), out at least 1-D, and out's dims are the trailing dims of in. Returns L, the number of in
// rows that add into each out row.
inline int64_t check_column_sum(const Tensor& out, const Tensor& in) {
  SL_CHECK(out.dtype == in.dtype || (in.dtype == DType::bf16 && out.dtype == DType::f32),
           "column_sum: out is %s but in is %s", dtype_name(out.dtype), dtype_name(in.dtype));
  bool trailing = out.ndim >= 1 && in.ndim >= out.ndim;
  for (int d = 0; trailing && d < out.ndim; ++d) trailing = in.shape[in.ndim - out.ndim + d] == out.shape[d];
  SL_CHECK(trailing, "column_sum: out %s must be the trailing dims of in %s", out.shape_str().c_str(),
           in.shape_str().c_str());
  int64_t rows = 1;
  for (int d = 0; d < in.ndim - out.ndim; ++d) rows *= in.shape[d];
  return rows;
}

// reduce_into's operands: out f64 [1] (one element, contiguous) on x's device.
inline void check_reduce_into(const Tensor& out, const Tensor& x) {
  SL_CHECK(out.defined() && out.dtype == DType::f64 && out.numel() == 1,
           "reduce_into: out must be one f64 element, got %s %s", dtype_name(out.dtype), out.shape_str().c_str());
  SL_CHECK(out.device == x.device, "reduce_into: out is on %s, x on %s", out.device.name().c_str(),
           x.device.name().c_str());
}

// The multi-tensor ops' ranges (ops.hpp FlatRanges) over flat tensors of n elements: one tag per range,
// tags >= 0 (and < max_tag when max_tag >= 0), ranges within [0, n), disjoint. Returns 1 + the largest tag.
int32_t check_flat_ranges(const ops::FlatRanges& ranges, int64_t n, int32_t max_tag, const char* op);

// A named operand of an op, for checks over a list of them.
struct NamedTensor {
  const Tensor& t;
  const char* name;
};

// The dtype rule of the matrix products (linear_forward, linear_backward, matmul), one for every
// backend: the inputs share one dtype; an output has that dtype too, or f32 or bf16 when the inputs are
// bf16 (bf16 products accumulated in f32 and rounded once into the output: --precision bf16). Undefined
// tensors are skipped. Which input dtypes a backend multiplies at all is its own check. Returns the
// inputs' dtype (the first defined input's).
DType check_product_dtypes(const char* op, std::initializer_list<NamedTensor> inputs,
                           std::initializer_list<NamedTensor> outputs);

// RMSNorm's and LayerNorm's saved per-row statistics (mean, rstd: required, contiguous, one element per
// row of in) and parameter vectors (weight, bias, their gradients: contiguous [cols of in], or undefined
// when absent), in the order given. check_element(t, name) is the backend's dtype (and device) check,
// made first for each.
template <class CheckElement>
void check_norm_operands(const char* op, const TensorRows& in, std::initializer_list<NamedTensor> stats,
                         std::initializer_list<NamedTensor> params, CheckElement&& check_element) {
  for (const NamedTensor& s : stats) {
    SL_CHECK(s.t.defined(), "%s: %s is required", op, s.name);
    check_element(s.t, s.name);
    SL_CHECK(s.t.is_contiguous() && s.t.numel() == in.rows,
             "%s: %s %s must be contiguous with one element per row (%lld)", op, s.name, s.t.shape_str().c_str(),
             (long long)in.rows);
  }
  for (const NamedTensor& p : params) {
    if (!p.t.defined()) continue;
    check_element(p.t, p.name);
    SL_CHECK(p.t.ndim == 1 && p.t.shape[0] == in.cols && p.t.stride[0] == 1, "%s: %s %s must be contiguous [%lld]",
             op, p.name, p.t.shape_str().c_str(), (long long)in.cols);
  }
}

// ops::matmul's operands, checked: all 2-D or all 3-D (a common batch), op(a) [M,K] . op(b) [K,N] = out
// [M,N], innermost dimension contiguous, rows not overlapping. Row strides (ld*) are at least the row
// length and 1; batch strides (stride_*) are 0 for 2-D operands.
struct MatmulGeometry {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  int64_t ld_out = 0, ld_a = 0, ld_b = 0;
  int64_t stride_out = 0, stride_a = 0, stride_b = 0;
};
MatmulGeometry matmul_geometry(const Tensor& out, const Tensor& a, const Tensor& b, bool transpose_a,
                               bool transpose_b);

// rope_forward/backward's operands and configuration: x [B,T,H,dh], out of x's shape, rotary_dim even
// in (0, dh], a positive base, consistent llama3 scaling factors.
void check_rope_args(const Tensor& out, const Tensor& x, const ops::RopeConfig& cfg, const char* op);

// The row stride (leading dimension) of t seen as a matrix: its leading dimensions, given as its rows r
// (rows_of(t)), must collapse into rows with one common stride (that of the innermost leading dimension
// of size > 1), and rows must not overlap. At least cols.
inline int64_t collapsed_row_stride(const TensorRows& r, const Tensor& t, const char* op, const char* arg) {
  int64_t ld = r.cols, expect = -1;
  for (int d = r.lead_ndim - 1; d >= 0; --d) {
    if (r.lead_shape[d] == 1) continue;
    if (expect < 0) {
      ld = r.lead_stride[d];
    } else {
      SL_CHECK(r.lead_stride[d] == expect,
               "%s: the leading dimensions of %s %s do not collapse into rows with one stride", op, arg,
               t.shape_str().c_str());
    }
    expect = r.lead_stride[d] * r.lead_shape[d];
  }
  SL_CHECK(ld >= r.cols || r.rows <= 1, "%s: rows of %s overlap (row stride %lld < %lld columns)", op, arg,
           (long long)ld, (long long)r.cols);
  return std::max<int64_t>(ld, std::max<int64_t>(r.cols, 1));
}

// linear_forward/backward's operands: a tensor [*, cols] seen as a row-major matrix, element (r, c) at
// ptr[r * ld + c], its leading dimensions collapsed into rows (collapsed_row_stride).
struct MatrixView {
  void* ptr = nullptr;
  int64_t rows = 0, cols = 0, ld = 1;
};
inline MatrixView as_matrix(const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.ndim >= 1, "%s: %s must have at least one dimension", op, arg);
  const TensorRows r = rows_of(t, op, arg);
  return MatrixView{t.data, r.rows, r.cols, collapsed_row_stride(r, t, op, arg)};
}

// The generic attention operation's operands (ops.hpp), shared by the CPU and CUDA backends:
// q [B,T,H,dh], k/v [B,S,Hkv,dh] (v optional: attention_probs), H a multiple of Hkv, the same dtype,
// S = lead_keys + T, a valid variant (attn_config_error), sink/relative-bias tensors of the right
// shape and dtype, scale finite and >= 0. Returns the dimensions.
// With bf16 q, k, v the row statistics and the spec's learned tensors (sink logit, relative bias and their
// gradients) stay f32: attention_stats_dtype.
DType attention_stats_dtype(DType qkv);
struct AttentionDims {
  int64_t B = 0, T = 0, S = 0, H = 0, Hkv = 0, dh = 0;
};
AttentionDims check_attention_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const ops::AttentionSpec& spec);
// t (when defined) is 4-D with ref's shape and dtype.
void check_attention_like(const Tensor& t, const Tensor& ref, const char* op, const char* arg, const char* ref_name);
// stats [B,H,T] and probs [B,H,T,S] (contiguous last dim) in attention_stats_dtype(q's).
void check_attention_stats(const Tensor& stats, const AttentionDims& d, const Tensor& q, const char* op);
void check_attention_probs(const Tensor& probs, const AttentionDims& d, const Tensor& q, const char* op);
// Every operand of attention_forward (out required; stats and probs when given) and of attention_backward
// (v, out, d_out and stats required; d_q, d_k, d_v when given), as both backends check them.
AttentionDims check_attention_forward_args(const char* op, const Tensor& out, const Tensor& stats, const Tensor& q,
                                           const Tensor& k, const Tensor& v, const ops::AttentionSpec& spec,
                                           const Tensor& probs);
AttentionDims check_attention_backward_args(const char* op, const Tensor& d_q, const Tensor& d_k, const Tensor& d_v,
                                            const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& out, const Tensor& stats, const ops::AttentionSpec& spec);
// The score scale: spec.scale, or 1/sqrt(dh) when it is 0.
double attention_scale(const ops::AttentionSpec& spec, int64_t dh);

// True when the element ranges spanned by two views overlap (empty views overlap nothing). Pointer
// arithmetic only: works for device tensors too.
bool tensors_overlap(const Tensor& a, const Tensor& b);

// The state-space (Mamba) and mixture-of-experts ops' operands (ops.hpp), as both backends check them
// (each backend then checks its own dtypes and devices). Every operand has the dtype of the first input
// (in, x, logits, out).
//   causal_conv1d_forward: in, out [B,T,C] (contiguous last dim, out not overlapping in), weight [C,K]
//   contiguous, bias [C] contiguous or undefined.
struct Conv1dDims {
  int64_t B = 0, T = 0, C = 0, K = 0;
};
Conv1dDims check_causal_conv1d(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias);
//   selective_scan_forward: x, dt, y [B,T,Di], A_log [Di,N] contiguous, B, C [B,T,N], D, dt_bias [Di] or
//   undefined; y may be x or dt themselves but overlaps nothing else.
struct ScanDims {
  int64_t B = 0, T = 0, Di = 0, N = 0;
};
ScanDims check_selective_scan(const Tensor& y, const Tensor& x, const Tensor& dt, const Tensor& A_log, const Tensor& B,
                              const Tensor& C, const Tensor& D, const Tensor& dt_bias);
//   moe_router_topk: logits [N,E] contiguous, top_weights [N,k] contiguous in logits' dtype, top_experts
//   i32 [N,k] contiguous, 1 <= k <= E. Returns k.
int64_t check_moe_router_topk(const Tensor& top_weights, const Tensor& top_experts, const Tensor& logits);
//   index_add_rows: out [N,d], src [M,d] (rows, contiguous last dim) of one dtype, not overlapping; index
//   i32 contiguous with M elements; scale [M] or undefined. (The index values are data: the CPU checks them
//   before it runs, the CUDA kernel where it reads them.) Returns the rows of out and src.
struct IndexAddRows {
  TensorRows out, src;
};
IndexAddRows check_index_add_rows(const Tensor& out, const Tensor& src, const Tensor& index, const Tensor& scale);

}  // namespace sinklab
