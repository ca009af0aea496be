// RMSNorm and LayerNorm over the last dimension on CUDA, forward and backward; the twin of
// cpu/norms.cpp, over the same norm_math.hpp pieces (rms_rstd, rms_y, split_mean, ln_y, rms_dx, ln_dx,
// the parameter-gradient terms).
//
// Activations (in, out, d_in, d_out; sum_out and b of the fused add) are f32 or bf16 ("bf16 storage",
// ops.hpp: widened on load, rounded on store); weight, bias, the statistics and the parameter gradients f32.
// One block per row. Row sums are accumulated in double, as on the CPU: each thread sums a fixed
// stride of the row, then a fixed butterfly over the warp and a fixed sum over the warps; the block
// size depends on the row length only, so the same row gives the same bits on every run. The outputs
// are formed in f32 from the f32-rounded rstd and the hi+lo mean, exactly as the CPU forward does; the
// input gradients in double, as the CPU backward does. Parameter gradients are fixed-order column
// reductions (column_reduce.cuh), run before the input gradient (d_in may alias d_out).
#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/norm_math.hpp"

namespace sinklab::cuda {

namespace {

// Threads per row block: a multiple of the warp, up to 256, about one per 4 features.
int norm_threads(int64_t d) {
  int64_t t = (d + 3) / 4;
  t = (t + 31) / 32 * 32;
  return int(t < 32 ? 32 : (t > 256 ? 256 : t));
}

// Sum of v over the block, the same value returned to every thread. `shared` holds 32 doubles.
__device__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  __syncthreads();  // a previous call's readers are done with shared
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = shared[0];
    for (int w = 1; w < warps; ++w) s += shared[w];
    shared[0] = s;
  }
  __syncthreads();
  return shared[0];
}

// RMSNorm forward of one row per block; fused with the residual add before it when `addend` is given
// (add_rmsnorm_forward): sum_out = in + addend, stored in sum_out's dtype, and the norm reads the sum as
// stored (rounded when bf16), as the CPU's add followed by rmsnorm_forward does. Each thread reads back
// only the sum elements it wrote itself (same stride), so sum_out may alias in.
__global__ void rmsnorm_forward_kernel(EwArg out, float* rstd, EwArg in, EwArg addend, EwArg sum_out, const float* w,
                                       double eps) {
  __shared__ double shared[32];
  const int64_t d = in.rows.cols;
  const bool fused = addend.p != nullptr;
  for (int64_t row = blockIdx.x; row < in.rows.rows; row += gridDim.x) {
    const int64_t xo = in.rows.row_offset(row), oo = out.rows.row_offset(row);
    const int64_t ao = fused ? addend.rows.row_offset(row) : 0, so = fused ? sum_out.rows.row_offset(row) : 0;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float x = ew_load(in.p, in.bf16, xo + i);
      if (fused) {
        x = ew_stored(sum_out.bf16, x + ew_load(addend.p, addend.bf16, ao + i));
        ew_store(sum_out.p, sum_out.bf16, so + i, x);
      }
      ss += double(x) * double(x);
    }
    ss = block_sum(ss, shared);
    const double r = math::rms_rstd(ss, d, eps);
    const float rt = float(r);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float x = fused ? ew_load(sum_out.p, sum_out.bf16, so + i) : ew_load(in.p, in.bf16, xo + i);
      ew_store(out.p, out.bf16, oo + i, math::rms_y(x, rt, w ? w[i] : 1.0f));
    }
    if (threadIdx.x == 0) rstd[row] = float(r);
  }
}

