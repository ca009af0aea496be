// State-space (Mamba) layers and mixture-of-experts routing on the CPU, forward only: causal depthwise
// convolution, selective scan, top-k router, weighted row scatter-add. Per-element math: mamba_math.hpp.
// Everything accumulates in double, for f32 too (as norms.cpp does).

#include <omp.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "backend/mamba_math.hpp"
#include "backend/op_checks.hpp"

namespace sinklab {

using cpu::dispatch_float;

namespace {

using Acc = double;

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Causal depthwise convolution. in, out [B,T,C]; weight [C,K]; bias [C] or undefined.
// out[b,t,c] = bias[c] + sum_k weight[c,k] in[b, t-(K-1)+k, c]. Rows (b,t) in parallel; each output
// row reads K input rows.
void CpuBackend::causal_conv1d_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  const char* op = "causal_conv1d_forward";
  const Conv1dDims dims = check_causal_conv1d(out, in, weight, bias);  // op_checks.hpp, shared with CUDA
  const int64_t B = dims.B, T = dims.T, C = dims.C, K = dims.K;
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
  const ScanDims dims = check_selective_scan(y, x, dt, A_log, B, C, D, dt_bias);  // op_checks.hpp
  const int64_t Bn = dims.B, T = dims.T, Di = dims.Di, N = dims.N;
  const DType dtp = x.dtype;
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
  const int64_t k = check_moe_router_topk(top_weights, top_experts, logits);  // op_checks.hpp
  const int64_t N = logits.shape[0], E = logits.shape[1];
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
  const IndexAddRows rows = check_index_add_rows(out, src, index, scale);  // op_checks.hpp
  const TensorRows &ro = rows.out, &rs = rows.src;
  const int64_t M = rs.rows;
  const int32_t* idx = index.ptr<int32_t>();
  for (int64_t m = 0; m < M; ++m)
    SL_CHECK(idx[m] >= 0 && idx[m] < ro.rows, "%s: index %d at %lld is out of range [0, %lld)", op, idx[m],
             (long long)m, (long long)ro.rows);
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
