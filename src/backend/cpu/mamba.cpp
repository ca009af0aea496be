// State-space (Mamba) layers and mixture-of-experts routing on the CPU, forward only: causal depthwise
// convolution, selective scan, top-k router, weighted row scatter-add. Per-element math: mamba_math.hpp.
// Everything accumulates in double, for f32 too (as norms.cpp does).

#include <omp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "backend/mamba_math.hpp"

namespace sinklab {

using cpu::dispatch_float;

namespace {

using Acc = double;

// A [B,T,C] operand: three dims, contiguous last dim, any strides on the first two.
void check_btc(const Tensor& t, int64_t B, int64_t T, int64_t C, DType dt, const char* op, const char* arg) {
  SL_CHECK(t.defined(), "%s: %s is required", op, arg);
  check_dtype(t, dt, op, arg);
  SL_CHECK(t.ndim == 3 && t.shape[0] == B && t.shape[1] == T && t.shape[2] == C,
           "%s: %s %s must be [%lld,%lld,%lld]", op, arg, t.shape_str().c_str(), (long long)B, (long long)T,
           (long long)C);
  SL_CHECK(t.stride[2] == 1 || C == 1, "%s: the last dimension of %s must be contiguous", op, arg);
}

// A per-channel parameter [n] (bias, D, dt_bias, scale); undefined (absent) is allowed.
void check_vector(const Tensor& t, int64_t n, DType dt, const char* op, const char* arg) {
  if (!t.defined()) return;
  check_dtype(t, dt, op, arg);
  SL_CHECK(t.ndim == 1 && t.shape[0] == n && (t.stride[0] == 1 || n == 1), "%s: %s %s must be contiguous [%lld]", op,
           arg, t.shape_str().c_str(), (long long)n);
}

// A contiguous matrix [rows, cols] (conv weight, A).
void check_matrix(const Tensor& t, int64_t rows, int64_t cols, DType dt, const char* op, const char* arg) {
  SL_CHECK(t.defined(), "%s: %s is required", op, arg);
  check_dtype(t, dt, op, arg);
  SL_CHECK(t.ndim == 2 && t.shape[0] == rows && t.shape[1] == cols && t.is_contiguous(),
           "%s: %s %s must be contiguous [%lld,%lld]", op, arg, t.shape_str().c_str(), (long long)rows,
           (long long)cols);
}

// True when the byte ranges spanned by two views overlap (empty views overlap nothing).
bool overlaps(const Tensor& a, const Tensor& b) {
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

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Causal depthwise convolution. in, out [B,T,C]; weight [C,K]; bias [C] or undefined.
// out[b,t,c] = bias[c] + sum_k weight[c,k] in[b, t-(K-1)+k, c]. Rows (b,t) in parallel; each output
// row reads K input rows.
void CpuBackend::causal_conv1d_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  const char* op = "causal_conv1d_forward";
  SL_CHECK(in.defined() && in.ndim == 3, "%s: in must be [B,T,C], got %s", op, in.shape_str().c_str());
  const int64_t B = in.shape[0], T = in.shape[1], C = in.shape[2];
  check_btc(in, B, T, C, in.dtype, op, "in");
  check_btc(out, B, T, C, in.dtype, op, "out");
  SL_CHECK(weight.defined() && weight.ndim == 2 && weight.shape[1] >= 1, "%s: weight must be [C,K], got %s", op,
           weight.shape_str().c_str());
  const int64_t K = weight.shape[1];
  check_matrix(weight, C, K, in.dtype, op, "weight");
  check_vector(bias, C, in.dtype, op, "bias");
  SL_CHECK(!overlaps(out, in), "%s: out must not overlap in (each output reads K past inputs)", op);
  dispatch_float(in.dtype, op, [&](auto zero) {
    using F = decltype(zero);
    const F* w = weight.ptr<F>();
    const F* bs = bias.defined() ? bias.ptr<F>() : nullptr;
#pragma omp parallel for schedule(static) if (B * T * C * K > 16384)
    for (int64_t r = 0; r < B * T; ++r) {
      const int64_t b = r / T, t = r % T;
      const F* x = in.ptr<F>() + b * in.stride[0];  // the batch element at time 0
      F* o = out.ptr<F>() + b * out.stride[0] + t * out.stride[1];
      for (int64_t c = 0; c < C; ++c)
        o[c] = F(math::causal_conv1d_at<Acc>(x + c, in.stride[1], t, w + c * K, K, bs ? Acc(bs[c]) : Acc(0)));
    }
  });
}

// ---------------------------------------------------------------------------------------------------
// Selective scan. x, dt, y [B,T,Di]; A_log [Di,N]; B, C [B,T,N]; D, dt_bias [Di] or undefined.
// Channels (b,d) are independent recurrences over t: one per OpenMP iteration, with the channel's
// A = -exp(A_log) row and state in double.
void CpuBackend::selective_scan_forward(Tensor y, Tensor x, Tensor dt, Tensor A_log, Tensor B, Tensor C, Tensor D,
                                        Tensor dt_bias, bool dt_softplus) {
  const char* op = "selective_scan_forward";
  SL_CHECK(x.defined() && x.ndim == 3, "%s: x must be [B,T,Di], got %s", op, x.shape_str().c_str());
  const int64_t Bn = x.shape[0], T = x.shape[1], Di = x.shape[2];
  SL_CHECK(A_log.defined() && A_log.ndim == 2, "%s: A_log must be [Di,N], got %s", op, A_log.shape_str().c_str());
  const int64_t N = A_log.shape[1];
  const DType dtp = x.dtype;
  check_btc(x, Bn, T, Di, dtp, op, "x");
  check_btc(dt, Bn, T, Di, dtp, op, "dt");
  check_btc(y, Bn, T, Di, dtp, op, "y");
  check_matrix(A_log, Di, N, dtp, op, "A_log");
  check_btc(B, Bn, T, N, dtp, op, "B");
  check_btc(C, Bn, T, N, dtp, op, "C");
  check_vector(D, Di, dtp, op, "D");
  check_vector(dt_bias, Di, dtp, op, "dt_bias");
  // y is written at (b,t,d) right after x and dt are read there, so it may be x or dt itself, but not a
  // shifted view of them, nor overlap B or C (read for every d).
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&x, "x"}, {&dt, "dt"}})
    SL_CHECK(!overlaps(y, *t) || (y.data == t->data && y.stride == t->stride), "%s: y overlaps %s without being it",
             op, name);
  SL_CHECK(!overlaps(y, B) && !overlaps(y, C), "%s: y must not overlap B or C", op);
  dispatch_float(dtp, op, [&](auto zero) {
    using F = decltype(zero);
    const F* a_log = A_log.ptr<F>();
    const F* skip = D.defined() ? D.ptr<F>() : nullptr;
    const F* bias = dt_bias.defined() ? dt_bias.ptr<F>() : nullptr;
#pragma omp parallel if (Bn * Di * T * N > 16384)
    {
      std::vector<Acc> h(static_cast<size_t>(N)), a(static_cast<size_t>(N));
#pragma omp for schedule(static)
      for (int64_t ch = 0; ch < Bn * Di; ++ch) {
        const int64_t b = ch / Di, d = ch % Di;
        std::fill(h.begin(), h.end(), Acc(0));
        for (int64_t n = 0; n < N; ++n) a[size_t(n)] = math::scan_a_from_log(Acc(a_log[d * N + n]));
        const Acc db = bias ? Acc(bias[d]) : Acc(0), skip_d = skip ? Acc(skip[d]) : Acc(0);
        for (int64_t t = 0; t < T; ++t) {
          const Acc xv = Acc(x.ptr<F>()[b * x.stride[0] + t * x.stride[1] + d]);
          const Acc delta = math::scan_delta(Acc(dt.ptr<F>()[b * dt.stride[0] + t * dt.stride[1] + d]), db, dt_softplus);
          const F* bt = B.ptr<F>() + b * B.stride[0] + t * B.stride[1];
          const F* ct = C.ptr<F>() + b * C.stride[0] + t * C.stride[1];
          const Acc yv = math::selective_scan_step(h.data(), a.data(), bt, ct, N, xv, delta) + skip_d * xv;
          y.ptr<F>()[b * y.stride[0] + t * y.stride[1] + d] = F(yv);
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------
// Top-k router. logits [N,E]; top_weights [N,k]; top_experts i32 [N,k]. Rows in parallel.
void CpuBackend::moe_router_topk(Tensor top_weights, Tensor top_experts, Tensor logits) {
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
  dispatch_float(logits.dtype, op, [&](auto zero) {
    using F = decltype(zero);
#pragma omp parallel for schedule(static) if (N * E > 16384)
    for (int64_t n = 0; n < N; ++n)
      math::moe_topk_row<Acc>(top_weights.ptr<F>() + n * k, top_experts.ptr<int32_t>() + n * k,
                              logits.ptr<F>() + n * E, E, k);
  });
}

// ---------------------------------------------------------------------------------------------------
// out[index[m], :] += scale[m] * src[m, :]. out [N,d], src [M,d]; index i32 [M]; scale [M] or undefined.
// Indices may repeat, so a loop over m would race on out rows: as embedding_backward does, each thread
// owns a block of columns and walks all m in order (bitwise independent of the thread count).
void CpuBackend::index_add_rows(Tensor out, Tensor src, Tensor index, Tensor scale) {
  const char* op = "index_add_rows";
  SL_CHECK(out.defined() && out.ndim == 2, "%s: out must be [N,d], got %s", op, out.shape_str().c_str());
  SL_CHECK(src.defined() && src.ndim == 2, "%s: src must be [M,d], got %s", op, src.shape_str().c_str());
  SL_CHECK(src.dtype == out.dtype, "%s: src and out differ in dtype", op);
  TensorRows ro = rows_of(out, op, "out"), rs = rows_of(src, op, "src");
  SL_CHECK(ro.cols == rs.cols, "%s: out %s and src %s differ in width", op, out.shape_str().c_str(),
           src.shape_str().c_str());
  const int64_t M = rs.rows;
  check_dtype(index, DType::i32, op, "index");
  SL_CHECK(index.is_contiguous() && index.numel() == M, "%s: index %s must be contiguous with %lld elements", op,
           index.shape_str().c_str(), (long long)M);
  check_vector(scale, M, out.dtype, op, "scale");
  const int32_t* idx = index.ptr<int32_t>();
  for (int64_t m = 0; m < M; ++m)
    SL_CHECK(idx[m] >= 0 && idx[m] < ro.rows, "%s: index %d at %lld is out of range [0, %lld)", op, idx[m],
             (long long)m, (long long)ro.rows);
  SL_CHECK(!overlaps(out, src), "%s: src must not overlap out", op);
  dispatch_float(out.dtype, op, [&](auto zero) {
    using F = decltype(zero);
    const F* s = scale.defined() ? scale.ptr<F>() : nullptr;
#pragma omp parallel if (M * ro.cols > 16384)
    {
      const int64_t nt = omp_get_num_threads(), th = omp_get_thread_num();
      const int64_t c0 = ro.cols * th / nt, c1 = ro.cols * (th + 1) / nt;
      for (int64_t m = 0; m < M; ++m) {
        const F* x = src.ptr<F>() + rs.row_offset(m);
        F* o = out.ptr<F>() + ro.row_offset(idx[m]);
        const F f = s ? s[m] : F(1);
        for (int64_t c = c0; c < c1; ++c) o[c] += f * x[c];
      }
    }
  });
}

}  // namespace sinklab