// dx = r g w - r^3 x (sum_j g_j w_j x_j) / d   (norm_math.hpp rms_dx), in double; d_in = dx, or d_in + dx
// rounded once when accumulating (the residual stream's gradient).
__global__ void rmsnorm_backward_kernel(EwArg d_in, EwArg d_out, EwArg in, const float* w, const float* rstd,
                                        bool accumulate) {
  __shared__ double shared[32];
  const int64_t d = in.rows.cols;
  for (int64_t row = blockIdx.x; row < in.rows.rows; row += gridDim.x) {
    const int64_t xo = in.rows.row_offset(row), go = d_out.rows.row_offset(row), dxo = d_in.rows.row_offset(row);
    double dot = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
      dot += double(ew_load(d_out.p, d_out.bf16, go + i)) * (w ? double(w[i]) : 1.0) *
             double(ew_load(in.p, in.bf16, xo + i));
    dot = block_sum(dot, shared);
    const double dot_over_d = dot / double(d), r = double(rstd[row]);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const double gw = double(ew_load(d_out.p, d_out.bf16, go + i)) * (w ? double(w[i]) : 1.0);
      const float v = float(math::rms_dx(r, gw, double(ew_load(in.p, in.bf16, xo + i)), dot_over_d));
      ew_store(d_in.p, d_in.bf16, dxo + i, accumulate ? ew_load(d_in.p, d_in.bf16, dxo + i) + v : v);
    }
  }
}

__global__ void layernorm_forward_kernel(EwArg out, float* mean, float* rstd, EwArg in, const float* w, const float* b,
                                         double eps) {
  __shared__ double shared[32];
  const int64_t d = in.rows.cols;
  for (int64_t row = blockIdx.x; row < in.rows.rows; row += gridDim.x) {
    const int64_t xo = in.rows.row_offset(row), oo = out.rows.row_offset(row);
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += double(ew_load(in.p, in.bf16, xo + i));
    const double mu = block_sum(s, shared) / double(d);
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const double dev = double(ew_load(in.p, in.bf16, xo + i)) - mu;
      ss += dev * dev;
    }
    const double r = math::ln_rstd(block_sum(ss, shared), d, eps);
    float mh, ml;
    math::split_mean(mu, mh, ml);
    const float rt = float(r);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
      ew_store(out.p, out.bf16, oo + i,
               math::ln_y(ew_load(in.p, in.bf16, xo + i), mh, ml, rt, w ? w[i] : 1.0f, b ? b[i] : 0.0f));
    if (threadIdx.x == 0) {
      mean[row] = float(mu);
      rstd[row] = float(r);
    }
  }
}

// dx = r (gh - mean(gh) - xh mean(gh xh)), gh = g w, xh = (x - mu) r   (norm_math.hpp ln_dx), in double.
__global__ void layernorm_backward_kernel(EwArg d_in, EwArg d_out, EwArg in, const float* w, const float* mean,
                                          const float* rstd) {
  __shared__ double shared[32];
  const int64_t d = in.rows.cols;
  for (int64_t row = blockIdx.x; row < in.rows.rows; row += gridDim.x) {
    const int64_t xo = in.rows.row_offset(row), go = d_out.rows.row_offset(row), dxo = d_in.rows.row_offset(row);
    const double mu = double(mean[row]), r = double(rstd[row]);
    double sum_gh = 0.0, sum_gh_xh = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const double gh = double(ew_load(d_out.p, d_out.bf16, go + i)) * (w ? double(w[i]) : 1.0);
      sum_gh += gh;
      sum_gh_xh += gh * (double(ew_load(in.p, in.bf16, xo + i)) - mu) * r;
    }
    const double mean_gh = block_sum(sum_gh, shared) / double(d);
    const double mean_gh_xh = block_sum(sum_gh_xh, shared) / double(d);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const double gh = double(ew_load(d_out.p, d_out.bf16, go + i)) * (w ? double(w[i]) : 1.0);
      const double xh = (double(ew_load(in.p, in.bf16, xo + i)) - mu) * r;
      ew_store(d_in.p, d_in.bf16, dxo + i, float(math::ln_dx(r, gh, xh, mean_gh, mean_gh_xh)));
    }
  }
}

// d_weight[c] += sum_rows g x r  (RMSNorm)
struct RmsWeightGradTerm {
  static constexpr int kTerms = 1;
  EwArg g, x;
  const float* rstd;
  __device__ void operator()(int64_t r, int64_t c, double* v) const {
    v[0] = math::rms_dw_term(double(ew_load(g.p, g.bf16, g.rows.row_offset(r) + c)),
                             double(ew_load(x.p, x.bf16, x.rows.row_offset(r) + c)), double(rstd[r]));
  }
};

// d_weight[c] += sum_rows g (x - mu) r, d_bias[c] += sum_rows g  (LayerNorm)
struct LnParamGradTerm {
  static constexpr int kTerms = 2;
  EwArg g, x;
  const float* mean;
  const float* rstd;
  __device__ void operator()(int64_t r, int64_t c, double* v) const {
    const double gv = double(ew_load(g.p, g.bf16, g.rows.row_offset(r) + c));
    v[0] = math::ln_dw_term(gv, double(ew_load(x.p, x.bf16, x.rows.row_offset(r) + c)), double(mean[r]),
                            double(rstd[r]));
    v[1] = gv;
  }
};

unsigned row_grid(int64_t rows) {
  const int64_t cap = int64_t(1) << 16;
  return unsigned(rows < 1 ? 1 : (rows < cap ? rows : cap));
}

const float* ptr_or_null(const Tensor& t) { return t.defined() ? t.ptr<float>() : nullptr; }

// An activation operand (f32 or bf16, rows of in's shape), checked; an empty one when t is undefined.
EwArg activation_arg(const CudaBackend& be, const Tensor& t, const Tensor& in, const char* op, const char* arg,
                     bool required = false) {
  SL_CHECK(t.defined() || !required, "%s: %s is required", op, arg);
  if (!t.defined()) return EwArg{};
  check_same_shape(t, in, op, arg, "in");
  check_device_f32_or_bf16(be, t, op, arg);
  return ew_arg(t, op, arg);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// RMSNorm. in/out [*, d] (rows may be strided; out may alias in; f32 or bf16); weight [d] or undefined;
// rstd [*] written (f32).
void CudaBackend::rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps) {
  const char* op = "rmsnorm_forward";
  check_device_f32_or_bf16(*this, in, op, "in");
  const EwArg o = activation_arg(*this, out, in, op, "out", true), x = ew_arg(in, op, "in");
  check_norm_operands(op, x.rows, {{rstd, "rstd"}}, {{weight, "weight"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  if (x.rows.rows == 0 || x.rows.cols == 0) return;
  DeviceGuard guard(index_);
  rmsnorm_forward_kernel<<<row_grid(x.rows.rows), norm_threads(x.rows.cols), 0, stream_>>>(
      o, rstd.ptr<float>(), x, EwArg{}, EwArg{}, ptr_or_null(weight), eps);
  CUDA_CHECK_LAUNCH(op);
}

// sum_out = a + b, then out, rstd = rmsnorm_forward(sum_out as stored): one kernel, one pass over the rows.
void CudaBackend::add_rmsnorm_forward(Tensor sum_out, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight,
                                      double eps) {
  const char* op = "add_rmsnorm_forward";
  check_device_f32_or_bf16(*this, a, op, "a");
  const EwArg x = ew_arg(a, op, "a"), addend = activation_arg(*this, b, a, op, "b", true);
  const EwArg sum = activation_arg(*this, sum_out, a, op, "sum_out", true);
  const EwArg o = activation_arg(*this, out, a, op, "out", true);
  check_norm_operands(op, x.rows, {{rstd, "rstd"}}, {{weight, "weight"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  if (x.rows.rows == 0 || x.rows.cols == 0) return;
  DeviceGuard guard(index_);
  rmsnorm_forward_kernel<<<row_grid(x.rows.rows), norm_threads(x.rows.cols), 0, stream_>>>(
      o, rstd.ptr<float>(), x, addend, sum, ptr_or_null(weight), eps);
  CUDA_CHECK_LAUNCH(op);
}

// d_in [*, d] written, or added to when accumulate (skipped if undefined); d_weight [d] += sum_rows d_out *
// in * rstd (skipped if undefined; must be undefined when weight is).
void CudaBackend::rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight,
                                   Tensor rstd, bool accumulate) {
  const char* op = "rmsnorm_backward";
  SL_CHECK(!(accumulate && d_in.defined() && tensors_overlap(d_in, d_out)),
           "%s: d_in may not overlap d_out when accumulating", op);
  check_device_f32_or_bf16(*this, in, op, "in");
  const EwArg x = ew_arg(in, op, "in"), g = activation_arg(*this, d_out, in, op, "d_out", true);
  const EwArg dx = activation_arg(*this, d_in, in, op, "d_in");
  check_norm_operands(op, x.rows, {{rstd, "rstd"}}, {{weight, "weight"}, {d_weight, "d_weight"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  SL_CHECK(!d_weight.defined() || weight.defined(), "%s: d_weight given but there is no weight", op);
  if (x.rows.cols == 0) return;
  DeviceGuard guard(index_);
  // Parameter gradient first: d_in may alias d_out.
  if (d_weight.defined())
    column_reduce(*this, RmsWeightGradTerm{g, x, rstd.ptr<float>()}, x.rows.rows, x.rows.cols, d_weight.data,
                  DType::f32, 1);
  if (d_in.defined() && x.rows.rows > 0) {
    rmsnorm_backward_kernel<<<row_grid(x.rows.rows), norm_threads(x.rows.cols), 0, stream_>>>(
        dx, g, x, ptr_or_null(weight), rstd.ptr<float>(), accumulate);
    CUDA_CHECK_LAUNCH(op);
  }
}

// ---------------------------------------------------------------------------------------------------
// LayerNorm. in/out [*, d] (rows may be strided; out may alias in; f32 or bf16); weight, bias [d] or
// undefined; mean, rstd [*] written (f32).
void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias,
                                    double eps) {
  const char* op = "layernorm_forward";
  check_device_f32_or_bf16(*this, in, op, "in");
  const EwArg o = activation_arg(*this, out, in, op, "out", true), x = ew_arg(in, op, "in");
  check_norm_operands(op, x.rows, {{mean, "mean"}, {rstd, "rstd"}}, {{weight, "weight"}, {bias, "bias"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  if (x.rows.rows == 0 || x.rows.cols == 0) return;
  DeviceGuard guard(index_);
  layernorm_forward_kernel<<<row_grid(x.rows.rows), norm_threads(x.rows.cols), 0, stream_>>>(
      o, mean.ptr<float>(), rstd.ptr<float>(), x, ptr_or_null(weight), ptr_or_null(bias), eps);
  CUDA_CHECK_LAUNCH(op);
}

// d_in written (skipped if undefined); d_weight += sum_rows d_out * xhat; d_bias += sum_rows d_out
// (each skipped if undefined).
void CudaBackend::layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in,
                                     Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  check_device_f32_or_bf16(*this, in, op, "in");
  const EwArg x = ew_arg(in, op, "in"), g = activation_arg(*this, d_out, in, op, "d_out", true);
  const EwArg dx = activation_arg(*this, d_in, in, op, "d_in");
  check_norm_operands(op, x.rows, {{mean, "mean"}, {rstd, "rstd"}},
                      {{weight, "weight"}, {d_weight, "d_weight"}, {d_bias, "d_bias"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  SL_CHECK(!d_weight.defined() || weight.defined(), "%s: d_weight given but there is no weight", op);
  if (x.rows.cols == 0) return;
  DeviceGuard guard(index_);
  // Parameter gradients first: d_in may alias d_out.
  if (d_weight.defined() || d_bias.defined())
    column_reduce(*this, LnParamGradTerm{g, x, mean.ptr<float>(), rstd.ptr<float>()}, x.rows.rows, x.rows.cols,
                  d_weight.defined() ? d_weight.data : nullptr, DType::f32, 1,
                  d_bias.defined() ? d_bias.data : nullptr, DType::f32, 1);
  if (d_in.defined() && x.rows.rows > 0) {
    layernorm_backward_kernel<<<row_grid(x.rows.rows), norm_threads(x.rows.cols), 0, stream_>>>(
        dx, g, x, ptr_or_null(weight), mean.ptr<float>(), rstd.ptr<float>());
    CUDA_CHECK_LAUNCH(op);
  }
}

}  // namespace sinklab::cuda
